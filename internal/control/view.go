package control

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// The active view (§2.3; ADR 16, "Active view"). A view is a number and
// its members, always a majority of the configured sites; every site
// persists the view it adopted. The view with number N+1 is decided by
// single-decree Paxos among the configured sites whose view is N
// (viewchange.go), so each decided view follows the one before it and no
// two sites adopt different views with one number; the proposer sends the
// decided view to every member of the old and the new view. A site adopts
// a view only with a larger number.

// View returns the active view as this site knows it.
func (m *Machine) View() wire.View {
	return wire.View{N: m.view.N, Members: slices.Clone(m.view.Members)}
}

// Excluded reports whether this site is outside its own view: it serves
// nothing (Unavailable) until its host resynchronised it (Resynced with
// its own id) and a member added it back.
func (m *Machine) Excluded() bool { return !m.members[m.cfg.Self] }

// Joining reports whether this site, just added to the view, waits for
// every member to confirm it acknowledged their controls (ControlJoined)
// before it serves (Wait).
func (m *Machine) Joining() bool { return len(m.joining) > 0 }

// checkView checks that v may be a view: members configured, in
// increasing order, at least a majority of the configured sites.
func (m *Machine) checkView(v wire.View) error {
	if !slices.IsSorted(v.Members) || len(slices.Compact(slices.Clone(v.Members))) != len(v.Members) {
		return fmt.Errorf("view %v: members not in increasing order", v)
	}
	for _, s := range v.Members {
		if !slices.Contains(m.cfg.Sites, s) {
			return fmt.Errorf("view %v: site %d is not configured", v, s)
		}
	}
	if len(v.Members) < m.majority {
		return fmt.Errorf("view %v: fewer than a majority (%d) of the %d sites", v, m.majority, len(m.cfg.Sites))
	}
	return nil
}

// checkViewMessage checks a message of the view protocol: on ViewPath,
// not deep, a ballot of its sender (prepare, accept request) or of this
// site (an answer), a proper view where one is needed. Fig. 1's abort,
// release and revoke have no place in it.
func (m *Machine) checkViewMessage(msg wire.Control) error {
	if msg.Path != wire.ViewPath || msg.Deep {
		return fmt.Errorf("%v on path %q (deep %v): view messages use %q", msg.Kind, msg.Path, msg.Deep, wire.ViewPath)
	}
	switch msg.Kind {
	case wire.ControlPropose, wire.ControlAccept:
		if msg.Ballot.Site != msg.From || msg.Ballot.N == 0 {
			return fmt.Errorf("ballot %v is not of site %d", msg.Ballot, msg.From)
		}
	case wire.ControlVote, wire.ControlAccepted:
		// A refusal for the view's sake may answer a message without a
		// ballot (ControlJoined from a site the refuser removed).
		if msg.Ballot.Site != m.cfg.Self && !carriesView(msg) {
			return fmt.Errorf("answer for ballot %v of another site", msg.Ballot)
		}
	case wire.ControlAbort, wire.ControlRelease, wire.ControlRevoke:
		return fmt.Errorf("%v of the view", msg.Kind)
	}
	if isRequest(msg.Kind) || msg.Kind == wire.ControlView || carriesView(msg) || isAnswer(msg.Kind) && !msg.View.IsZero() {
		return m.checkView(msg.View)
	}
	return nil
}

// carriesView reports whether msg is a refusal for the view's sake, which
// carries its sender's view.
func carriesView(msg wire.Control) bool {
	return isAnswer(msg.Kind) && (msg.Err == wire.ErrNotInView || msg.Err == wire.ErrStaleView)
}

// stepView handles a message of the view protocol from a member.
func (m *Machine) stepView(msg wire.Control) {
	switch msg.Kind {
	case wire.ControlPropose:
		m.onPrepare(msg)
	case wire.ControlVote:
		m.onPromise(msg)
	case wire.ControlAccept:
		m.onAccept(msg)
	case wire.ControlAccepted:
		m.onAccepted(msg)
	case wire.ControlJoin:
		// A member asks to join: it missed the view that added it.
		m.send(wire.Control{Kind: wire.ControlView, To: msg.From, Path: wire.ViewPath, View: m.View()})
	case wire.ControlJoined:
		m.onJoined(msg)
	}
}

// learnView adopts the view a refusal carries if it is newer (it was
// decided: its sender adopted it), or brings a refuser that is behind up
// to this site's view.
func (m *Machine) learnView(msg wire.Control) {
	switch {
	case msg.View.N > m.view.N && msg.View.Has(msg.From):
		m.adoptView(msg.View)
	case msg.View.N < m.view.N:
		m.send(wire.Control{Kind: wire.ControlView, To: msg.From, Path: wire.ViewPath, View: m.View()})
	}
}

// proposeRemoval proposes a view without s, a member silent for
// RemoveAfterRounds rounds, if the rest is still a majority and no view
// change of this site is running.
func (m *Machine) proposeRemoval(s wire.SiteID) {
	if !m.members[s] || s == m.cfg.Self {
		return
	}
	rest := slices.DeleteFunc(slices.Clone(m.view.Members), func(x wire.SiteID) bool { return x == s })
	if len(rest) < m.majority {
		return
	}
	m.proposeView(wire.View{N: m.view.N + 1, Members: rest})
}

// onView handles a decided view: adopted if newer and sent by one of its
// members or of this site's view; a site that sends an older one gets
// this site's.
func (m *Machine) onView(msg wire.Control) {
	switch {
	case msg.View.N > m.view.N && (msg.View.Has(msg.From) || m.members[msg.From]):
		// (From a member of the new view, or of this site's: a proposer
		// may have had to decide the view a majority accepted without
		// it, Paxos's phase 2, and then tells the others.)
		m.adoptView(msg.View)
	case msg.View.N < m.view.N && m.members[msg.From]:
		m.send(wire.Control{Kind: wire.ControlView, To: msg.From, Path: wire.ViewPath, View: m.View()})
	}
}

func (m *Machine) setView(v wire.View, persist bool) {
	m.view = wire.View{N: v.N, Members: slices.Clone(v.Members)}
	m.members = map[wire.SiteID]bool{}
	for _, s := range v.Members {
		m.members[s] = true
	}
	if persist {
		m.records = append(m.records, Record{Kind: RecordView, View: m.View()})
	}
}

// adoptView makes v, a decided view with a larger number, this site's
// (persisted). A site it excludes drops its own controls (leave); a site
// it adds is admitted (admit); elections waiting for a removed member
// may now be ready (every member of the new view acknowledged them). The
// acceptor state and this site's view change for a number up to v's are
// over; if that change lost to v, its own change is proposed again on
// top of v (rebase).
func (m *Machine) adoptView(v wire.View) {
	if v.N <= m.view.N {
		return
	}
	if err := m.checkView(v); err != nil {
		panic(fmt.Sprintf("INVARIANT view: site %d adopting %v: %v", m.cfg.Self, v, err))
	}
	wasMember := m.members[m.cfg.Self]
	old := maps.Clone(m.members)
	oldView := m.view
	m.setView(v, true)
	m.changed = true
	if a := m.acceptor; a != nil && a.N <= v.N {
		m.setAcceptor(nil)
	}
	lost := m.change
	m.change = nil
	if lost != nil && (lost.own.N != v.N || slices.Equal(lost.own.Members, v.Members)) {
		lost = nil // decided, or overtaken by a later view: its trigger proposes again if still due
	}
	if !m.members[m.cfg.Self] {
		m.leave()
		return
	}
	if len(m.joining) > 0 {
		// A member the new view leaves out confirms nothing: the join
		// waits for the view's members only.
		for s := range m.joining {
			if !m.members[s] {
				delete(m.joining, s)
			}
		}
		if len(m.joining) == 0 {
			m.joining, m.joinVotes, m.joinSilent = nil, nil, nil
		}
	}
	if !wasMember {
		// Added back: serve once every member confirmed it knows their
		// controls (ControlJoined).
		m.resynced = false
		m.joining = map[wire.SiteID]bool{}
		for _, s := range v.Members {
			if s != m.cfg.Self {
				m.joining[s] = true
			}
		}
		m.askJoined()
	}
	for _, s := range v.Members {
		if !old[s] && s != m.cfg.Self {
			m.admit(s, old)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(m.elections)) {
		if e := m.elections[p]; e != nil {
			m.settle(p, e)
		}
	}
	if lost != nil {
		m.proposeView(rebase(lost.own, oldView, v))
	}
}

// leave drops this site's controls on learning it is outside the view
// (§2.3: the controls of a returning site are released): its holds, its
// elections and its votes for itself. No message: members refuse them;
// they drop their votes for this site on Resynced, Reassign or when it is
// added back. Its votes for other sites stay (a proposer may count them).
func (m *Machine) leave() {
	m.holds = map[string]*hold{}
	m.elections = map[string]*election{}
	m.yielded = map[string]yield{}
	for _, p := range slices.Sorted(maps.Keys(m.votes)) {
		if v := m.votes[p]; v.Holder == m.cfg.Self {
			m.dropVote(p, m.cfg.Self, v.Ballot)
		}
	}
	m.change = nil // its acceptor state stays: a proposer may count it
	m.joining = nil
	m.joinVotes = map[string]bool{}
	m.resynced = false
	m.changed = true
}

// admit takes site s, just added to the view, into this site's controls:
// votes for s's old controls are dropped (released: it dropped them
// itself before it asked to join); every control this site holds or
// elects must be acknowledged by s again (holds stop being ready until
// it does), so a read at s is forwarded to its primary.
func (m *Machine) admit(s wire.SiteID, old map[wire.SiteID]bool) {
	m.leaseAsked[s] = m.now // its silence counts from its return (Config.LeaseSilence)
	for _, p := range slices.Sorted(maps.Keys(m.votes)) {
		if v := m.votes[p]; v.Holder == s {
			m.dropVote(p, s, v.Ballot)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(m.holds)) {
		h := m.holds[p]
		if !h.ready {
			continue
		}
		h.ready = false
		e := m.newElection(h.ballot, h.deep, p, false)
		for o := range old {
			e.acks[o] = true
		}
		e.rounds, e.sentAt = 1, m.now
		e.replies = map[wire.SiteID]wire.Control{}
		m.elections[p] = e
	}
	for _, p := range slices.Sorted(maps.Keys(m.elections)) {
		if e := m.elections[p]; e != nil {
			delete(e.acks, s)
			m.ask(p, e, s)
		}
	}
}

// onJoin handles a request to join from a site outside the view: a
// member proposes the view with it added.
func (m *Machine) onJoin(msg wire.Control) {
	if !m.members[m.cfg.Self] {
		return
	}
	m.proposeView(wire.View{N: m.view.N + 1, Members: slices.Sorted(maps.Keys(addSite(m.members, msg.From)))})
}

func addSite(set map[wire.SiteID]bool, s wire.SiteID) map[wire.SiteID]bool {
	out := maps.Clone(set)
	out[s] = true
	return out
}

// onJoined handles the join handshake: a member answers a joining site
// once it has acknowledged every election of the member; the joining site
// then drops its votes for that member not renewed since it left (stale:
// their release reached it not), and serves once every member answered.
func (m *Machine) onJoined(msg wire.Control) {
	from := msg.From
	delete(m.joinSilent, from) // it answers: not silent
	if msg.Err != wire.ErrNone {
		return // "not yet": the member waits for this site's acknowledgements
	}
	if !msg.Granted {
		if !m.ackedAllElections(from) {
			// Not yet: confirmed when it has (onVote), or at its next ask.
			// The answer says so, or the joining site would count this
			// one silent and remove it from the view.
			if m.joinAsks == nil {
				m.joinAsks = map[wire.SiteID]bool{}
			}
			m.joinAsks[from] = true
			m.send(wire.Control{Kind: wire.ControlJoined, To: from, Path: wire.ViewPath, Err: wire.ErrUnavailable, View: m.View()})
			return
		}
		m.confirmJoined(from)
		return
	}
	if !m.joining[from] {
		return
	}
	if m.joinVotes != nil {
		for _, p := range slices.Sorted(maps.Keys(m.votes)) {
			if v := m.votes[p]; v.Holder == from && !m.joinVotes[p] {
				m.dropVote(p, from, v.Ballot)
			}
		}
	}
	delete(m.joining, from)
	if len(m.joining) == 0 {
		m.joining, m.joinVotes = nil, nil
		m.changed = true
	}
}

// ackedAllElections reports whether site s acknowledged every election
// of this site.
func (m *Machine) ackedAllElections(s wire.SiteID) bool {
	for _, e := range m.elections {
		if !e.acks[s] {
			return false
		}
	}
	return true
}

func (m *Machine) confirmJoined(s wire.SiteID) {
	m.send(wire.Control{Kind: wire.ControlJoined, To: s, Path: wire.ViewPath, Granted: true, View: m.View()})
}

func (m *Machine) askJoined() {
	m.asked = m.now
	if m.joinSilent == nil {
		m.joinSilent = map[wire.SiteID]int{}
	}
	var silent []wire.SiteID
	for _, s := range slices.Sorted(maps.Keys(m.joining)) {
		if m.joinSilent[s]++; m.joinSilent[s] > RemoveAfterRounds {
			silent = append(silent, s)
		}
		m.send(wire.Control{Kind: wire.ControlJoined, To: s, Path: wire.ViewPath, View: m.View()})
	}
	for _, s := range silent {
		m.proposeRemoval(s)
	}
}

func (m *Machine) askToJoin() {
	m.asked = m.now
	for _, s := range m.view.Members {
		m.send(wire.Control{Kind: wire.ControlJoin, To: s, Path: wire.ViewPath, View: m.View()})
	}
}

// tickView moves this site's view change on (tickChange) and repeats,
// once per round, a resynchronised excluded site's request to join and a
// joining site's handshake.
func (m *Machine) tickView() {
	m.tickChange()
	if m.now-m.asked < m.cfg.RoundTimeout {
		return
	}
	switch {
	case !m.members[m.cfg.Self] && m.resynced:
		m.askToJoin()
	case len(m.joining) > 0:
		m.askJoined()
	}
}

// Resynced tells the machine its host resynchronised site's data, at
// time now (§2.3, recovery). For this site, outside the view: the host
// exchanged the newest copies with the members (its writes under the
// controls it dropped went out, theirs came in); it asks to be added. For
// another site outside the view, in durable mode: every key under the
// site's controls now holds, here, every write a majority acknowledged;
// the votes for it are dropped (its controls released here) and the keys
// may be elected again.
func (m *Machine) Resynced(site wire.SiteID, now wire.Time) error {
	m.now = now
	switch {
	case site == m.cfg.Self && m.members[site]:
		return fmt.Errorf("control: site %d is in the view %v: nothing to rejoin", site, m.view)
	case site == m.cfg.Self:
		m.resynced = true
		m.askToJoin()
		return nil
	case !m.cfg.Durable:
		return fmt.Errorf("control: relaxed mode: site %d's keys hold their newest writes only there; reassign them (Reassign) or wait for it", site)
	}
	return m.dropHolder(site)
}

// Reassign drops this site's votes for site, outside the view, at time
// now: the operator's decision (relaxed mode) that the writes only that
// site held are given up and its keys may be elected again.
func (m *Machine) Reassign(site wire.SiteID, now wire.Time) error {
	m.now = now
	return m.dropHolder(site)
}

func (m *Machine) dropHolder(site wire.SiteID) error {
	if !m.knownSite(site) || m.members[site] {
		return fmt.Errorf("control: site %d is not a configured site outside the view %v", site, m.view)
	}
	for _, p := range slices.Sorted(maps.Keys(m.votes)) {
		if v := m.votes[p]; v.Holder == site {
			m.dropVote(p, site, v.Ballot)
		}
	}
	return nil
}

// ForceView installs view v without a majority's acknowledgements, at
// time now: the operator's grace period after a majority of sites failed
// at once (§2.3, B1.3), when no view change can gather a majority. v must
// have a larger number than every site's view and contain this site and a
// majority of the configured sites; the operator runs it at one site (it
// sends v to every member of the old and new view) with the sites down
// restarted, and is responsible for resynchronising every member before
// clients resume.
func (m *Machine) ForceView(v wire.View, now wire.Time) error {
	m.now = now
	v.Members = slices.Sorted(slices.Values(v.Members))
	if err := m.checkView(v); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if v.N <= m.view.N || !v.Has(m.cfg.Self) {
		return fmt.Errorf("control: forced view %v must follow %v and contain site %d", v, m.view, m.cfg.Self)
	}
	m.decideView(v)
	return nil
}
