package experiment

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/wire"
)

// The NFSv4 paper's §4 experiments (nfsv4-fig6, nfsv4-fig7, nfsv4-fig8)
// run a build-like workload, after the paper's SSH-Build benchmark, from
// one client at site 1 against a keyspace replicated at every site. The
// replication control is Catena's own (internal/control: elections,
// deep and shallow control, idle release, revoke), its machines
// exchanging messages over a modelled WAN; the data path is modelled by
// costs (NFSv4Costs): a write or read served by a site's own chain, and
// an update shipped to every other site one WAN hop later, which a
// primary must see everywhere before it releases control. The baselines
// are costs alone: one local server, one remote server (the paper's Fig.
// 5), a strong chain spanning the sites, and ChainReaction's causal mode
// across sites.

// NFSv4Mode is how the keyspace is replicated across the sites.
type NFSv4Mode string

// The modes the experiments compare.
const (
	// NFSv4Local: one server at the client's site, no replication.
	NFSv4Local NFSv4Mode = "local"
	// NFSv4Remote: one server at the far site (the paper's Fig. 5).
	NFSv4Remote NFSv4Mode = "remote"
	// NFSv4FineGrained: a primary elected per key (the paper's fine-
	// grained control; control.Config.NoDeep).
	NFSv4FineGrained NFSv4Mode = "fine-grained"
	// NFSv4Hierarchical: deep control of prefixes, shallow of keys.
	NFSv4Hierarchical NFSv4Mode = "hierarchical"
	// NFSv4StrongChain: one chain spanning the sites, head at the
	// client's site, CRAQ reads (clean keys read locally).
	NFSv4StrongChain NFSv4Mode = "strong-chain"
	// NFSv4Causal: ChainReaction across sites: every operation local,
	// causal+ rather than single-copy.
	NFSv4Causal NFSv4Mode = "causal-geo"
)

// NFSv4Costs are the modelled costs of the data path.
type NFSv4Costs struct {
	// ClientRTT is the round trip between the client and its site (the
	// paper's LAN: 0.2 ms).
	ClientRTT wire.Time
	// SiteWrite and SiteRead are a site's own service time for a write
	// (its chain's, durable) and a read.
	SiteWrite, SiteRead wire.Time
}

// DefaultNFSv4Costs are the costs the experiments use.
var DefaultNFSv4Costs = NFSv4Costs{ClientRTT: 200 * wire.Microsecond, SiteWrite: 500 * wire.Microsecond, SiteRead: 100 * wire.Microsecond}

// NFSv4Run is one run of the build-like workload.
type NFSv4Run struct {
	Mode  NFSv4Mode
	Sites int
	// RTT is the round trip between any two sites.
	RTT wire.Time
	// Idle is the control's idle time (hierarchical and fine-grained).
	Idle  wire.Time
	Costs NFSv4Costs
	Seed  uint64
}

// NFSv4Phases are the build's three phases, in order.
var NFSv4Phases = []string{"unpack", "configure", "build"}

// NFSv4Result is what one run measured.
type NFSv4Result struct {
	// Phase is each phase's elapsed time (NFSv4Phases order).
	Phase [3]wire.Time
	// Elections counts the operations that waited for an election.
	Elections int
	// Waited is the total time operations waited for elections.
	Waited wire.Time
	// Writes and WriteTime sum the writes and their latency; the
	// control experiments also count the writes served at once.
	Writes    int
	WriteTime wire.Time
}

// Total is the whole build's time.
func (r NFSv4Result) Total() wire.Time { return r.Phase[0] + r.Phase[1] + r.Phase[2] }

// nfsv4Op is one step of the build-like workload.
type nfsv4Op struct {
	kind byte // 'r' read, 'w' write, 'd' delete, 'c' CPU time
	key  string
	cpu  wire.Time
}

// nfsv4Build returns the build-like workload's three phases, drawn from
// seed. After SSH-Build's: unpack creates many new keys under a few
// prefixes (a source tree); configure runs many small programs that read
// sources, write generated headers and makefiles, and create and delete
// temporary keys; build compiles each source, with CPU time between its
// reads and writes and a temporary key per unit, then links.
func nfsv4Build(seed uint64, quick bool) [3][]nfsv4Op {
	rng := rand.New(rand.NewPCG(seed, 0x4e465334))
	dirs, filesPerDir, tests, units := 24, 25, 60, 120
	if quick {
		dirs, filesPerDir, tests, units = 6, 10, 10, 20
	}
	var phases [3][]nfsv4Op
	var sources []string
	for d := range dirs {
		for f := range filesPerDir {
			k := fmt.Sprintf("ssh/src/d%02d/f%03d.c", d, f)
			sources = append(sources, k)
			phases[0] = append(phases[0], nfsv4Op{kind: 'w', key: k}, nfsv4Op{kind: 'c', cpu: 50 * wire.Microsecond})
		}
	}
	exp := func(mean wire.Time) wire.Time { return wire.Time(rng.ExpFloat64() * float64(mean)) }
	for i := range tests {
		for range 8 {
			phases[1] = append(phases[1], nfsv4Op{kind: 'r', key: sources[rng.IntN(len(sources))]})
		}
		tmp := fmt.Sprintf("ssh/build/conftest/t%03d.c", i)
		phases[1] = append(phases[1],
			nfsv4Op{kind: 'w', key: tmp},
			nfsv4Op{kind: 'c', cpu: exp(20 * wire.Millisecond)},
			nfsv4Op{kind: 'd', key: tmp},
			nfsv4Op{kind: 'w', key: fmt.Sprintf("ssh/build/config.h%d", i%4)},
			nfsv4Op{kind: 'w', key: fmt.Sprintf("ssh/build/mk/Makefile%02d", i%12)})
	}
	for i := range units {
		src := sources[rng.IntN(len(sources))]
		tmp := fmt.Sprintf("ssh/build/tmp/cc%04d.s", i)
		phases[2] = append(phases[2], nfsv4Op{kind: 'r', key: src})
		for h := range 4 {
			phases[2] = append(phases[2], nfsv4Op{kind: 'r', key: fmt.Sprintf("ssh/build/config.h%d", h)})
		}
		phases[2] = append(phases[2],
			nfsv4Op{kind: 'c', cpu: exp(150 * wire.Millisecond)},
			nfsv4Op{kind: 'w', key: tmp},
			nfsv4Op{kind: 'c', cpu: exp(50 * wire.Millisecond)},
			nfsv4Op{kind: 'w', key: fmt.Sprintf("ssh/build/obj/o%04d.o", i)},
			nfsv4Op{kind: 'd', key: tmp})
	}
	for i := range units {
		phases[2] = append(phases[2], nfsv4Op{kind: 'r', key: fmt.Sprintf("ssh/build/obj/o%04d.o", i)})
	}
	phases[2] = append(phases[2], nfsv4Op{kind: 'c', cpu: 500 * wire.Millisecond}, nfsv4Op{kind: 'w', key: "ssh/build/bin/ssh"})
	return phases
}

// RunNFSv4 runs the build-like workload once.
func RunNFSv4(r NFSv4Run, quick bool) (NFSv4Result, error) {
	phases := nfsv4Build(r.Seed, quick)
	switch r.Mode {
	case NFSv4FineGrained, NFSv4Hierarchical:
		return runNFSv4Control(r, phases)
	case NFSv4Local, NFSv4Remote, NFSv4StrongChain, NFSv4Causal:
		return runNFSv4Costs(r, phases), nil
	}
	return NFSv4Result{}, fmt.Errorf("nfsv4: unknown mode %q", r.Mode)
}

// runNFSv4Costs runs the modes without replication control: each
// operation costs what the mode's data path costs.
func runNFSv4Costs(r NFSv4Run, phases [3][]nfsv4Op) NFSv4Result {
	c := r.Costs
	var res NFSv4Result
	now := wire.Time(0)
	// The strong chain: a write crosses every site once, and the tail,
	// at the last site, answers the client across the WAN; a key stays
	// dirty (read at the tail) until the tail has applied its write.
	chainWrite := wire.Time(r.Sites) * r.RTT / 2
	dirtyUntil := map[string]wire.Time{}
	for i, ops := range phases {
		began := now
		for _, op := range ops {
			var cost wire.Time
			switch {
			case op.kind == 'c':
				cost = op.cpu
			case r.Mode == NFSv4Remote:
				cost = r.RTT + c.cost(op)
			case r.Mode == NFSv4StrongChain && op.kind != 'r':
				cost = c.ClientRTT + chainWrite + c.SiteWrite
				dirtyUntil[op.key] = now + cost
			case r.Mode == NFSv4StrongChain && now < dirtyUntil[op.key]:
				cost = r.RTT + c.SiteRead // a dirty key: CRAQ asks the tail
			default: // local, causal-geo, a clean read of the chain
				cost = c.ClientRTT + c.cost(op)
			}
			if op.kind != 'r' && op.kind != 'c' {
				res.Writes++
				res.WriteTime += cost
			}
			now += cost
		}
		res.Phase[i] = now - began
	}
	return res
}

// cost is a site's own service time for op.
func (c NFSv4Costs) cost(op nfsv4Op) wire.Time {
	if op.kind == 'r' {
		return c.SiteRead
	}
	return c.SiteWrite
}

// nfsv4World is the sites' control machines on a modelled WAN: messages
// take RTT/2; every machine ticks every tickEvery.
type nfsv4World struct {
	rtt      wire.Time
	now      wire.Time
	machines []*control.Machine // site i+1
	events   nfsv4Events
	seq      int
	// shipped is, per key written, when every site holds its last
	// update; a primary releases control of a path only once every key
	// under it is shipped everywhere (control.Config.Synced).
	shipped map[string]wire.Time
}

const nfsv4TickEvery = wire.Millisecond

type nfsv4Event struct {
	at   wire.Time
	seq  int
	tick bool
	msg  wire.Control
}

type nfsv4Events []nfsv4Event

func (q nfsv4Events) Len() int { return len(q) }
func (q nfsv4Events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q nfsv4Events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nfsv4Events) Push(x any)   { *q = append(*q, x.(nfsv4Event)) }
func (q *nfsv4Events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newNFSv4World(r NFSv4Run) (*nfsv4World, error) {
	w := &nfsv4World{rtt: r.RTT, shipped: map[string]wire.Time{}}
	var ids []wire.SiteID
	for i := 1; i <= r.Sites; i++ {
		ids = append(ids, wire.SiteID(i))
	}
	for _, id := range ids {
		m, err := control.New(control.Config{Self: id, Sites: ids, Keyspace: "ssh", DeepMinDepth: 1,
			Idle: r.Idle, NoDeep: r.Mode == NFSv4FineGrained, Synced: w.synced})
		if err != nil {
			return nil, err
		}
		w.machines = append(w.machines, m)
	}
	w.push(nfsv4Event{at: nfsv4TickEvery, tick: true})
	return w, nil
}

func (w *nfsv4World) push(e nfsv4Event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.events, e)
}

// synced reports whether every site holds every update under path.
func (w *nfsv4World) synced(path string) bool {
	for k, at := range w.shipped {
		if at <= w.now {
			delete(w.shipped, k)
			continue
		}
		if k == path || wire.IsPrefixPath(path) && strings.HasPrefix(k, path) {
			return false
		}
	}
	return true
}

// collect sends what every machine produced, each message arriving
// after one WAN hop.
func (w *nfsv4World) collect() {
	for _, m := range w.machines {
		m.Persisted() // the records a host persists: kept in memory here
		for _, msg := range m.Messages() {
			w.push(nfsv4Event{at: w.now + w.rtt/2, msg: msg})
		}
	}
}

// step handles the next event; it returns false when none is left.
func (w *nfsv4World) step() (bool, error) {
	if len(w.events) == 0 {
		return false, nil
	}
	e := heap.Pop(&w.events).(nfsv4Event)
	w.now = e.at
	if e.tick {
		for _, m := range w.machines {
			m.Tick(w.now)
		}
		w.push(nfsv4Event{at: w.now + nfsv4TickEvery, tick: true})
	} else {
		w.machines[e.msg.To-1].Step(e.msg, w.now)
	}
	w.collect()
	if !e.tick {
		// The invariants of internal/control (at most one primary per
		// key, ancestry tables) after every message; ticks only
		// release, which a later message's check covers.
		if err := control.Check(w.machines); err != nil {
			return false, fmt.Errorf("nfsv4 at %s: %w", clock(w.now), err)
		}
	}
	return true, nil
}

// advance runs the world until t.
func (w *nfsv4World) advance(t wire.Time) error {
	for len(w.events) > 0 && w.events[0].at <= t {
		if _, err := w.step(); err != nil {
			return err
		}
	}
	w.now = max(w.now, t)
	return nil
}

// runNFSv4Control runs the workload with Catena's replication control:
// the client at site 1 asks its machine where each operation runs.
func runNFSv4Control(r NFSv4Run, phases [3][]nfsv4Op) (NFSv4Result, error) {
	w, err := newNFSv4World(r)
	if err != nil {
		return NFSv4Result{}, err
	}
	local := w.machines[0]
	c := r.Costs
	var res NFSv4Result
	for i, ops := range phases {
		began := w.now
		for _, op := range ops {
			start := w.now
			if op.kind == 'c' {
				if err := w.advance(w.now + op.cpu); err != nil {
					return res, err
				}
				continue
			}
			waited := false
			var cost wire.Time
			for cost == 0 {
				var d control.Decision
				if op.kind == 'r' {
					d = local.Read(op.key)
				} else {
					d = local.Write(op.key, w.now)
				}
				w.collect()
				switch d.Kind {
				case control.Serve:
					cost = c.ClientRTT + c.cost(op)
				case control.Forward:
					cost = c.ClientRTT + w.rtt + c.cost(op)
				case control.Wait:
					if !waited {
						waited = true
						res.Elections++
					}
					for !local.Changed() {
						if w.now-start > wire.Time(time.Minute) {
							return res, fmt.Errorf("nfsv4: %s of %s still waits for an election after %s", string(op.kind), op.key, clock(w.now-start))
						}
						more, err := w.step()
						if err != nil {
							return res, err
						}
						if !more {
							return res, fmt.Errorf("nfsv4: %s of %s waits with nothing left to happen", string(op.kind), op.key)
						}
					}
				default:
					return res, fmt.Errorf("nfsv4: %s of %s: %s: %v", string(op.kind), op.key, d.Kind, d.Err)
				}
			}
			if waited {
				res.Waited += w.now - start
			}
			if err := w.advance(w.now + cost); err != nil {
				return res, err
			}
			if op.kind != 'r' {
				// Shipped from the primary's site to every other one.
				w.shipped[op.key] = w.now + w.rtt/2
				res.Writes++
				res.WriteTime += w.now - start
			}
		}
		res.Phase[i] = w.now - began
	}
	return res, nil
}
