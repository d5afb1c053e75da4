// Package sim is Catena's deterministic discrete-event simulator. It runs
// the real protocol state machines (chain.Server, master.Master) with a
// virtual clock, one seeded PRNG, per-link latency, per-message service
// times, clock drift, crashes, broken links and partitions, and checks
// every run: CR §3's invariants after every step, linearizability of the
// clients' history (porcupine), no acknowledged update lost, and that the
// system recovers once faults stop.
//
// Same seed, same run: every choice comes from the seeded PRNG, events are
// ordered by (time, sequence number), and no map is iterated unordered.
package sim

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// machine is a protocol state machine as the simulator drives it.
type machine interface {
	Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope
	Tick(now wire.Time) []wire.Envelope
}

type eventKind uint8

const (
	evArrive  eventKind = iota // a message reaches a node's inbox
	evProcess                  // a node takes the next message from its inbox
	evTick                     // a node's periodic timer
	evCall                     // a scheduled action (fault, phase change)
	evFinish                   // a node finishes a message it began (cost model)
	evCommit                   // a node with a disk commits its storage writes
)

type event struct {
	at   wire.Time
	seq  uint64
	kind eventKind
	node wire.NodeID
	// evArrive
	from        wire.NodeID
	msg         wire.Message
	linkGen     uint64
	incarnation uint64
	// lane is the node's lane for evProcess and evFinish.
	lane int
	// evCall
	call func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type inboxItem struct {
	from wire.NodeID
	msg  wire.Message
}

// node is one simulated process.
type node struct {
	id          wire.NodeID
	machine     machine
	up          bool
	incarnation uint64
	// clockRate is the node's clock speed relative to real (virtual) time,
	// clockOffset how far ahead of it the node's clock started (the skew
	// between sites).
	clockRate   float64
	clockOffset wire.Time
	// lanes are the node's processors: each handles one message at a
	// time from its own FIFO inbox (one lane unless NetworkModel.Lane
	// says otherwise).
	lanes     []lane
	tickEvery wire.Time
	// disk, when set, is the node's storage, and its machine is a
	// committer: its writes become durable only at the commit that
	// follows its steps (evCommit, after NetworkModel.CommitTime), its
	// messages but the Early ones wait for that commit (held), and a
	// crash loses what was not committed (as the real servers' event
	// loop and Pebble do).
	disk *storage.MemoryEngine
	// held are the messages waiting for the next commit, in order;
	// commitDue says it is scheduled.
	held      []wire.Envelope
	commitDue bool
	// crashed, if set, runs after a crash took back the uncommitted
	// writes (the cluster's bookkeeping of what the node holds).
	crashed func()
}

// committer is node.Committer: a machine told of its commits.
type committer interface {
	Committed(now wire.Time) []wire.Envelope
}

type lane struct {
	inbox []inboxItem
	busy  bool
}

func (n *node) localTime(now wire.Time) wire.Time {
	return wire.Time(float64(now)*n.clockRate) + n.clockOffset
}

type linkKey struct{ from, to wire.NodeID }

// link is a directed FIFO channel: arrivals never overtake each other.
type link struct {
	lastArrival wire.Time
	// volumeArrival is lastArrival per volume, when links are FIFO per
	// volume (NetworkModel.TransferBytes).
	volumeArrival map[wire.VolumeID]wire.Time
	// gen changes when the link breaks; messages sent in an older
	// generation are lost.
	gen  uint64
	down bool
}

// NetworkModel gives message latencies and service times.
type NetworkModel struct {
	LatencyMin, LatencyMax wire.Time
	// ServiceTimeMin and ServiceTimeMax bound a random pause after each
	// message a node handles.
	ServiceTimeMin, ServiceTimeMax wire.Time
	// CommitTimeMin and CommitTimeMax bound how long a node with a disk
	// (node.disk) takes to commit its storage writes: the messages that
	// wait for the commit wait this long.
	CommitTimeMin, CommitTimeMax wire.Time
	// Cost, when set, replaces the random pause with a modelled service
	// time (CR §5): a node handles one message at a time, is busy for
	// Cost(node, m), and its output leaves when it is done. Timer ticks
	// cost nothing.
	Cost func(node wire.NodeID, m wire.Message) wire.Time
	// ControlPlane, when set with Cost, picks the messages a node handles
	// at once and at no cost instead of queueing them behind its work
	// (heartbeats and configurations: a lease must not expire because
	// the server is busy). Only messages whose order relative to the
	// queued ones does not matter may qualify: all of one sender's.
	ControlPlane func(m wire.Message) bool
	// Peer, when set with Cost, says which senders are peers: a node
	// handles what peers sent before what others (clients) sent, as a
	// server's loop drains its peers' messages first (internal/node,
	// docs/adr/0025). Each sender's messages keep their order.
	Peer func(from wire.NodeID) bool
	// Lane, when set with Cost, gives the lane (processor) of a node that
	// handles a message: lanes work in parallel, each one message at a
	// time. Messages of one sender whose order matters must share a lane.
	Lane func(node wire.NodeID, m wire.Message) int
	// TransferBytes, when set, gives the modelled size of a message that
	// carries recovery data (a state transfer); 0 for any other message.
	// Such messages use at most RecoveryBandwidth bytes per second out of
	// their sender and into their receiver, one after another. Links are
	// then FIFO per volume rather than per node pair, as the protocol
	// needs, so a long transfer does not hold back other volumes.
	TransferBytes     func(m wire.Message) int64
	RecoveryBandwidth int64
	// SendDelay, when set, adds to the latency of what a node sends (a
	// dispatcher on the way, CR §5.2).
	SendDelay func(from wire.NodeID, m wire.Message) wire.Time
	// LinkLatency, when set, gives the latency bounds of the link from →
	// to in place of LatencyMin and LatencyMax when ok (the WAN between
	// sites).
	LinkLatency func(from, to wire.NodeID) (lo, hi wire.Time, ok bool)
}

// world is the simulated cluster: nodes, links, the event queue and the
// clock. It knows nothing of the protocol beyond delivering messages.
type world struct {
	now     wire.Time
	seq     uint64
	queue   eventQueue
	rng     *rand.Rand
	nodes   map[wire.NodeID]*node
	links   map[linkKey]*link
	network NetworkModel
	// trace hashes every processed event: equal for equal runs.
	trace uint64
	// noTrace skips computing trace, for runs that do not report it.
	noTrace   bool
	traceLog  func(string)
	afterStep func(n *node)
	// afterHandle, when set, sees every message a node handled.
	afterHandle func(n *node, m wire.Message)
	// beforeSend, when set, sees every message a node emits, when it
	// emits it (checks on what a node says at the moment it says it; a
	// message that waits for the node's commit leaves later).
	beforeSend func(n *node, env wire.Envelope)
	// drop, when set, loses the messages it returns true for (scenario
	// tests use it to lose a reply or hold back a forward).
	drop func(from wire.NodeID, env wire.Envelope) bool
	// recoveryOutFree and recoveryInFree are when each node's recovery
	// bandwidth is next free, sending and receiving.
	recoveryOutFree, recoveryInFree map[wire.NodeID]wire.Time
}

func newWorld(seed uint64, network NetworkModel) *world {
	return &world{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:   map[wire.NodeID]*node{},
		links:   map[linkKey]*link{},
		network: network,
		trace:   fnv.New64a().Sum64(),

		recoveryOutFree: map[wire.NodeID]wire.Time{},
		recoveryInFree:  map[wire.NodeID]wire.Time{},
	}
}

func (w *world) schedule(e *event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.queue, e)
}

// at runs f at time t.
func (w *world) at(t wire.Time, f func()) { w.schedule(&event{at: t, kind: evCall, call: f}) }

func (w *world) between(lo, hi wire.Time) wire.Time {
	if hi <= lo {
		return lo
	}
	return lo + wire.Time(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) link(from, to wire.NodeID) *link {
	k := linkKey{from, to}
	l := w.links[k]
	if l == nil {
		l = &link{}
		w.links[k] = l
	}
	return l
}

func (w *world) addNode(id wire.NodeID, m machine, tickEvery wire.Time, clockRate float64) *node {
	n := &node{id: id, machine: m, up: true, incarnation: 1, clockRate: clockRate, tickEvery: tickEvery, lanes: make([]lane, 1)}
	w.nodes[id] = n
	w.scheduleTick(n, w.now+w.between(0, tickEvery))
	return n
}

func (w *world) scheduleTick(n *node, t wire.Time) {
	w.schedule(&event{at: t, kind: evTick, node: n.id, incarnation: n.incarnation})
}

// send puts a message on the link from → to.
func (w *world) send(from wire.NodeID, env wire.Envelope) {
	to := w.nodes[env.To]
	if to == nil || !to.up {
		return
	}
	l := w.link(from, env.To)
	if l.down || (w.drop != nil && w.drop(from, env)) {
		return
	}
	lo, hi := w.network.LatencyMin, w.network.LatencyMax
	if w.network.LinkLatency != nil {
		if l, h, ok := w.network.LinkLatency(from, env.To); ok {
			lo, hi = l, h
		}
	}
	arrival := w.now + w.between(lo, hi)
	if w.network.SendDelay != nil {
		arrival += w.network.SendDelay(from, env.Msg)
	}
	if w.network.TransferBytes == nil {
		arrival = max(arrival, l.lastArrival)
		l.lastArrival = arrival
	} else {
		arrival = w.fifoPerVolume(l, from, env, arrival)
	}
	w.schedule(&event{at: arrival, kind: evArrive, node: env.To, from: from, msg: env.Msg, linkGen: l.gen, incarnation: to.incarnation})
}

// fifoPerVolume returns when a message sent now arrives when links are
// FIFO per volume and recovery data uses a bandwidth budget.
func (w *world) fifoPerVolume(l *link, from wire.NodeID, env wire.Envelope, arrival wire.Time) wire.Time {
	if bytes := w.network.TransferBytes(env.Msg); bytes > 0 {
		start := max(w.now, w.recoveryOutFree[from], w.recoveryInFree[env.To])
		done := start + wire.Time(float64(bytes)/float64(w.network.RecoveryBandwidth)*float64(wire.Second))
		w.recoveryOutFree[from], w.recoveryInFree[env.To] = done, done
		arrival = max(arrival, done)
	}
	v, ok := wire.VolumeOf(env.Msg)
	if !ok {
		arrival = max(arrival, l.lastArrival)
		l.lastArrival = arrival
		return arrival
	}
	if l.volumeArrival == nil {
		l.volumeArrival = map[wire.VolumeID]wire.Time{}
	}
	arrival = max(arrival, l.volumeArrival[v])
	l.volumeArrival[v] = arrival
	return arrival
}

// breakLinks cuts both directions between a and b until heal.
func (w *world) breakLinks(a, b wire.NodeID) {
	w.breakLink(a, b)
	w.breakLink(b, a)
}

// breakLink loses every message from one node to another until healed;
// the other direction is untouched (a one-way fault).
func (w *world) breakLink(from, to wire.NodeID) {
	l := w.link(from, to)
	l.down = true
	l.gen++
}

// healLinks restores both directions and tells both ends, as a transport
// that reconnected would.
func (w *world) healLinks(a, b wire.NodeID) {
	w.healLink(a, b)
	w.healLink(b, a)
}

// healLink restores one direction and tells the receiver, as a transport
// that reconnected would.
func (w *world) healLink(from, to wire.NodeID) {
	l := w.link(from, to)
	if !l.down {
		return
	}
	l.down = false
	l.gen++
	w.deliverLocal(to, &wire.PeerReset{Peer: from})
}

// deliverLocal hands a transport notification to a node's inbox.
func (w *world) deliverLocal(to wire.NodeID, m wire.Message) {
	n := w.nodes[to]
	if n == nil || !n.up {
		return
	}
	w.enqueue(n, inboxItem{from: to, msg: m})
}

// crash stops a node: its inbox and every message to or from it in flight
// are lost (its connections die with it).
func (w *world) crash(id wire.NodeID) {
	n := w.nodes[id]
	n.up = false
	n.lanes = make([]lane, 1)
	n.incarnation++
	n.held, n.commitDue = nil, false
	if n.disk != nil {
		n.disk.Crash()
	}
	if n.crashed != nil {
		n.crashed()
	}
	for k, l := range w.links {
		if k.from == id || k.to == id {
			l.gen++
		}
	}
}

// restart brings a crashed node back with a fresh machine.
func (w *world) restart(id wire.NodeID, m machine) {
	n := w.nodes[id]
	n.machine = m
	n.up = true
	w.scheduleTick(n, w.now+w.between(0, n.tickEvery))
}

func (w *world) enqueue(n *node, item inboxItem) {
	if w.network.ControlPlane != nil && w.network.ControlPlane(item.msg) {
		w.record(n, item.from, item.msg)
		w.emit(n, n.machine.Step(n.localTime(w.now), item.from, item.msg))
		return
	}
	i := 0
	if w.network.Lane != nil {
		i = w.network.Lane(n.id, item.msg)
		for len(n.lanes) <= i {
			n.lanes = append(n.lanes, lane{})
		}
	}
	q := &n.lanes[i]
	if w.network.Peer != nil && w.network.Peer(item.from) {
		// Behind the other peers' messages, ahead of the clients'.
		j := len(q.inbox)
		for j > 0 && !w.network.Peer(q.inbox[j-1].from) {
			j--
		}
		q.inbox = slices.Insert(q.inbox, j, item)
	} else {
		q.inbox = append(q.inbox, item)
	}
	if !q.busy {
		q.busy = true
		w.schedule(&event{at: w.now, kind: evProcess, node: n.id, incarnation: n.incarnation, lane: i})
	}
}

// run processes events until the queue is empty or time passes until.
func (w *world) run(until wire.Time) {
	for len(w.queue) > 0 {
		e := w.queue[0]
		if e.at > until {
			break
		}
		heap.Pop(&w.queue)
		w.now = e.at
		w.handle(e)
	}
	w.now = max(w.now, until)
}

func (w *world) handle(e *event) {
	switch e.kind {
	case evCall:
		e.call()
	case evArrive:
		n := w.nodes[e.node]
		l := w.link(e.from, e.node)
		if !n.up || n.incarnation != e.incarnation || l.gen != e.linkGen {
			return
		}
		w.enqueue(n, inboxItem{from: e.from, msg: e.msg})
	case evProcess:
		n := w.nodes[e.node]
		if !n.up || n.incarnation != e.incarnation || len(n.lanes[e.lane].inbox) == 0 {
			return
		}
		q := &n.lanes[e.lane]
		item := q.inbox[0]
		q.inbox = q.inbox[1:]
		if w.network.Cost != nil {
			w.schedule(&event{at: w.now + w.network.Cost(n.id, item.msg), kind: evFinish, node: n.id, from: item.from, msg: item.msg, incarnation: n.incarnation, lane: e.lane})
			return
		}
		w.record(n, item.from, item.msg)
		w.emit(n, n.machine.Step(n.localTime(w.now), item.from, item.msg))
		if len(q.inbox) > 0 {
			w.schedule(&event{at: w.now + w.between(w.network.ServiceTimeMin, w.network.ServiceTimeMax), kind: evProcess, node: n.id, incarnation: n.incarnation})
		} else {
			q.busy = false
			w.idle(n)
		}
	case evFinish:
		n := w.nodes[e.node]
		if !n.up || n.incarnation != e.incarnation {
			return
		}
		w.record(n, e.from, e.msg)
		w.emit(n, n.machine.Step(n.localTime(w.now), e.from, e.msg))
		if w.afterHandle != nil {
			w.afterHandle(n, e.msg)
		}
		if q := &n.lanes[e.lane]; len(q.inbox) > 0 {
			w.schedule(&event{at: w.now, kind: evProcess, node: n.id, incarnation: n.incarnation, lane: e.lane})
		} else {
			q.busy = false
			w.idle(n)
		}
	case evCommit:
		n := w.nodes[e.node]
		if !n.up || n.incarnation != e.incarnation {
			return
		}
		w.commit(n)
	case evTick:
		n := w.nodes[e.node]
		if !n.up || n.incarnation != e.incarnation {
			return
		}
		w.record(n, "", nil)
		w.emit(n, n.machine.Tick(n.localTime(w.now)))
		w.scheduleTick(n, w.now+n.tickEvery)
	}
}

// idler is node.Idler: a machine with low-priority work.
type idler interface {
	Idle(now wire.Time) []wire.Envelope
}

// idle gives a node whose inboxes are all empty its low-priority work
// (node.Idler, as the real event loop does once a batch drained its
// inbox).
func (w *world) idle(n *node) {
	idler, ok := n.machine.(idler)
	if !ok {
		return
	}
	for _, l := range n.lanes {
		if len(l.inbox) > 0 {
			return
		}
	}
	w.emit(n, idler.Idle(n.localTime(w.now)))
}

func (w *world) emit(n *node, out []wire.Envelope) {
	if w.beforeSend != nil {
		for _, env := range out {
			w.beforeSend(n, env) // (when the node says it, sent now or after its commit)
		}
	}
	if n.disk != nil {
		n.held = wire.SendEarly(n.held, out, func(env wire.Envelope) { w.send(n.id, env) })
		if !n.commitDue && (len(n.held) > 0 || n.disk.Uncommitted()) {
			// (A step that wrote nothing and holds nothing back needs no
			// commit: nothing would change.)
			n.commitDue = true
			w.schedule(&event{at: w.now + w.between(w.network.CommitTimeMin, w.network.CommitTimeMax), kind: evCommit, node: n.id, incarnation: n.incarnation})
		}
	} else {
		for _, env := range out {
			w.send(n.id, env)
		}
	}
	if w.afterStep != nil {
		w.afterStep(n)
	}
}

// commit makes a node's storage writes so far durable, tells its machine,
// and sends what waited for the commit, then what the machine answered.
func (w *world) commit(n *node) {
	n.commitDue = false
	if err := n.disk.Commit(); err != nil {
		panic(err)
	}
	held := n.held
	n.held = nil
	for _, env := range held {
		w.send(n.id, env)
	}
	committed := n.machine.(committer).Committed(n.localTime(w.now))
	for _, env := range committed {
		if w.beforeSend != nil {
			w.beforeSend(n, env)
		}
		w.send(n.id, env)
	}
	if w.afterStep != nil && len(committed) > 0 {
		w.afterStep(n) // (a commit that answered nothing changed no chain state but durable SNs)
	}
}

func (w *world) record(n *node, from wire.NodeID, m wire.Message) {
	if w.noTrace && w.traceLog == nil {
		return
	}
	what := "tick"
	if m != nil {
		what = wire.MessageName(m)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d %d %s %s %s", w.trace, w.now, n.id, from, what)
	w.trace = h.Sum64()
	if w.traceLog != nil {
		if m != nil {
			what = fmt.Sprintf("%s %+v", what, m)
		}
		w.traceLog(fmt.Sprintf("%10.3fms %-4s ← %-4s %s", float64(w.now)/1e6, n.id, from, what))
	}
}
