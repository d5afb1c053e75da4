package control

import (
	"fmt"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/mutation"
	"github.com/catena-kv/catena/internal/wire"
)

// View changes are single-decree Paxos per view number (Lamport, "Paxos
// Made Simple"; ADR 16, "Active view"). The acceptors of number N+1 are
// the configured sites whose view is N (a site at another view answers
// ErrStaleView with its view, so laggards catch up); a quorum is a
// majority of the configured sites. Every site is an acceptor, and a site
// with a change to make (a removal, a join) is its proposer:
//
//   - Phase 1: the proposer sends a prepare (ControlPropose on ViewPath)
//     with a ballot above every ballot it saw for the number; an acceptor
//     promises it if it is not below its promise (persisted before the
//     answer: a granted ControlVote carrying the ballot and view it
//     accepted for the number, if any), or refuses naming its promise.
//   - Phase 2: with promises from a majority, the proposer sends an accept
//     request (ControlAccept) of the accepted view with the highest ballot
//     among the promises, or of its own view if none; an acceptor accepts
//     it if its ballot is not below its promise (persisted), and answers
//     (ControlAccepted).
//   - Decided once a majority accepted: the proposer adopts the view and
//     sends it (ControlView) to every member of the old and new view. If
//     it was not its own, it proposes its own change on top of it.
//
// A refused proposer (a higher promise) tries again with a higher ballot
// at the end of the round. To avoid duels, a site gives way for two
// rounds (viewYieldRounds) to a competitor with a larger site id that it
// saw lately (a new prepare or accept request of it, or a refusal naming
// its promise): it pauses its change until then; and it starts no change
// for two rounds after it saw any other site's new ballot (that change is
// under way, and would decide the same view or make room for its own). A crashed
// competitor never blocks: a higher ballot overrides its promises.

// viewYieldRounds is how many rounds a refused proposer of a view change
// waits before it tries again, when the promise that refused it is of a
// site with a larger id (a live competitor then completes meanwhile).
const viewYieldRounds = 2

// viewChange is this site's proposal of a view change in progress: the
// Paxos proposer for view number own.N (its view's number plus one).
type viewChange struct {
	// own is the view this site proposes; value the one its current
	// ballot's phase 2 asks to accept (own, or the accepted view with the
	// highest ballot the promises reported: best).
	own, value wire.View
	best       wire.Ballot
	ballot     wire.Ballot
	// phase: 1 (prepare), 2 (accept), 0 (waiting until retryAt for a
	// competitor). granted: the sites that promised (phase 1) or accepted
	// (phase 2) ballot.
	phase   int
	granted map[wire.SiteID]bool
	// higher: the highest promise a refusal named this round (zero: no
	// refusal); the next ballot exceeds it.
	higher  wire.Ballot
	sentAt  wire.Time
	retryAt wire.Time
}

func (a *ViewAcceptor) clone() *ViewAcceptor {
	if a == nil {
		return nil
	}
	c := *a
	c.View.Members = slices.Clone(a.View.Members)
	return &c
}

// setAcceptor sets (nil: removes) this site's acceptor state, persisted.
func (m *Machine) setAcceptor(a *ViewAcceptor) {
	m.acceptor = a.clone()
	m.records = append(m.records, Record{Kind: RecordViewAcceptor, ViewAcceptor: a.clone()})
}

// acceptorFor returns this site's acceptor state for view number n (its
// view's number plus one): nothing promised or accepted if none is kept.
func (m *Machine) acceptorFor(n uint64) ViewAcceptor {
	if n != m.view.N+1 {
		panic(fmt.Sprintf("INVARIANT view: site %d at %v acting as acceptor of view number %d", m.cfg.Self, m.view, n))
	}
	if a := m.acceptor; a != nil && a.N == n {
		return *a.clone()
	}
	return ViewAcceptor{N: n}
}

// proposeView starts this site's change to view v (number view.N+1),
// unless it is outside its view, one of its changes is running, or v
// changes nothing or is not a majority.
func (m *Machine) proposeView(v wire.View) {
	if m.change != nil || !m.members[m.cfg.Self] || slices.Equal(v.Members, m.view.Members) || m.checkView(v) != nil {
		return
	}
	if v.N != m.view.N+1 {
		panic(fmt.Sprintf("INVARIANT view: site %d at %v proposing %v", m.cfg.Self, m.view, v))
	}
	own := wire.View{N: v.N, Members: slices.Clone(v.Members)}
	m.change = &viewChange{own: own, value: own}
	if wait := max(m.rivalUntil, m.busyUntil); m.now < wait {
		m.change.retryAt = wait // another site's change is under way
		return
	}
	m.prepare()
	if mutation.Enabled && m.cfg.Mutations.AdoptViewWithoutMajority && m.change != nil {
		m.decideView(m.change.own)
	}
}

// prepare starts phase 1 of this site's view change with a new ballot,
// above every ballot it saw for the number (its own promise, the promises
// that refused it), so it overrides a crashed competitor's promises. This
// site promises it first, as an acceptor.
func (m *Machine) prepare() {
	c := m.change
	above := c.higher
	if a := m.acceptorFor(c.own.N); above.Less(a.Promised) {
		above = a.Promised
	}
	if m.nextBallot <= above.N {
		m.nextBallot = above.N + 1
	}
	c.ballot = m.takeBallot()
	c.phase, c.value, c.best, c.higher = 1, c.own, wire.Ballot{}, wire.Ballot{}
	c.granted = map[wire.SiteID]bool{}
	c.sentAt, c.retryAt = m.now, 0
	req := wire.Control{Kind: wire.ControlPropose, From: m.cfg.Self, To: m.cfg.Self, Ballot: c.ballot, Path: wire.ViewPath, View: c.own}
	m.onPromise(m.promise(req))
	m.askChange(c)
}

// askChange sends the request of c's phase to every other member of the
// view that has not granted it.
func (m *Machine) askChange(c *viewChange) {
	if m.change != c || c.phase == 0 {
		return
	}
	kind, v := wire.ControlPropose, c.own
	if c.phase == 2 {
		kind, v = wire.ControlAccept, c.value
	}
	c.sentAt = m.now
	for _, s := range m.view.Members {
		if s != m.cfg.Self && !c.granted[s] {
			m.send(wire.Control{Kind: kind, To: s, Ballot: c.ballot, Path: wire.ViewPath, View: v})
		}
	}
}

// onPrepare answers a prepare: for the number after this site's view, a
// promise or a refusal naming the promise (promise); for another, a
// refusal carrying this site's view (ErrStaleView).
func (m *Machine) onPrepare(msg wire.Control) {
	if msg.View.N != m.view.N+1 {
		m.reply(msg, false, Vote{}, wire.ErrStaleView)
		return
	}
	m.noteRemoval(msg.View)
	fresh := m.acceptorFor(msg.View.N).Promised.Less(msg.Ballot)
	ans := m.promise(msg)
	if fresh {
		m.sawCompetitor(msg.From)
	}
	m.send(ans)
}

// sawCompetitor notes a new ballot of site s's view change, promised or
// accepted here: this site starts no change of its own for
// viewYieldRounds rounds (s's is under way), and if s has a larger id,
// its running change gives way too (sawRival).
func (m *Machine) sawCompetitor(s wire.SiteID) {
	m.busyUntil = m.now + viewYieldRounds*m.cfg.RoundTimeout
	if s > m.cfg.Self {
		m.sawRival()
	}
}

// sawRival makes this site give way to a competitor with a larger id for
// viewYieldRounds rounds: its view change, if any, pauses until then.
func (m *Machine) sawRival() {
	m.rivalUntil = m.now + viewYieldRounds*m.cfg.RoundTimeout
	if c := m.change; c != nil {
		c.phase, c.retryAt = 0, m.rivalUntil
	}
}

// promise is the acceptor's answer to prepare msg: promised (persisted)
// if its ballot is not below the promise, with the ballot and view
// accepted for the number if any; else refused, naming the promise. A
// ballot equal to the promise is a retransmission: promised again.
func (m *Machine) promise(msg wire.Control) wire.Control {
	a := m.acceptorFor(msg.View.N)
	ans := wire.Control{Kind: wire.ControlVote, From: m.cfg.Self, To: msg.From, Ballot: msg.Ballot, Path: wire.ViewPath, View: msg.View}
	if msg.Ballot.Less(a.Promised) {
		ans.Holder, ans.HolderBallot = a.Promised.Site, a.Promised
		return ans
	}
	if a.Promised == msg.Ballot {
		ans.Granted = true // a retransmission: no news
	} else {
		a.Promised = msg.Ballot
		m.setAcceptor(&a)
		ans.Granted = true
	}
	if !a.Accepted.IsZero() {
		ans.HolderBallot, ans.View = a.Accepted, a.View
	}
	return ans
}

// onAccept answers an accept request: for the number after this site's
// view, accepted or refused (accept); for another, ErrStaleView.
func (m *Machine) onAccept(msg wire.Control) {
	if msg.View.N != m.view.N+1 {
		m.reply(msg, false, Vote{}, wire.ErrStaleView)
		return
	}
	m.noteRemoval(msg.View)
	if !msg.View.Has(m.cfg.Self) || m.now < m.leaseHeldUntil(msg.View) {
		// A site does not accept its own removal: the majority that
		// removes it are others, one of which granted its last lease.
		// Nor a view without a site whose lease it granted still runs:
		// the proposer asks again next round.
		return
	}
	fresh := m.acceptorFor(msg.View.N).Accepted.Less(msg.Ballot)
	ans := m.accept(msg)
	if fresh && ans.Granted {
		m.sawCompetitor(msg.From)
	}
	m.send(ans)
}

// accept is the acceptor's answer to accept request msg: accepted
// (persisted) if its ballot is not below the promise, else refused
// naming the promise.
func (m *Machine) accept(msg wire.Control) wire.Control {
	a := m.acceptorFor(msg.View.N)
	ans := wire.Control{Kind: wire.ControlAccepted, From: m.cfg.Self, To: msg.From, Ballot: msg.Ballot, Path: wire.ViewPath, View: msg.View}
	if msg.Ballot.Less(a.Promised) && !(mutation.Enabled && m.cfg.Mutations.AcceptBelowPromise) {
		ans.Holder, ans.HolderBallot = a.Promised.Site, a.Promised
		return ans
	}
	if a.Promised.Less(msg.Ballot) {
		a.Promised = msg.Ballot
	}
	if a.Accepted != msg.Ballot {
		a.Accepted, a.View = msg.Ballot, wire.View{N: msg.View.N, Members: slices.Clone(msg.View.Members)}
		m.setAcceptor(&a)
	}
	ans.Granted = true
	return ans
}

// onPromise handles an answer to this site's prepare: a promise counts
// (and its accepted view is kept if its ballot is the highest so far);
// with a majority, phase 2 starts. A refusal is kept for the round's end.
func (m *Machine) onPromise(msg wire.Control) {
	c := m.change
	if c == nil || c.ballot != msg.Ballot {
		return // an answer to an older ballot
	}
	if !msg.Granted {
		m.refusedChange(c, msg)
		return
	}
	if c.phase != 1 || c.granted[msg.From] || msg.View.N != c.own.N {
		return
	}
	c.granted[msg.From] = true
	if !msg.HolderBallot.IsZero() && c.best.Less(msg.HolderBallot) && !(mutation.Enabled && m.cfg.Mutations.IgnoreAcceptedViews) {
		c.best, c.value = msg.HolderBallot, wire.View{N: msg.View.N, Members: slices.Clone(msg.View.Members)}
	}
	m.acceptOwn(c)
}

// acceptOwn starts phase 2 of change c once a majority promised: this
// site accepts first, as an acceptor, but not while a lease it granted a
// site the view leaves out still runs (tickChange tries again).
func (m *Machine) acceptOwn(c *viewChange) {
	if c.phase != 1 || len(c.granted) < m.majority || m.now < m.leaseHeldUntil(c.value) {
		return
	}
	c.phase = 2
	c.granted = map[wire.SiteID]bool{}
	req := wire.Control{Kind: wire.ControlAccept, From: m.cfg.Self, To: m.cfg.Self, Ballot: c.ballot, Path: wire.ViewPath, View: c.value}
	m.onAccepted(m.accept(req))
	m.askChange(c)
}

// noteRemoval remembers that a view change leaving sites of this view
// out is under way: their leases are not granted again for a while
// (removing), so the change is not held back forever.
func (m *Machine) noteRemoval(v wire.View) {
	for _, s := range m.view.Members {
		if !v.Has(s) {
			m.removalSeen[s] = m.now
		}
	}
}

// leaseWait is how long after granting a lease this site waits before it
// accepts a view without the lease's holder: the lease, stretched by a
// clock drift bound of 1% each way.
func (m *Machine) leaseWait() wire.Time { return m.cfg.Lease + m.cfg.Lease/50 }

// leaseHeldUntil returns when the membership leases this site granted
// the members v leaves out have surely run out (ADR 16).
func (m *Machine) leaseHeldUntil(v wire.View) wire.Time {
	var until wire.Time
	for _, s := range m.view.Members {
		if v.Has(s) {
			continue
		}
		until = max(until, m.leasesUnknownUntil)
		if at, ok := m.leaseGrants[s]; ok {
			until = max(until, at+m.leaseWait())
		}
	}
	return until
}

// onAccepted handles an answer to this site's accept request: with a
// majority of acceptances, the view is decided.
func (m *Machine) onAccepted(msg wire.Control) {
	c := m.change
	if c == nil || c.ballot != msg.Ballot {
		return
	}
	if !msg.Granted {
		m.refusedChange(c, msg)
		return
	}
	if c.phase != 2 {
		return
	}
	c.granted[msg.From] = true
	if len(c.granted) >= m.majority {
		m.decideView(c.value)
	}
}

// refusedChange keeps the promise a refusal of c names (a refusal for the
// view's sake, ErrStaleView or ErrNotInView, was handled by learnView); a
// promise of a larger site makes this site give way to it.
func (m *Machine) refusedChange(c *viewChange, msg wire.Control) {
	if msg.Err != wire.ErrNone {
		return
	}
	if c.higher.Less(msg.HolderBallot) {
		c.higher = msg.HolderBallot
	}
	if msg.HolderBallot.Site > m.cfg.Self {
		m.sawRival()
	}
}

// tickChange ends a round of this site's view change: refused, it tries
// again with a higher ballot (prepare); else it asks the members that have
// not answered again. A change that gives way to a competitor (phase 0)
// tries again once the wait is over.
func (m *Machine) tickChange() {
	c := m.change
	switch {
	case c == nil:
	case c.phase == 0 && c.ballot.IsZero():
		if m.now >= max(c.retryAt, m.rivalUntil, m.busyUntil) {
			m.prepare()
		}
	case c.phase == 0:
		if m.now >= max(c.retryAt, m.rivalUntil) {
			m.prepare()
		}
	case c.phase == 1 && len(c.granted) >= m.majority:
		m.acceptOwn(c) // waiting for a lease to run out
	case m.now-c.sentAt < m.cfg.RoundTimeout:
	case c.higher.IsZero():
		m.askChange(c)
	default:
		m.prepare()
	}
}

// decideView adopts v, decided (or forced), and sends it to every member
// of the old and new view.
func (m *Machine) decideView(v wire.View) {
	for _, s := range m.cfg.Sites {
		if s != m.cfg.Self && (m.members[s] || v.Has(s)) {
			m.send(wire.Control{Kind: wire.ControlView, To: s, Path: wire.ViewPath, View: v})
		}
	}
	m.adoptView(v)
}

// rebase returns the view after decided that makes the change own made
// to old: the sites own added to old are added to decided, those it
// removed are removed. Proposing it is a no-op if it equals decided (the
// change happened) or is not a majority (proposeView checks).
func rebase(own, old, decided wire.View) wire.View {
	set := map[wire.SiteID]bool{}
	for _, s := range decided.Members {
		set[s] = true
	}
	for _, s := range own.Members {
		if !old.Has(s) {
			set[s] = true
		}
	}
	for _, s := range old.Members {
		if !own.Has(s) {
			delete(set, s)
		}
	}
	return wire.View{N: decided.N + 1, Members: slices.Sorted(maps.Keys(set))}
}
