// Package control is hierarchical replication control across sites, the
// protocol of Zhang and Honeyman's "Hierarchical replication control in
// a global file system" (NFSv4 paper; docs/adr/0016-hierarchical-
// replication-control.md): the sites of a keyspace elect, by a one-round
// majority election, a primary site for a key (shallow control) or for
// every key under a prefix (deep control); the primary orders the writes
// under its control, other sites forward to it, and it releases control
// after an idle time once every site holds every update.
//
// A Machine is one site's replica of one control domain (a keyspace's
// volume: every key of a prefix lies in one volume, so a domain holds the
// whole prefix). It is a deterministic state machine: client operations
// (Write, Read), messages from other sites (Step) and time (Tick) in;
// decisions, messages (Messages) and records to persist (Persisted) out.
// It owns only who controls what; the data path (ordering, shipping,
// forwarding, durability) is its host's.
package control

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// Defaults.
const (
	// DefaultIdle is how long a primary keeps control with no write
	// under it (the paper's deep-control timer; 1 s in its evaluation).
	DefaultIdle = wire.Time(1e9)
	// DefaultRoundTimeout is how long a proposer waits for the replies of
	// one round before asking the silent sites again.
	DefaultRoundTimeout = wire.Time(500e6)
	// RevokeDivisor shortens a revoked control's remaining time to at
	// most Idle/RevokeDivisor (NOTES B3.7).
	RevokeDivisor = 10
	// DefaultLease is how long a grant of a site's membership lease
	// (ControlLeased) lasts, counted by the requester from when it sent
	// the request; a granting member waits LeaseWait before it accepts a
	// view without that site.
	DefaultLease = wire.Time(400e6)
	// RemoveAfterRounds is how many rounds a proposer waits for a view
	// member that answers none of its proposals before it proposes a view
	// without it (§2.3).
	RemoveAfterRounds = 3
	// endedKeep is how long a site remembers the newest ended ballot of
	// a site for a path, to ignore a late duplicate of its proposal.
	endedKeep = wire.Time(60e9)
	// sweepEvery is how often Tick forgets old revokes and ended
	// ballots: each sweep visits every path remembered.
	sweepEvery = wire.Time(1e9)
)

// Config configures a Machine.
type Config struct {
	// Self is this site; Sites are every site of the keyspace (the
	// paper's configured replication servers, N), Self included.
	Self  wire.SiteID
	Sites []wire.SiteID
	// Keyspace and Domain name the control domain in messages.
	Keyspace string
	Domain   uint32
	// Idle is the idle time after which a primary releases control
	// (DefaultIdle when zero); RoundTimeout a round's wait for replies
	// (DefaultRoundTimeout when zero).
	Idle         wire.Time
	RoundTimeout wire.Time
	// DeepMinDepth is the fewest segments a prefix needs to be deep
	// controlled (prefixes above it span control domains); 0 allows
	// the root.
	DeepMinDepth int
	// NoDeep turns deep control off: every election is for one key (the
	// paper's fine-grained control, its Fig. 6 baseline).
	NoDeep bool
	// Lease is how long a membership lease lasts (DefaultLease when
	// zero). A host reads its own copy of a key it does not control only
	// while a majority of the sites granted it a lease within that time.
	Lease wire.Time
	// Synced reports whether every site of the view holds every update
	// of path (a key, or every key under a prefix): a primary releases
	// control only then. Nil: always.
	Synced func(path string) bool
	// Durable is the keyspace's durability mode: true for durable (a
	// write is answered once a majority of sites hold it), false for
	// relaxed (the paper's: once the primary's own site does). It decides
	// what becomes of the controls of a site removed from the view:
	// durable, they wait until the host resynchronised its keys
	// (Resynced); relaxed, its keys are Unavailable until it returns or
	// the operator reassigns them (Reassign).
	Durable bool
	// LeaseSilence makes a member that has not asked for a lease on its
	// membership (ControlLease) for RemoveAfterRounds rounds one to
	// remove from the view: the host's sites ask every half lease, so a
	// crashed or cut-off site is removed even when no election of this
	// site needs its answer (a write of a key it controls is forwarded
	// to it and fails; nothing else would notice).
	LeaseSilence bool
	// Mutations are deliberate bugs, for tests that show the checks
	// catch them; zero in every real configuration.
	Mutations Mutations
}

// Mutations are deliberate protocol bugs (NOTES B4's mutations).
type Mutations struct {
	// VoteForTwo grants a proposal although the site acknowledged
	// another primary for the path.
	VoteForTwo bool
	// AbortIgnoresBallot forgets a vote on any abort or release from its
	// holder, whatever election it names.
	AbortIgnoresBallot bool
	// DeepOverControlledDescendant grants deep control of a prefix
	// without looking for another site's control under it.
	DeepOverControlledDescendant bool
	// AdoptViewWithoutMajority decides a proposed view as soon as it is
	// proposed, without a majority of acknowledgements.
	AdoptViewWithoutMajority bool
	// AcceptBelowPromise accepts a view change's accept request whose
	// ballot is below the acceptor's promise (Paxos's phase 2 unchecked).
	AcceptBelowPromise bool
	// IgnoreAcceptedViews proposes a view change's own view in phase 2
	// whatever views the promises report accepted.
	IgnoreAcceptedViews bool
}

// Kind is what a Decision tells the host to do with an operation.
type Kind uint8

const (
	// Serve: execute the operation here (this site controls the key, or
	// for a read, nobody does).
	Serve Kind = iota + 1
	// Forward: send the operation to Decision.Site, the primary.
	Forward
	// Wait: an election is running; ask again once Changed reports.
	Wait
	// Refuse: the key is not a valid path (Decision.Err).
	Refuse
	// Unavailable: the operation cannot run now and waiting may not help
	// (Decision.Err): this site is outside the active view, or (relaxed
	// mode) the key's primary is (Decision.Site), and only the newest copy,
	// at that primary, may be served. Never served stale, never forwarded
	// to a site outside the view.
	Unavailable
)

// Why an operation is Unavailable.
var (
	ErrExcluded       = errors.New("control: this site is outside the active view (resync and rejoin pending)")
	ErrHolderExcluded = errors.New("control: the key's primary site is outside the active view")
)

func (k Kind) String() string {
	switch k {
	case Serve:
		return "serve"
	case Forward:
		return "forward"
	case Wait:
		return "wait"
	case Refuse:
		return "refuse"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Decision says where an operation runs.
type Decision struct {
	Kind Kind
	Site wire.SiteID // Forward: the primary; Unavailable: the primary outside the view
	Err  error       // Refuse, Unavailable
}

// Vote is what a site acknowledged for a path: the primary (Holder) and
// the election (Ballot). Deep is true for a prefix.
type Vote struct {
	Holder wire.SiteID
	Ballot wire.Ballot
	Deep   bool
}

// ViewAcceptor is a site's Paxos acceptor state for view number N, the
// number after its own view's (ADR 16): the highest ballot it promised,
// and the ballot and view it accepted last (Accepted zero: none). It is
// persisted before any answer that depends on it.
type ViewAcceptor struct {
	N        uint64
	Promised wire.Ballot
	Accepted wire.Ballot
	View     wire.View
}

// RecordKind says what a Record changes.
type RecordKind uint8

// The kinds of durable change.
const (
	// RecordVote: the vote for Path set (Vote) or removed (Vote nil).
	RecordVote RecordKind = iota + 1
	// RecordNextBallot: the next ballot number (NextBallot).
	RecordNextBallot
	// RecordView: the active view adopted (View).
	RecordView
	// RecordViewAcceptor: the view acceptor state set (ViewAcceptor) or
	// removed (nil).
	RecordViewAcceptor
)

// Record is a change of durable state the host persists before it sends
// the messages of the same step.
type Record struct {
	Kind         RecordKind
	Path         string
	Vote         *Vote
	NextBallot   uint64
	View         wire.View
	ViewAcceptor *ViewAcceptor
}

// State is a site's durable state: the records it persisted, folded
// (Apply). Restore takes it after a restart.
type State struct {
	Votes        map[string]Vote
	NextBallot   uint64
	View         wire.View // zero: the initial view
	ViewAcceptor *ViewAcceptor
}

// Apply folds record r into s.
func (s *State) Apply(r Record) {
	switch r.Kind {
	case RecordVote:
		if s.Votes == nil {
			s.Votes = map[string]Vote{}
		}
		if r.Vote == nil {
			delete(s.Votes, r.Path)
		} else {
			s.Votes[r.Path] = *r.Vote
		}
	case RecordNextBallot:
		s.NextBallot = r.NextBallot
	case RecordView:
		s.View = wire.View{N: r.View.N, Members: slices.Clone(r.View.Members)}
	case RecordViewAcceptor:
		s.ViewAcceptor = r.ViewAcceptor.clone()
	}
}

// election is a proposal of this site in progress.
type election struct {
	ballot wire.Ballot
	deep   bool
	// key is the key whose write started it: a failed deep election
	// downgrades to a shallow one for it.
	key string
	// claim: a shallow election for a key under this site's own deep
	// control, which every site grants (§3.3).
	claim   bool
	acks    map[wire.SiteID]bool
	replies map[wire.SiteID]wire.Control // this round's refusals
	sentAt  wire.Time
	// rounds counts the rounds sent; silent, per view member, the
	// consecutive rounds it answered nothing (RemoveAfterRounds).
	rounds int
	silent map[wire.SiteID]int
}

// hold is a control this site won: a majority acknowledged it. It is
// ready (operations may be served under it) once every site of the view
// has (§2.3: so a read anywhere in the view sees the primary's writes).
type hold struct {
	ballot  wire.Ballot
	deep    bool
	ready   bool
	expires wire.Time
}

// Machine is one site's replication control of one domain.
type Machine struct {
	cfg      Config
	majority int
	// view is the active view (§2.3): its number and members (a majority
	// of the configured sites), persisted; members the same as a set.
	// acceptor is this site's Paxos acceptor state for number view.N+1,
	// persisted; change is its own view change in progress (the
	// proposer), also for number view.N+1.
	view     wire.View
	members  map[wire.SiteID]bool
	acceptor *ViewAcceptor
	change   *viewChange
	// rivalUntil: this site gives way to a view change of a larger site
	// until then; busyUntil: it starts no view change until then, another
	// site's being under way (viewchange.go).
	rivalUntil, busyUntil wire.Time
	// joining: this site was just added to the view and waits, before it
	// serves, until each member named said it has acknowledged every
	// control that member holds (ControlJoined). joinVotes: the paths it
	// acknowledged since it learned it was excluded; a vote for a member
	// granted before and not renewed by then is stale (nil after a
	// restart: unknown). resynced: excluded, the host resynchronised it,
	// it asks to be added (ControlJoin). asked: when it last asked.
	joining   map[wire.SiteID]bool
	joinVotes map[string]bool
	resynced  bool
	asked     wire.Time
	// joinAsks are the sites that asked this member to confirm the join
	// handshake before they had acknowledged all its elections: it
	// confirms as soon as they have, without waiting for their next ask.
	joinAsks map[wire.SiteID]bool
	// joinSilent counts, per member of joining, the handshake's rounds
	// it answered nothing: after RemoveAfterRounds this site proposes
	// its removal from the view, as a proposer does for a silent member
	// of an election, or it could wait for a crashed member forever.
	joinSilent map[wire.SiteID]int
	// leaseGrants is when this site last granted each site a lease on
	// its membership (ControlLeased); leasesUnknownUntil, after a
	// restart, when the leases it may have granted before ran out.
	leaseGrants        map[wire.SiteID]wire.Time
	leasesUnknownUntil wire.Time
	// leaseAsked is when each member last asked this site for a lease
	// (Config.LeaseSilence), or when this site started counting.
	leaseAsked map[wire.SiteID]wire.Time
	// removalSeen is when this site last saw a view change (its own or
	// another's prepare or accept request) that leaves each site out.
	removalSeen map[wire.SiteID]wire.Time

	// votes holds what this site acknowledged, its own elections
	// included; ancestry counts, per prefix and holder, the voted paths
	// strictly under the prefix (Fig. 3; updated at vote time, B3.9).
	votes    map[string]Vote
	ancestry map[string]map[wire.SiteID]int
	// ended remembers, per path and site, the newest ballot aborted or
	// released, so a late duplicate of its proposal is ignored.
	ended map[string]map[wire.SiteID]endedBallot

	nextBallot uint64
	elections  map[string]*election
	holds      map[string]*hold
	// yielded: this site aborted its election of the path for a
	// competitor, and forwards to it until the time given before it
	// tries again.
	yielded map[string]yield
	// revoked: when this site last asked the holder of a prefix to
	// release it.
	revoked map[string]wire.Time

	// sweptAt is when Tick last forgot old revokes and ended ballots.
	sweptAt wire.Time

	out     []wire.Control
	records []Record
	changed bool
	now     wire.Time
}

// yield is a wait for a competitor: operations go to it (or wait, when
// it is unknown) until the time given.
type yield struct {
	until wire.Time
	to    wire.SiteID
}

type endedBallot struct {
	n  uint64
	at wire.Time
}

// New returns the machine of site cfg.Self, with no votes.
func New(cfg Config) (*Machine, error) {
	if cfg.Idle == 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.RoundTimeout == 0 {
		cfg.RoundTimeout = DefaultRoundTimeout
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Idle < 0 || cfg.RoundTimeout < 0 || cfg.DeepMinDepth < 0 || cfg.Lease < 0 {
		return nil, fmt.Errorf("control: negative time or depth in %+v", cfg)
	}
	sites := slices.Clone(cfg.Sites)
	slices.Sort(sites)
	if len(sites) == 0 || len(slices.Compact(slices.Clone(sites))) != len(sites) {
		return nil, fmt.Errorf("control: sites %v: want distinct sites", cfg.Sites)
	}
	if !slices.Contains(sites, cfg.Self) || cfg.Self == 0 {
		return nil, fmt.Errorf("control: site %d is not among the sites %v", cfg.Self, sites)
	}
	cfg.Sites = sites
	m := &Machine{
		cfg:         cfg,
		majority:    len(sites)/2 + 1,
		view:        wire.View{Members: sites},
		members:     map[wire.SiteID]bool{},
		votes:       map[string]Vote{},
		ancestry:    map[string]map[wire.SiteID]int{},
		ended:       map[string]map[wire.SiteID]endedBallot{},
		nextBallot:  1,
		elections:   map[string]*election{},
		holds:       map[string]*hold{},
		yielded:     map[string]yield{},
		revoked:     map[string]wire.Time{},
		leaseGrants: map[wire.SiteID]wire.Time{},
		leaseAsked:  map[wire.SiteID]wire.Time{},
		removalSeen: map[wire.SiteID]wire.Time{},
	}
	for _, s := range sites {
		m.members[s] = true
	}
	return m, nil
}

// Restore loads what a site persisted after a restart, at time now. An
// acknowledgement of its own election is taken up again as that
// election, with the same ballot: sites that granted it grant it again,
// and it is released when idle like any other. Its view acceptor state
// for the next number is taken back; if it accepted a view of its own
// proposal, it proposes that view again (with a new ballot: it may have
// been decided while nobody learned it). A site whose view
// excludes it drops its own votes and waits to be resynchronised
// (Resynced). A site that restarts while joining (see Joining) restarts
// as a plain member: the join's wait is not persisted (ADR 16).
func (m *Machine) Restore(st State, now wire.Time) {
	m.now = now
	// Its grants of membership leases were not persisted: it accepts no
	// view that removes a site until any lease it granted ran out.
	m.leasesUnknownUntil = now + m.leaseWait()
	if st.NextBallot > m.nextBallot {
		m.nextBallot = st.NextBallot
	}
	if st.View.N > 0 {
		m.setView(st.View, false)
	}
	for _, p := range slices.Sorted(maps.Keys(st.Votes)) {
		m.setVote(p, st.Votes[p], false)
	}
	if a := st.ViewAcceptor; a != nil && a.N == m.view.N+1 {
		m.acceptor = a.clone()
	}
	if !m.members[m.cfg.Self] {
		m.leave()
		return
	}
	for _, p := range slices.Sorted(maps.Keys(m.votes)) {
		if v := m.votes[p]; v.Holder == m.cfg.Self {
			e := m.newElection(v.Ballot, v.Deep, p, false)
			m.elections[p] = e
			m.propose(p, e)
		}
	}
	if a := m.acceptor; a != nil && a.Accepted.Site == m.cfg.Self {
		m.proposeView(a.View)
	}
	// What happened while it was down is not known here: a site that was
	// joining when it crashed may not yet have acknowledged every control
	// of the members. Whatever it was doing, a restarted member serves
	// again only once every other member confirmed it acknowledged their
	// controls (the join handshake, ControlJoined), so it never reads its
	// own copy of a key another site controls.
	m.joining = map[wire.SiteID]bool{}
	for _, s := range m.view.Members {
		if s != m.cfg.Self {
			m.joining[s] = true
		}
	}
	if len(m.joining) == 0 {
		m.joining = nil
		return
	}
	m.askJoined()
}

func (m *Machine) newElection(b wire.Ballot, deep bool, key string, claim bool) *election {
	return &election{ballot: b, deep: deep, key: key, claim: claim,
		acks: map[wire.SiteID]bool{m.cfg.Self: true}, silent: map[wire.SiteID]int{}}
}

// Messages returns and clears the messages to send, each to its To site.
func (m *Machine) Messages() []wire.Control {
	out := m.out
	m.out = nil
	return out
}

// Persisted returns and clears the records to persist before the
// messages of the same step leave.
func (m *Machine) Persisted() []Record {
	r := m.records
	m.records = nil
	return r
}

// Changed reports, and clears, whether control changed since the last
// call in a way that may let a waiting operation go on (an election won
// or lost, a control released, a wait for a competitor over): the host
// asks again for its waiting operations.
func (m *Machine) Changed() bool {
	c := m.changed
	m.changed = false
	return c
}

// Controller returns the vote that controls path at this site: a vote
// for path itself, or deep control of a prefix above it.
func (m *Machine) Controller(path string) (Vote, string, bool) {
	if v, ok := m.votes[path]; ok && (v.Deep || !wire.IsPrefixPath(path)) {
		return v, path, true
	}
	for _, a := range wire.Ancestors(path) {
		if v, ok := m.votes[a]; ok && v.Deep {
			return v, a, true
		}
	}
	return Vote{}, "", false
}

// Write decides where a write of key runs, at time now. A write under
// this site's control resets the control's idle timer.
func (m *Machine) Write(key string, now wire.Time) Decision {
	m.now = now
	if err := checkKey(key); err != nil {
		return Decision{Kind: Refuse, Err: err}
	}
	if d, ok := m.viewDecision(); ok {
		return d
	}
	v, via, ok := m.Controller(key)
	if ok && v.Holder != m.cfg.Self && !m.members[v.Holder] {
		return m.lostHolder(v.Holder)
	}
	if ok && v.Holder != m.cfg.Self {
		if last, sent := m.revoked[via]; via != key && (!sent || now-last >= m.cfg.Idle/RevokeDivisor) {
			m.revoked[via] = now
			m.send(wire.Control{Kind: wire.ControlRevoke, To: v.Holder, Path: via, Deep: true})
		}
		return Decision{Kind: Forward, Site: v.Holder}
	}
	if h := m.holds[key]; h != nil && h.ready {
		h.expires = now + m.cfg.Idle
		return Decision{Kind: Serve}
	}
	if _, h := m.deepHold(key); h != nil {
		// A write under this site's deep control of p: served at once.
		// The key takes shallow control of its own (a claim every site
		// grants), so its later writes keep only its own timer alive,
		// not the prefix's (§3.3); this first one resets the prefix's
		// timer: it created or first changed the key.
		if _, claimed := m.votes[key]; !claimed {
			h.expires = now + m.cfg.Idle
			m.startElection(key, key, false, true)
		}
		return Decision{Kind: Serve}
	}
	if ok {
		return Decision{Kind: Wait} // this site's election is running
	}
	// Uncontrolled here. An election of ours for the key or a prefix
	// above it may be running, or we gave way to a competitor.
	if y, ok := m.yielding(key, now); ok {
		if y.to != 0 && !m.members[y.to] {
			return m.lostHolder(y.to)
		}
		if y.to != 0 {
			return Decision{Kind: Forward, Site: y.to}
		}
		return Decision{Kind: Wait}
	}
	if m.electionCovering(key) {
		return Decision{Kind: Wait}
	}
	if parent := wire.Ancestors(key)[0]; m.deepAllowed(parent) {
		m.startElection(parent, key, true, false)
	} else {
		m.startElection(key, key, false, false)
	}
	return Decision{Kind: Wait}
}

// deepHold returns this site's ready deep control of a prefix above key.
func (m *Machine) deepHold(key string) (string, *hold) {
	for _, a := range wire.Ancestors(key) {
		if h := m.holds[a]; h != nil && h.deep && h.ready {
			return a, h
		}
	}
	return "", nil
}

// checkKey refuses what is not a key path: empty segments, or a prefix.
func checkKey(key string) error {
	if err := wire.CheckPath(key, false); err != nil {
		return err
	}
	if wire.IsPrefixPath(key) {
		return fmt.Errorf("%w: %q names a prefix, not a key", wire.ErrEmptyPathSegment, key)
	}
	return nil
}

// Read decides where a read of key runs: here unless another site
// controls the key (forwarded to it, the single copy) or an election of
// this site's for it is running (wait: another site may have won).
func (m *Machine) Read(key string) Decision {
	if err := checkKey(key); err != nil {
		return Decision{Kind: Refuse, Err: err}
	}
	if d, ok := m.viewDecision(); ok {
		return d
	}
	v, _, ok := m.Controller(key)
	switch {
	case ok && v.Holder != m.cfg.Self && !m.members[v.Holder]:
		return m.lostHolder(v.Holder)
	case ok && v.Holder != m.cfg.Self:
		return Decision{Kind: Forward, Site: v.Holder}
	case ok:
		if h := m.holds[key]; h != nil && h.ready {
			return Decision{Kind: Serve}
		}
		if _, h := m.deepHold(key); h != nil {
			return Decision{Kind: Serve}
		}
		return Decision{Kind: Wait}
	}
	return Decision{Kind: Serve}
}

// viewDecision answers every operation at a site outside the view
// (Unavailable) or joining it (Wait).
func (m *Machine) viewDecision() (Decision, bool) {
	switch {
	case !m.members[m.cfg.Self]:
		return Decision{Kind: Unavailable, Err: ErrExcluded}, true
	case len(m.joining) > 0:
		return Decision{Kind: Wait}, true
	}
	return Decision{}, false
}

// lostHolder answers an operation of a key controlled by a site outside
// the view (§2.3): durable, it waits until the host resynchronised the
// site's keys (Resynced); relaxed, it is Unavailable until the site
// returns or the operator reassigns its keys (Reassign).
func (m *Machine) lostHolder(s wire.SiteID) Decision {
	if m.cfg.Durable {
		return Decision{Kind: Wait}
	}
	return Decision{Kind: Unavailable, Site: s, Err: ErrHolderExcluded}
}

// deepAllowed reports whether this site may ask for deep control of
// prefix p: deep control is on, p is deep enough, and no other site
// controls anything under p as far as this site knows (Fig. 2).
func (m *Machine) deepAllowed(p string) bool {
	if m.cfg.NoDeep || wire.PathDepth(p) < m.cfg.DeepMinDepth {
		return false
	}
	for s, n := range m.ancestry[p] {
		if s != m.cfg.Self && n > 0 {
			return false
		}
	}
	if v, ok := m.votes[p]; ok && v.Holder != m.cfg.Self {
		return false
	}
	return true
}

// electionCovering reports whether an election of this site for key, or
// for deep control of a prefix above it, is running.
func (m *Machine) electionCovering(key string) bool {
	if _, ok := m.elections[key]; ok {
		return true
	}
	for _, a := range wire.Ancestors(key) {
		if e, ok := m.elections[a]; ok && e.deep {
			return true
		}
	}
	return false
}

func (m *Machine) yielding(key string, now wire.Time) (yield, bool) {
	paths := append([]string{key}, wire.Ancestors(key)...)
	for _, p := range paths {
		if y, ok := m.yielded[p]; ok && now < y.until {
			return y, true
		}
	}
	return yield{}, false
}

// startElection proposes this site as primary of path (Fig. 1): it
// acknowledges itself, then asks every other site of the view.
func (m *Machine) startElection(path, key string, deep, claim bool) {
	if v, _, ok := m.Controller(path); ok && v.Holder != m.cfg.Self {
		// Another site's proposal for the path arrived since the write
		// asked: the write goes to it.
		m.changed = true
		return
	}
	e := m.newElection(m.takeBallot(), deep, key, claim)
	b := e.ballot
	m.elections[path] = e
	delete(m.yielded, path)
	m.setVote(path, Vote{Holder: m.cfg.Self, Ballot: b, Deep: deep}, true)
	m.propose(path, e)
	m.settle(path, e)
}

// takeBallot returns a new ballot of this site, its number persisted.
func (m *Machine) takeBallot() wire.Ballot {
	b := wire.Ballot{N: m.nextBallot, Site: m.cfg.Self}
	m.nextBallot++
	m.records = append(m.records, Record{Kind: RecordNextBallot, NextBallot: m.nextBallot})
	return b
}

// propose sends e's proposal to every site of the view that has not
// acknowledged it, and starts a round. A member that answered none of
// RemoveAfterRounds rounds of an election is proposed for removal from
// the view (§2.3).
func (m *Machine) propose(path string, e *election) {
	var silent []wire.SiteID
	for _, s := range m.view.Members {
		if e.acks[s] || e.rounds == 0 {
			continue
		}
		if _, replied := e.replies[s]; replied {
			e.silent[s] = 0
		} else if e.silent[s]++; e.silent[s] >= RemoveAfterRounds {
			silent = append(silent, s)
		}
	}
	e.rounds++
	e.sentAt = m.now
	e.replies = map[wire.SiteID]wire.Control{}
	for _, s := range m.view.Members {
		if !e.acks[s] {
			m.ask(path, e, s)
		}
	}
	for _, s := range silent {
		m.proposeRemoval(s)
	}
}

// ask sends e's proposal to s.
func (m *Machine) ask(path string, e *election, s wire.SiteID) {
	m.send(wire.Control{Kind: wire.ControlPropose, To: s, Ballot: e.ballot, Path: path, Deep: e.deep})
}

// settle moves election e on after a reply or a round's end: won (a
// majority: the path is held), ready (the whole view acknowledged: the
// election is over), or, with a round answered without a majority,
// given up for a competitor (Fig. 1), downgraded (Fig. 4), or another
// round.
func (m *Machine) settle(path string, e *election) {
	roundOver := m.now-e.sentAt >= m.cfg.RoundTimeout
	if len(e.acks) >= m.majority {
		h := m.holds[path]
		if h == nil {
			h = &hold{ballot: e.ballot, deep: e.deep, expires: m.now + m.cfg.Idle}
			m.holds[path] = h
		}
		switch {
		case m.allAcked(e):
			h.ready = true
			delete(m.elections, path)
			m.changed = true
		case roundOver:
			m.propose(path, e) // the rest of the view must learn it too
		}
		return
	}
	if !roundOver {
		roundOver = true
		for _, s := range m.view.Members {
			if _, replied := e.replies[s]; !e.acks[s] && !replied {
				roundOver = false
			}
		}
	}
	if !roundOver {
		return
	}
	refused := len(e.replies) > 0
	switch {
	case e.deep && refused:
		// A deep request that cannot gather a majority becomes a shallow
		// one for the key whose write asked for it (§3.2). An election
		// restored after a restart, or asked again of a site that
		// rejoined, knows no key: it is given up (a write under the
		// prefix asks again), or it would be refused for ever, and a site
		// joining the view would wait for it for ever.
		m.abort(path, e, yield{})
		if !wire.IsPrefixPath(e.key) {
			m.startElection(e.key, e.key, false, false)
		}
	case refused:
		if to, ok := m.mustYield(e); ok {
			m.abort(path, e, yield{until: m.now + 2*m.cfg.RoundTimeout, to: to})
		} else if m.now-e.sentAt >= m.cfg.RoundTimeout {
			m.propose(path, e)
		}
		// Otherwise every site answered before the round's time was up,
		// some refusing, and nobody it must give way to: it asks again
		// when the round ends (Tick), not at once, or two sites that
		// refuse each other would trade proposals as fast as the network
		// carries them.
	default:
		m.propose(path, e)
	}
}

// mustYield applies Fig. 1's contention rule to a round's refusals: give
// way if a competitor is acknowledged by a majority, or has a larger id;
// to is the competitor operations go to meanwhile (the one most sites
// named, larger id first).
func (m *Machine) mustYield(e *election) (to wire.SiteID, yield bool) {
	count := map[wire.SiteID]int{}
	for _, r := range e.replies {
		if r.Holder != 0 && r.Err == wire.ErrNone {
			count[r.Holder]++
		}
	}
	for _, c := range slices.Sorted(maps.Keys(count)) {
		if c > m.cfg.Self || count[c] >= m.majority {
			yield = true
		}
		if to == 0 || count[c] >= count[to] {
			to = c
		}
	}
	if to == m.cfg.Self {
		to = 0
	}
	return to, yield
}

// abort withdraws election e of path: the sites that acknowledged it
// forget it, and this site waits until yieldUntil before trying again.
func (m *Machine) abort(path string, e *election, y yield) {
	for _, s := range slices.Sorted(maps.Keys(e.acks)) {
		if s != m.cfg.Self {
			m.send(wire.Control{Kind: wire.ControlAbort, To: s, Ballot: e.ballot, Path: path, Deep: e.deep})
		}
	}
	delete(m.elections, path)
	delete(m.holds, path)
	m.dropVote(path, m.cfg.Self, e.ballot)
	if y.until > m.now {
		m.yielded[path] = y
	}
	m.changed = true
}

func (m *Machine) allAcked(e *election) bool {
	for _, s := range m.view.Members {
		if !e.acks[s] {
			return false
		}
	}
	return true
}

// Step handles a control message from another site at time now.
func (m *Machine) Step(msg wire.Control, now wire.Time) {
	m.now = now
	if msg.To != m.cfg.Self || !m.knownSite(msg.From) {
		if isRequest(msg.Kind) && m.knownSite(msg.From) {
			m.reply(msg, false, Vote{}, wire.ErrNotInView)
		}
		return
	}
	if err := m.checkMessage(msg); err != nil {
		if isRequest(msg.Kind) {
			m.reply(msg, false, Vote{}, wire.ErrBadRequest)
		}
		return
	}
	if carriesView(msg) {
		// A refusal for the view's sake: it may tell this site it is
		// outside the view (§2.3) or bring its view up to date.
		m.learnView(msg)
	}
	switch {
	case msg.Kind == wire.ControlView:
		m.onView(msg)
		return
	case msg.Kind == wire.ControlJoin && !m.members[msg.From]:
		m.onJoin(msg)
		return
	case !m.members[msg.From]:
		// §2.3: a member denies every request of a site outside its
		// view; the refusal, with the view, tells the site it is out.
		if !isAnswer(msg.Kind) || msg.Err == wire.ErrNone {
			m.reply(msg, false, Vote{}, wire.ErrNotInView)
		}
		return
	}
	if msg.Kind == wire.ControlLease {
		m.onLease(msg)
		return
	}
	if msg.Path == wire.ViewPath {
		m.stepView(msg)
		return
	}
	switch msg.Kind {
	case wire.ControlPropose:
		m.onPropose(msg)
	case wire.ControlVote:
		m.onVote(msg)
	case wire.ControlAbort, wire.ControlRelease:
		m.dropVote(msg.Path, msg.From, msg.Ballot)
	case wire.ControlCheck:
		m.onCheck(msg)
	case wire.ControlRevoke:
		if h := m.holds[msg.Path]; h != nil && h.deep {
			if soon := now + m.cfg.Idle/RevokeDivisor; soon < h.expires {
				h.expires = soon
			}
		}
	}
}

// onLease answers a member's request for a lease on its membership
// (ADR 16): granted, and remembered so that no view without it is
// accepted before the lease ran out, unless this site is about to
// propose its removal (it has not answered this site's proposals for
// RemoveAfterRounds-1 rounds, or a change without it is under way): a
// site whose reader still hears this one while its head does not must
// not keep itself in the view forever.
func (m *Machine) onLease(msg wire.Control) {
	m.leaseAsked[msg.From] = m.now
	if msg.View.N < m.view.N {
		// The asker missed a decided view (its ControlView was lost, or
		// went to a server that is not its head): it learns it here, as
		// leases are asked for all the time.
		m.send(wire.Control{Kind: wire.ControlView, To: msg.From, Path: wire.ViewPath, View: m.View()})
	}
	ans := wire.Control{Kind: wire.ControlLeased, To: msg.From, Ballot: msg.Ballot, Path: wire.ViewPath}
	if !m.removing(msg.From) {
		m.leaseGrants[msg.From] = m.now
		ans.Granted = true
	}
	m.send(ans)
}

// removeLeaseSilent proposes the removal of a member that has not asked
// for a lease for RemoveAfterRounds rounds (Config.LeaseSilence).
func (m *Machine) removeLeaseSilent() {
	if !m.cfg.LeaseSilence || !m.members[m.cfg.Self] || m.change != nil {
		return
	}
	for _, s := range m.view.Members {
		at, ok := m.leaseAsked[s]
		switch {
		case s == m.cfg.Self:
		case !ok:
			m.leaseAsked[s] = m.now // counted from now
		case m.now-at >= RemoveAfterRounds*m.cfg.RoundTimeout:
			m.leaseAsked[s] = m.now // (once per silence: proposed again after as long)
			m.proposeRemoval(s)
		}
	}
}

// removing reports whether this site is about to remove s from the view,
// or is doing so.
func (m *Machine) removing(s wire.SiteID) bool {
	if c := m.change; c != nil && !c.value.Has(s) {
		return true
	}
	if a := m.acceptor; a != nil && a.N == m.view.N+1 && !a.Accepted.IsZero() && !a.View.Has(s) {
		// This site accepted a view without s, which a majority may have
		// decided without this site learning it yet (it restarted, or
		// the ControlView was lost): a lease would promise s the
		// opposite (sim seed 370).
		return true
	}
	if at, ok := m.removalSeen[s]; ok && m.now-at < viewYieldRounds*m.cfg.RoundTimeout {
		return true
	}
	if m.joinSilent[s] >= RemoveAfterRounds {
		return true
	}
	for _, e := range m.elections {
		if e.silent[s] >= RemoveAfterRounds-1 {
			return true
		}
	}
	return false
}

func (m *Machine) knownSite(s wire.SiteID) bool {
	return slices.Contains(m.cfg.Sites, s) && s != m.cfg.Self
}

// checkMessage refuses what no correct site sends: an unknown kind, a
// bad path, a ballot not of its sender, deep control of a key.
func (m *Machine) checkMessage(msg wire.Control) error {
	if !msg.Kind.Valid() {
		return fmt.Errorf("unknown control kind %d", msg.Kind)
	}
	if msg.Path == wire.ViewPath || msg.Kind.IsViewKind() {
		return m.checkViewMessage(msg)
	}
	if carriesView(msg) {
		if err := m.checkView(msg.View); err != nil {
			return err
		}
	}
	if err := wire.CheckPath(msg.Path, msg.Deep); err != nil {
		return err
	}
	if msg.Deep != wire.IsPrefixPath(msg.Path) {
		return fmt.Errorf("control of %q: deep is %v", msg.Path, msg.Deep)
	}
	switch msg.Kind {
	case wire.ControlPropose, wire.ControlAbort, wire.ControlRelease:
		if msg.Ballot.Site != msg.From || msg.Ballot.N == 0 {
			return fmt.Errorf("ballot %v is not of site %d", msg.Ballot, msg.From)
		}
	case wire.ControlVote, wire.ControlCheck:
		if msg.Ballot.Site != m.cfg.Self {
			return fmt.Errorf("%v of ballot %v of another site", msg.Kind, msg.Ballot)
		}
	}
	return nil
}

// onPropose answers a proposal (Fig. 1, with Fig. 2's validation): grant
// unless this site acknowledged another primary for the path, a prefix
// above it is deep controlled by another, or, for deep control, another
// site controls something under it (one ancestry-table lookup).
func (m *Machine) onPropose(msg wire.Control) {
	p, from := msg.Path, msg.From
	if e, ok := m.ended[p][from]; ok && msg.Ballot.N <= e.n {
		return // a late duplicate of a proposal since withdrawn
	}
	if !m.members[m.cfg.Self] {
		// Outside the view, this site's vote counts at no member that
		// knows the view, and a member that counted it not would never
		// withdraw it: the vote would outlive the election and refuse
		// every later proposer of p after this site returns. It
		// refuses, with its view, and votes again once admitted.
		m.reply(msg, false, Vote{}, wire.ErrNotInView)
		return
	}
	if v, ok := m.votes[p]; ok {
		switch {
		case v.Holder != from && !(mutation.Enabled && m.cfg.Mutations.VoteForTwo):
			m.reply(msg, false, v, wire.ErrNone)
			m.checkVote(p, v)
			return
		case msg.Ballot.Less(v.Ballot):
			return // older than the sender's election we acknowledged
		}
	}
	for _, a := range wire.Ancestors(p) {
		if v, ok := m.votes[a]; ok && v.Deep && v.Holder != from {
			m.reply(msg, false, v, wire.ErrNone)
			m.checkVote(a, v)
			return
		}
	}
	if msg.Deep && !(mutation.Enabled && m.cfg.Mutations.DeepOverControlledDescendant) {
		for _, s := range slices.Sorted(maps.Keys(m.ancestry[p])) {
			if s != from && m.ancestry[p][s] > 0 {
				m.reply(msg, false, Vote{}, wire.ErrNone)
				for _, q := range slices.Sorted(maps.Keys(m.votes)) {
					if v := m.votes[q]; v.Holder != from && hasPrefix(q, p) {
						m.checkVote(q, v)
					}
				}
				return
			}
		}
	}
	m.setVote(p, Vote{Holder: from, Ballot: msg.Ballot, Deep: msg.Deep}, true)
	if m.joinVotes != nil {
		m.joinVotes[p] = true
	}
	m.reply(msg, true, Vote{}, wire.ErrNone)
}

// checkVote asks the holder of this site's vote v for p, which just
// refused another proposer for p or for a prefix of it, whether v's
// ballot still stands. The Abort or Release that ended it may have been
// lost, or sent while this site was outside the holder's view: the vote
// would refuse every later proposer of p for ever (found by the
// simulator, seeds 43 and 85).
func (m *Machine) checkVote(p string, v Vote) {
	if v.Holder != m.cfg.Self {
		m.send(wire.Control{Kind: wire.ControlCheck, To: v.Holder, Ballot: v.Ballot, Path: p, Deep: v.Deep})
	}
}

// onCheck answers a ControlCheck of this site's ballot for a path: a
// Release of the ballot unless an election, a control or this site's own
// vote of that ballot still stands.
func (m *Machine) onCheck(msg wire.Control) {
	p, b := msg.Path, msg.Ballot
	if e := m.elections[p]; e != nil && e.ballot == b {
		return
	}
	if h := m.holds[p]; h != nil && h.ballot == b {
		return
	}
	if v, ok := m.votes[p]; ok && v.Holder == m.cfg.Self && v.Ballot == b {
		return
	}
	m.send(wire.Control{Kind: wire.ControlRelease, To: msg.From, Ballot: b, Path: p, Deep: msg.Deep})
}

// isRequest reports whether a message of kind k asks for an answer: a
// proposal (an election's, or a view change's phase 1) or a view
// change's accept request (phase 2).
func isRequest(k wire.ControlKind) bool {
	return k == wire.ControlPropose || k == wire.ControlAccept || k == wire.ControlLease
}

// isAnswer reports whether a message of kind k answers a request.
func isAnswer(k wire.ControlKind) bool {
	return k == wire.ControlVote || k == wire.ControlAccepted
}

// reply answers msg with a vote (Accepted for an accept request); a
// refusal for the view's sake carries this site's view.
func (m *Machine) reply(msg wire.Control, granted bool, holder Vote, err wire.ErrCode) {
	kind := wire.ControlVote
	if msg.Kind == wire.ControlAccept {
		kind = wire.ControlAccepted
	}
	c := wire.Control{Kind: kind, To: msg.From, Ballot: msg.Ballot, Path: msg.Path, Deep: msg.Deep,
		Granted: granted, Holder: holder.Holder, HolderBallot: holder.Ballot, Err: err}
	switch {
	case err == wire.ErrNotInView || err == wire.ErrStaleView:
		c.View = m.view
	case msg.Path == wire.ViewPath:
		c.View = msg.View
	}
	m.send(c)
}

func (m *Machine) onVote(msg wire.Control) {
	e, ok := m.elections[msg.Path]
	if !ok || e.ballot != msg.Ballot {
		return // a vote for an election over or withdrawn
	}
	if msg.Granted {
		e.acks[msg.From] = true
		delete(e.replies, msg.From)
	} else if !e.acks[msg.From] {
		e.replies[msg.From] = msg
	}
	m.settle(msg.Path, e)
	if msg.Granted && m.joinAsks[msg.From] && m.ackedAllElections(msg.From) {
		delete(m.joinAsks, msg.From)
		m.confirmJoined(msg.From)
	}
}

// Tick advances time: rounds that timed out are settled, idle controls
// released once every site holds their updates, waits for a competitor
// ended.
func (m *Machine) Tick(now wire.Time) {
	m.now = now
	for _, p := range slices.Sorted(maps.Keys(m.elections)) {
		if e := m.elections[p]; e != nil && now-e.sentAt >= m.cfg.RoundTimeout {
			m.settle(p, e)
		}
	}
	var due []string
	for p, h := range m.holds {
		if h.ready && now >= h.expires {
			due = append(due, p)
		}
	}
	slices.Sort(due) // messages in a deterministic order
	for _, p := range due {
		if h := m.holds[p]; h != nil && m.canRelease(p) {
			m.release(p, h)
		}
	}
	for p, y := range m.yielded {
		if now >= y.until {
			delete(m.yielded, p)
			m.changed = true
		}
	}
	m.tickView()
	m.removeLeaseSilent()
	if now < m.sweptAt+sweepEvery {
		return
	}
	m.sweptAt = now
	for p, at := range m.revoked {
		if now-at >= m.cfg.Idle {
			delete(m.revoked, p)
		}
	}
	for p, bySite := range m.ended {
		for s, e := range bySite {
			if now-e.at > endedKeep {
				delete(bySite, s)
			}
		}
		if len(bySite) == 0 {
			delete(m.ended, p)
		}
	}
}

// canRelease reports whether control of p may end: every site has every
// update under it, and no claim under a deep p is still being granted
// (its grant relies on p being held).
func (m *Machine) canRelease(p string) bool {
	if m.cfg.Synced != nil && !m.cfg.Synced(p) {
		return false
	}
	if wire.IsPrefixPath(p) {
		for q, e := range m.elections {
			if e.claim && hasPrefix(q, p) {
				return false
			}
		}
	}
	return true
}

func hasPrefix(path, prefix string) bool {
	return len(path) > len(prefix) && path[:len(prefix)] == prefix
}

// release ends this site's control of p and tells every site.
func (m *Machine) release(p string, h *hold) {
	for _, s := range m.view.Members {
		if s != m.cfg.Self {
			m.send(wire.Control{Kind: wire.ControlRelease, To: s, Ballot: h.ballot, Path: p, Deep: h.deep})
		}
	}
	delete(m.holds, p)
	m.dropVote(p, m.cfg.Self, h.ballot)
	m.changed = true
}

// setVote records a vote and counts it in the ancestry table.
func (m *Machine) setVote(p string, v Vote, persist bool) {
	if old, ok := m.votes[p]; ok {
		m.count(p, old.Holder, -1)
	}
	m.votes[p] = v
	m.count(p, v.Holder, +1)
	if persist {
		vv := v
		m.records = append(m.records, Record{Kind: RecordVote, Path: p, Vote: &vv})
	}
}

// dropVote forgets the vote for p if it is holder's of ballot b: an
// abort or release of an older election changes nothing (B3.1).
func (m *Machine) dropVote(p string, holder wire.SiteID, b wire.Ballot) {
	if m.ended[p] == nil {
		m.ended[p] = map[wire.SiteID]endedBallot{}
	}
	if e := m.ended[p][holder]; b.N > e.n {
		m.ended[p][holder] = endedBallot{n: b.N, at: m.now}
	}
	v, ok := m.votes[p]
	if !ok || v.Holder != holder || v.Ballot != b && !(mutation.Enabled && m.cfg.Mutations.AbortIgnoresBallot) {
		return
	}
	delete(m.votes, p)
	m.count(p, holder, -1)
	m.records = append(m.records, Record{Kind: RecordVote, Path: p})
	m.changed = true
}

func (m *Machine) count(p string, holder wire.SiteID, d int) {
	for _, a := range wire.Ancestors(p) {
		c := m.ancestry[a]
		if c == nil {
			c = map[wire.SiteID]int{}
			m.ancestry[a] = c
		}
		c[holder] += d
		if c[holder] == 0 {
			delete(c, holder)
		}
		if len(c) == 0 {
			delete(m.ancestry, a)
		}
	}
}

func (m *Machine) send(c wire.Control) {
	c.Keyspace, c.Domain, c.From = m.cfg.Keyspace, m.cfg.Domain, m.cfg.Self
	m.out = append(m.out, c)
}

// Holds returns the paths this site controls and whether each is ready.
func (m *Machine) Holds() map[string]bool {
	out := map[string]bool{}
	for p, h := range m.holds {
		out[p] = h.ready
	}
	return out
}

// VotesFor reports whether this site still votes for site as the primary
// of some path (a returning site waits until no member does, in durable
// mode: they have its writes; docs/adr/0016).
func (m *Machine) VotesFor(site wire.SiteID) bool {
	for _, v := range m.votes {
		if v.Holder == site {
			return true
		}
	}
	return false
}

// Votes returns a copy of this site's votes.
func (m *Machine) Votes() map[string]Vote { return maps.Clone(m.votes) }

// Self returns the machine's site.
func (m *Machine) Self() wire.SiteID { return m.cfg.Self }
