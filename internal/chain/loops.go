package chain

import (
	"cmp"
	"slices"
	"sync"

	"github.com/catena-kv/catena/internal/wire"
)

// A server process may run its volumes on several event loops, one Server
// per loop, so that it uses several cores (docs/adr/0019-event-loops.md).
// Loop i holds the volumes v with LoopOf(v, count) == i, and runs each on
// one goroutine, so the replica state machine is unchanged: every message
// of a volume is stepped by the same loop, in the order it arrived on its
// link. Loop 0 also speaks for the process to the master: its heartbeats
// report every loop's volumes (LoopStatuses), and the lease, users and
// keyspaces each reply carries reach every loop (LoopRouter).

// LoopOf returns which of count event loops runs volume v's replica. The
// real server's loops and the simulator's model of them (sim.LoadOptions
// Loops) both use it.
func LoopOf(v wire.VolumeID, count int) int {
	if count <= 1 {
		return 0
	}
	return int(uint32(v) % uint32(count))
}

// LoopOptions make a Server one of the event loops of a server process.
// The zero value is a process of one loop.
type LoopOptions struct {
	// Index is this loop's number, Count how many the process runs.
	Index, Count int
	// Statuses carries every loop's volume statuses to loop 0's
	// heartbeats (Count > 1).
	Statuses *LoopStatuses
	// SilenceMax is how long another loop may go without publishing its
	// statuses before loop 0 stops sending heartbeats (zero:
	// DefaultLoopSilenceMax). A loop publishes after every batch, at
	// least once a tick, so one that has not for this long is hung; the
	// master, hearing nothing, takes the whole server out of its chains,
	// as it would a crashed one (CR §2: servers are fail-stop), instead
	// of leaving the hung loop's volumes in chains it no longer serves.
	SilenceMax wire.Time
}

// DefaultLoopSilenceMax is LoopOptions.SilenceMax's default: far above
// any batch's time, like node.DefaultStuckAfter.
const DefaultLoopSilenceMax = 10 * wire.Second

// LoopSilence is a loop of a server process that has published no
// statuses for a while (LoopOptions.SilenceMax).
type LoopSilence struct {
	// Loop is the loop's index; For how long it has been silent.
	Loop int
	For  wire.Time
}

// many reports whether the process runs several loops.
func (o LoopOptions) many() bool { return o.Count > 1 }

// LoopRouter routes the messages a server process receives to its Count
// loops (a transport.Router): a volume's messages go to its loop; what the
// master says to the whole server (a heartbeat reply, the users and
// roles) and a link's reset go to every loop, a heartbeat reply with only
// that loop's configurations (so no two loops share a configuration's
// slices); everything else goes to loop 0. The loops only read the
// messages they share.
type LoopRouter struct{ Count int }

// Inboxes returns the number of loops.
func (r LoopRouter) Inboxes() int { return max(r.Count, 1) }

// Inbox returns the loop m goes to, or -1 for every loop.
func (r LoopRouter) Inbox(m wire.Message) int {
	switch m.(type) {
	case *wire.HeartbeatReply, *wire.NewAuth, *wire.PeerReset:
		return -1
	}
	if v, ok := wire.VolumeOf(m); ok {
		return LoopOf(v, r.Count)
	}
	return 0
}

// Copy returns what loop i gets of a message for every loop.
func (r LoopRouter) Copy(m wire.Message, i int) wire.Message {
	reply, ok := m.(*wire.HeartbeatReply)
	if !ok {
		return m
	}
	own := *reply
	own.Configs = nil
	for _, c := range reply.Configs {
		if LoopOf(c.Volume, r.Count) == i {
			own.Configs = append(own.Configs, c)
		}
	}
	return &own
}

// LoopStatuses holds the volume statuses each loop of a process last
// published, for loop 0's heartbeats. It is safe for concurrent use: each
// loop publishes from its own goroutine.
type LoopStatuses struct {
	mu       sync.Mutex
	statuses [][]wire.VolumeStatus
	// seen marks the loops that published at least once: before every
	// loop did, a heartbeat would leave volumes out, and a restarted
	// server's first heartbeat must name every volume it holds (the
	// master keeps it in the chains where it alone is intact).
	seen []bool
	// wanted is set per loop that asked for a heartbeat at once (a
	// joining server became ready: its tail pauses until the master
	// promotes it).
	wanted []bool
	// seeds are, per loop, the volumes of that loop another loop seeded
	// (Server.takeSeeds).
	seeds [][]wire.VolumeID
	// publishedAt is when each loop last published, on the loops' clock
	// (a process's loops share one).
	publishedAt []wire.Time
}

// NewLoopStatuses returns the statuses of count loops, none published.
func NewLoopStatuses(count int) *LoopStatuses {
	return &LoopStatuses{statuses: make([][]wire.VolumeStatus, count), seen: make([]bool, count), wanted: make([]bool, count),
		seeds: make([][]wire.VolumeID, count), publishedAt: make([]wire.Time, count)}
}

// Publish records loop i's statuses at now, replacing what it published
// before. statuses becomes the LoopStatuses'.
func (l *LoopStatuses) Publish(i int, statuses []wire.VolumeStatus, now wire.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.statuses[i], l.seen[i], l.publishedAt[i] = statuses, true, now
}

// Silent returns the loop other than except that has published nothing
// for longest, if that is longer than max at now.
func (l *LoopStatuses) Silent(except int, now, max wire.Time) (LoopSilence, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest LoopSilence
	found := false
	for i, at := range l.publishedAt {
		if i != except && l.seen[i] && now-at > max && (!found || now-at > longest.For) {
			longest, found = LoopSilence{Loop: i, For: now - at}, true
		}
	}
	return longest, found
}

// Others appends to dst the statuses the loops other than except
// published; false while some loop has published none yet.
func (l *LoopStatuses) Others(dst []wire.VolumeStatus, except int) ([]wire.VolumeStatus, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if slices.Contains(l.seen, false) {
		return dst, false
	}
	for i, s := range l.statuses {
		if i != except {
			dst = append(dst, s...)
		}
	}
	return dst, true
}

// WantHeartbeat records that loop i asks for a heartbeat as soon as its
// statuses are published (its batch committed).
func (l *LoopStatuses) WantHeartbeat(i int) {
	l.mu.Lock()
	l.wanted[i] = true
	l.mu.Unlock()
}

// TakeWanted reports whether loop i asked for a heartbeat since the last
// call, and clears the request.
func (l *LoopStatuses) TakeWanted(i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.wanted[i]
	l.wanted[i] = false
	return w
}

// HandSeed hands volume v's seed, which another loop's replica made, to
// loop i, which runs v (Server.takeSeeds).
func (l *LoopStatuses) HandSeed(i int, v wire.VolumeID) {
	l.mu.Lock()
	l.seeds[i] = append(l.seeds[i], v)
	l.mu.Unlock()
}

// TakeSeeds returns the seeds handed to loop i since the last call.
func (l *LoopStatuses) TakeSeeds(i int) []wire.VolumeID {
	l.mu.Lock()
	defer l.mu.Unlock()
	seeds := l.seeds[i]
	l.seeds[i] = nil
	return seeds
}

// Statuses returns the statuses of the volumes this loop holds, as its
// heartbeats report them: what a server process of several loops
// publishes to LoopStatuses. Seeds made since the last call become
// replicas first (takeSeeds).
func (s *Server) Statuses(now wire.Time) []wire.VolumeStatus {
	s.takeSeeds()
	volumes := make([]wire.VolumeStatus, 0, len(s.ordered))
	for _, r := range s.ordered {
		st := r.Status()
		st.StalledFor = r.StalledFor(now)
		volumes = append(volumes, st)
	}
	return volumes
}

// owns reports whether volume v runs on this loop.
func (s *Server) owns(v wire.VolumeID) bool {
	return LoopOf(v, s.opts.Loop.Count) == s.opts.Loop.Index
}

// speaksToMaster reports whether this loop sends the process's
// heartbeats: the only loop, or loop 0.
func (s *Server) speaksToMaster() bool { return s.opts.Loop.Index == 0 }

// Nudge sends a heartbeat now, at loop 0 of several, when another loop
// asked for one (LoopStatuses.WantHeartbeat): node.Nudger.
func (s *Server) Nudge(now wire.Time) []wire.Envelope {
	if !s.speaksToMaster() {
		return nil
	}
	return s.heartbeat(now)
}

// silentLoop returns, at loop 0 of several, another loop that has
// published nothing for longer than LoopOptions.SilenceMax.
func (s *Server) silentLoop(now wire.Time) (LoopSilence, bool) {
	o := s.opts.Loop
	if !o.many() {
		return LoopSilence{}, false
	}
	return o.Statuses.Silent(o.Index, now, cmp.Or(o.SilenceMax, DefaultLoopSilenceMax))
}

// allStatuses returns the statuses a heartbeat reports, ordered by
// volume; false while another loop has published none yet.
func (s *Server) allStatuses(now wire.Time) ([]wire.VolumeStatus, bool) {
	volumes := s.Statuses(now)
	if !s.opts.Loop.many() {
		return volumes, true
	}
	volumes, ok := s.opts.Loop.Statuses.Others(volumes, s.opts.Loop.Index)
	slices.SortFunc(volumes, func(a, b wire.VolumeStatus) int { return cmp.Compare(a.Volume, b.Volume) })
	return volumes, ok
}

// SteppedLoops is a server process of several event loops whose steps
// run one at a time on the caller's goroutine: the simulator's stand-in
// for node.Pool, so that a simulated server runs the loops' own code. It
// routes each message as the real server's transport does (LoopRouter); a tick ticks the
// other loops and publishes their statuses before loop 0 ticks (and may
// send a heartbeat), and a loop that asks for a heartbeat publishes its
// statuses and has loop 0 send one at once, as the real loops do once
// their batch has committed.
type SteppedLoops struct {
	loops    []*Server
	statuses *LoopStatuses
	router   LoopRouter
}

// NewSteppedLoops returns count loops of the server o describes (count
// above 1; o.Loop is set per loop). The loops share o.Engine.
func NewSteppedLoops(o ServerOptions, count int) *SteppedLoops {
	l := &SteppedLoops{statuses: NewLoopStatuses(count), router: LoopRouter{Count: count}}
	for i := range count {
		lo := o
		lo.Loop = LoopOptions{Index: i, Count: count, Statuses: l.statuses}
		l.loops = append(l.loops, NewServer(lo))
	}
	return l
}

// Step hands m to the loops LoopRouter names.
func (l *SteppedLoops) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	var out []wire.Envelope
	if i := l.router.Inbox(m); i >= 0 {
		out = l.loops[i].Step(now, from, m)
	} else {
		for i, s := range l.loops {
			out = append(out, s.Step(now, from, l.router.Copy(m, i))...)
		}
	}
	return l.heartbeatsWanted(now, out)
}

// Tick ticks every loop, loop 0 last.
func (l *SteppedLoops) Tick(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for i := len(l.loops) - 1; i >= 0; i-- {
		if i == 0 {
			l.statuses.Publish(0, l.loops[0].Statuses(now), now)
		}
		out = append(out, l.loops[i].Tick(now)...)
		if i > 0 {
			l.statuses.Publish(i, l.loops[i].Statuses(now), now)
		}
	}
	return l.heartbeatsWanted(now, out)
}

// Idle lets every loop forward what it held back.
func (l *SteppedLoops) Idle(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for _, s := range l.loops {
		out = append(out, s.Idle(now)...)
	}
	return out
}

// Committed tells every loop that the storage writes so far are durable.
func (l *SteppedLoops) Committed(now wire.Time) []wire.Envelope {
	var out []wire.Envelope
	for _, s := range l.loops {
		out = append(out, s.Committed(now)...)
	}
	return l.heartbeatsWanted(now, out)
}

// heartbeatsWanted publishes the statuses of each loop that asked for a
// heartbeat and appends loop 0's heartbeat to out if one did.
func (l *SteppedLoops) heartbeatsWanted(now wire.Time, out []wire.Envelope) []wire.Envelope {
	wanted := false
	for i, s := range l.loops {
		if l.statuses.TakeWanted(i) {
			l.statuses.Publish(i, s.Statuses(now), now)
			wanted = true
		}
	}
	if wanted {
		out = append(out, l.loops[0].Nudge(now)...)
	}
	return out
}

// Replica returns the replica of volume v, from the loop that runs it, or
// nil.
func (l *SteppedLoops) Replica(v wire.VolumeID) *Replica {
	return l.loops[LoopOf(v, len(l.loops))].Replica(v)
}
