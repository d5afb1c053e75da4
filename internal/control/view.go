package control

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/wire"
)

// The active view (§2.3; ADR 16, "Active view"). A view is a number and
// its members, always a majority of the configured sites; every site
// persists the view it adopted. A change is an election on the reserved
// path wire.ViewPath whose proposal carries the new view: a site
// acknowledges at most one proposal per view number, and only one that
// follows its own view (number view.N+1), so each decided view follows
// the one before it; the proposer needs a majority of the configured
// sites, contention is Fig. 1's, and the decided view goes to every member
// of the old and the new view. A site adopts a view only with a larger
// number.

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
// not deep, a ballot of its sender (proposal, abort) or of this site
// (vote), a proper view where one is needed.
func (m *Machine) checkViewMessage(msg wire.Control) error {
	if msg.Path != wire.ViewPath || msg.Deep {
		return fmt.Errorf("%v on path %q (deep %v): view messages use %q", msg.Kind, msg.Path, msg.Deep, wire.ViewPath)
	}
	switch msg.Kind {
	case wire.ControlPropose, wire.ControlAbort:
		if msg.Ballot.Site != msg.From || msg.Ballot.N == 0 {
			return fmt.Errorf("ballot %v is not of site %d", msg.Ballot, msg.From)
		}
	case wire.ControlVote:
		if msg.Ballot.Site != m.cfg.Self {
			return fmt.Errorf("vote for ballot %v of another site", msg.Ballot)
		}
	case wire.ControlRelease, wire.ControlRevoke:
		return fmt.Errorf("%v of the view", msg.Kind)
	}
	if msg.Kind == wire.ControlPropose || msg.Kind == wire.ControlView || carriesView(msg) {
		return m.checkView(msg.View)
	}
	return nil
}

// carriesView reports whether msg is a refusal for the view's sake, which
// carries its sender's view.
func carriesView(msg wire.Control) bool {
	return msg.Kind == wire.ControlVote && (msg.Err == wire.ErrNotInView || msg.Err == wire.ErrStaleView)
}

// stepView handles a view-change message from a member.
func (m *Machine) stepView(msg wire.Control) {
	switch msg.Kind {
	case wire.ControlPropose:
		m.onViewPropose(msg)
	case wire.ControlVote:
		m.onVote(msg)
	case wire.ControlAbort:
		m.dropViewVote(msg.From, msg.Ballot)
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

// onViewPropose answers a proposed view change: granted if it follows
// this site's view and this site acknowledged no other proposal for its
// number; a refusal names the competitor (Fig. 1) or, for a proposal
// that does not follow this site's view, carries the view (ErrStaleView).
func (m *Machine) onViewPropose(msg wire.Control) {
	from := msg.From
	if e, ok := m.ended[wire.ViewPath][from]; ok && msg.Ballot.N <= e.n {
		return // a late duplicate of a proposal since withdrawn
	}
	if msg.View.N != m.view.N+1 {
		m.reply(msg, false, Vote{}, wire.ErrStaleView)
		return
	}
	if vv := m.viewVote; vv != nil && vv.View.N == msg.View.N {
		switch {
		case vv.Ballot.Site != from:
			m.reply(msg, false, Vote{Holder: vv.Ballot.Site, Ballot: vv.Ballot}, wire.ErrNone)
			return
		case msg.Ballot.Less(vv.Ballot):
			return // older than the sender's proposal we acknowledged
		}
	}
	m.setViewVote(&ViewVote{Ballot: msg.Ballot, View: msg.View})
	m.reply(msg, true, Vote{}, wire.ErrNone)
}

func (m *Machine) setViewVote(vv *ViewVote) {
	m.viewVote = vv
	m.records = append(m.records, Record{Kind: RecordViewVote, ViewVote: vv})
}

// dropViewVote forgets the view vote if it is holder's of ballot b (an
// older abort changes nothing) and remembers b as ended.
func (m *Machine) dropViewVote(holder wire.SiteID, b wire.Ballot) {
	if m.ended[wire.ViewPath] == nil {
		m.ended[wire.ViewPath] = map[wire.SiteID]endedBallot{}
	}
	if e := m.ended[wire.ViewPath][holder]; b.N > e.n {
		m.ended[wire.ViewPath][holder] = endedBallot{n: b.N, at: m.now}
	}
	vv := m.viewVote
	if vv == nil || vv.Ballot.Site != holder || vv.Ballot != b && !m.cfg.Mutations.AbortIgnoresBallot {
		return
	}
	m.setViewVote(nil)
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

// proposeView starts an election of view v (number view.N+1) on
// ViewPath, unless one of this site's is running, it gave way to a
// competitor lately, or it acknowledged another site's proposal for the
// number (it asks that site for its view instead: it may have been
// decided).
func (m *Machine) proposeView(v wire.View) {
	if _, running := m.elections[wire.ViewPath]; running {
		return
	}
	if y, ok := m.yielded[wire.ViewPath]; ok && m.now < y.until {
		return
	}
	if vv := m.viewVote; vv != nil && vv.View.N == v.N && vv.Ballot.Site != m.cfg.Self {
		m.send(wire.Control{Kind: wire.ControlView, To: vv.Ballot.Site, Path: wire.ViewPath, View: m.View()})
		return
	}
	e := m.newElection(m.takeBallot(), false, wire.ViewPath, false)
	e.view = &v
	m.elections[wire.ViewPath] = e
	delete(m.yielded, wire.ViewPath)
	m.setViewVote(&ViewVote{Ballot: e.ballot, View: v})
	m.propose(wire.ViewPath, e)
	m.settle(wire.ViewPath, e)
}

// decideView ends view election e, acknowledged by a majority: this site
// adopts the view and sends it to every member of the old and new view.
func (m *Machine) decideView(e *election) {
	v := *e.view
	old := m.view.Members
	delete(m.elections, wire.ViewPath)
	m.adoptView(v)
	for _, s := range m.cfg.Sites {
		if s != m.cfg.Self && (slices.Contains(old, s) || v.Has(s)) {
			m.send(wire.Control{Kind: wire.ControlView, To: s, Path: wire.ViewPath, View: v})
		}
	}
}

// onView handles a decided view: adopted if newer and sent by one of its
// members; a site that sends an older one gets this site's.
func (m *Machine) onView(msg wire.Control) {
	switch {
	case msg.View.N > m.view.N && msg.View.Has(msg.From):
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
// may now be ready (every member of the new view acknowledged them).
func (m *Machine) adoptView(v wire.View) {
	if v.N <= m.view.N {
		return
	}
	if err := m.checkView(v); err != nil {
		panic(fmt.Sprintf("INVARIANT view: site %d adopting %v: %v", m.cfg.Self, v, err))
	}
	wasMember := m.members[m.cfg.Self]
	old := maps.Clone(m.members)
	m.setView(v, true)
	m.changed = true
	if vv := m.viewVote; vv != nil && vv.View.N <= v.N {
		m.setViewVote(nil)
	}
	if e := m.elections[wire.ViewPath]; e != nil && e.view.N <= v.N {
		delete(m.elections, wire.ViewPath) // its acknowledgers forget it on adopting v
	}
	if !m.members[m.cfg.Self] {
		m.leave()
		return
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
	if vv := m.viewVote; vv != nil && vv.Ballot.Site == m.cfg.Self {
		m.setViewVote(nil)
	}
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
		if e := m.elections[p]; e.view == nil {
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
	if !msg.Granted {
		if !m.ackedAllElections(from) {
			// Not yet: confirmed when it has (onVote), or at its next ask.
			if m.joinAsks == nil {
				m.joinAsks = map[wire.SiteID]bool{}
			}
			m.joinAsks[from] = true
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
// of this site but a view change.
func (m *Machine) ackedAllElections(s wire.SiteID) bool {
	for _, e := range m.elections {
		if e.view == nil && !e.acks[s] {
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
	for _, s := range slices.Sorted(maps.Keys(m.joining)) {
		m.send(wire.Control{Kind: wire.ControlJoined, To: s, Path: wire.ViewPath, View: m.View()})
	}
}

func (m *Machine) askToJoin() {
	m.asked = m.now
	for _, s := range m.view.Members {
		m.send(wire.Control{Kind: wire.ControlJoin, To: s, Path: wire.ViewPath, View: m.View()})
	}
}

// tickView repeats, once per round, a resynchronised excluded site's
// request to join and a joining site's handshake.
func (m *Machine) tickView() {
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
	e := &election{view: &v}
	m.decideView(e)
	return nil
}
