package experiment

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// fig7Strategies are the strategies of the paper's Figure 7, in its order,
// as Catena implements them.
var fig7Strategies = []placement.Strategy{placement.Ring, placement.RandomSeq, placement.Random}

// fig7Label is the paper's name of a strategy: ring, rndseq, rndpar.
func fig7Label(s placement.Strategy) string {
	switch s {
	case placement.RandomSeq:
		return "rndseq"
	case placement.Random:
		return "rndpar"
	}
	return string(s)
}

// Model holds the parameters of one MTBU simulation (CR §5.4) of Catena's
// placement and recovery: placement.Initial places the volumes, and after
// every event the placement policy (placement.Cluster's Recover and
// Rebalance, the functions the master runs) decides which chains to
// extend, from which member, onto which server, and which to shrink.
type Model struct {
	Servers  int                // N, constant: a failed server comes back empty
	Replicas int                // t, the chain length of every volume
	Strategy placement.Strategy // placement and recovery policy

	VolumesPerServer int           // replicas a server holds at time 0, on average; N·VolumesPerServer/t volumes
	MTBF             time.Duration // mean of each server's exponential time to failure
	ServerCopy       time.Duration // time to copy one whole server's data (VolumesPerServer volumes)
	TransferMin      time.Duration // the shortest one volume's transfer can take
	// RecoveryPerServerMax is the master's budget: the transfers a server
	// takes part in at once, as source or target (0: the master's
	// default, placement.RecoveryPerServerDefault).
	RecoveryPerServerMax int
	RepairDelay          time.Duration // time from a failure until the server is back, empty

	// Horizon ends a replication that has seen no unavailability; its sample
	// is then censored (a lower bound). Zero means no horizon.
	Horizon time.Duration
}

// PaperModel returns the parameters of CR §5.4 for n servers, chain length
// t and strategy s: 100 volumes per server, MTBF 24 h, 4 h to copy a
// server, transfers of at least 10 s; the master's default budget.
func PaperModel(s placement.Strategy, n, t int) Model {
	return Model{
		Servers:          n,
		Replicas:         t,
		Strategy:         s,
		VolumesPerServer: 100,
		MTBF:             24 * time.Hour,
		ServerCopy:       4 * time.Hour,
		TransferMin:      10 * time.Second,
	}
}

func (m Model) validate() error {
	switch {
	case m.Servers < 1, m.Replicas < 1, m.VolumesPerServer < 1:
		return fmt.Errorf("servers, replicas and volumes per server must be positive: %+v", m)
	case m.Replicas > m.Servers:
		return fmt.Errorf("chain length %d exceeds %d servers", m.Replicas, m.Servers)
	case m.MTBF <= 0, m.ServerCopy <= 0, m.TransferMin < 0, m.RepairDelay < 0, m.Horizon < 0, m.RecoveryPerServerMax < 0:
		return fmt.Errorf("durations and budget must be positive: %+v", m)
	case !slices.Contains(fig7Strategies, m.Strategy):
		return fmt.Errorf("strategy %q is not one of fig7's %v", m.Strategy, fig7Strategies)
	}
	return nil
}

// Volumes is the number of volumes: N·VolumesPerServer/t, rounded down.
func (m Model) Volumes() int { return m.Servers * m.VolumesPerServer / m.Replicas }

// TransferTime is how long one volume's recovery takes once its source
// and target are free: its share of a server's copy time, at least
// TransferMin.
func (m Model) TransferTime() time.Duration {
	return max(m.TransferMin, m.ServerCopy/time.Duration(m.VolumesPerServer))
}

// Outcome is one replication's result.
type Outcome struct {
	Time      time.Duration // time of the first unavailability, or the horizon
	Censored  bool          // no unavailability before the horizon
	Volume    int           // the volume that became unavailable (-1 if censored)
	Failures  int           // server failures simulated
	Transfers int           // extensions completed (recoveries and rebalancing moves)
	Moves     int           // rebalancing moves started
	Aborted   int           // extensions aborted because a member or the target failed
	ActiveMax int           // most extensions running at once
	Events    int           // events processed
}

// Hours is o.Time in hours.
func (o Outcome) Hours() float64 { return o.Time.Hours() }

// Simulate runs one replication of m from the initial placement until some
// volume has lost all its replicas (or the horizon), drawing every random
// choice from rng.
func Simulate(m Model, rng *rand.Rand) (Outcome, error) {
	s, err := newSimulator(m, rng)
	if err != nil {
		return Outcome{}, err
	}
	for i := range s.servers {
		s.scheduleFailure(int32(i))
	}
	s.decide()
	return s.run(), nil
}

// The simulator counts time in milliseconds.
type millis = int64

func toMillis(d time.Duration) millis { return millis(d / time.Millisecond) }

type eventKind uint8

const (
	eventFailure eventKind = iota
	eventRepair
	eventTransferDone
)

type event struct {
	at   millis
	seq  uint64 // breaks ties in scheduling order
	kind eventKind
	id   int32  // server or volume
	gen  uint32 // the server's incarnation or the volume's extension
}

func (e event) before(o event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// eventQueue is a binary min-heap of events by (at, seq).
type eventQueue []event

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	h := *q
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return e
}

type server struct {
	incarnation uint32
	// volumes whose chain names this server, as a member or joining.
	volumes []int32
	// The recovery bandwidth, as the simulator (internal/sim) models it: a
	// server sends one volume and receives one at a time, and a transfer
	// reserves its sender and receiver from when both are free.
	sendFree, receiveFree millis
}

// simulator runs one replication. The master's view of the cluster is a
// placement.Cluster and a placement.Chain per volume; the master removes a
// failed server from every chain at once (aborting the extensions of those
// chains, as Catena's master does), and after every event it runs the
// placement policy until it decides nothing more, applying each decision
// at once.
type simulator struct {
	m   Model
	rng *rand.Rand

	now    millis
	seq    uint64
	events eventQueue

	cluster *placement.Cluster
	chains  []placement.Chain // by volume
	gen     []uint32          // by volume: its current extension's generation
	servers []server
	// candidates are the volumes the policy may change, in volume order:
	// not being extended, and not of length t.
	candidates  []int32
	isCandidate []bool
	scratch     []placement.Chain

	transferTime millis
	mtbf         float64 // milliseconds
	horizon      millis

	failed, completed, moves, aborted, activeMax, processed int

	// noFailures stops the simulator from scheduling random failures; tests
	// fail servers by hand.
	noFailures bool
	// afterEvent, if set, runs after every event (tests check invariants).
	afterEvent func()
	// onStart, if set, runs when an extension starts.
	onStart func(volume int32, source, target int)
}

// fig7ServerIDs names n servers for placement.Initial: server i is the
// i-th of the ring.
func fig7ServerIDs(n int) []wire.NodeID {
	ids := make([]wire.NodeID, n)
	for i := range ids {
		ids[i] = wire.NodeID(strconv.Itoa(i))
	}
	return ids
}

func newSimulator(m Model, rng *rand.Rand) (*simulator, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	ids := fig7ServerIDs(m.Servers)
	initial, err := placement.Initial(m.Strategy, ids, m.Volumes(), m.Replicas, rng)
	if err != nil {
		return nil, err
	}
	s := &simulator{
		m:            m,
		rng:          rng,
		transferTime: max(1, toMillis(m.TransferTime())),
		mtbf:         float64(toMillis(m.MTBF)),
		horizon:      toMillis(m.Horizon),
		cluster:      placement.NewCluster(m.Strategy, m.Replicas, m.RecoveryPerServerMax, m.Servers),
		chains:       make([]placement.Chain, m.Volumes()),
		gen:          make([]uint32, m.Volumes()),
		servers:      make([]server, m.Servers),
		isCandidate:  make([]bool, m.Volumes()),
	}
	// Chains have at most t+1 members (during a rebalancing move): one
	// array holds them all.
	members := make([]int, len(s.chains)*(m.Replicas+1))
	for v := range s.chains {
		ch := members[v*(m.Replicas+1) : v*(m.Replicas+1) : (v+1)*(m.Replicas+1)]
		for _, id := range initial[wire.VolumeID(v)] {
			i, _ := strconv.Atoi(string(id))
			ch = append(ch, i)
			s.servers[i].volumes = append(s.servers[i].volumes, int32(v))
		}
		s.chains[v] = placement.Chain{Volume: wire.VolumeID(v), Members: ch, Joining: placement.None}
		s.updateCandidate(int32(v))
	}
	for i := range s.cluster.Live {
		s.cluster.Live[i] = true
	}
	s.cluster.Count(s.chains)
	return s, nil
}

func (s *simulator) schedule(at millis, kind eventKind, id int32, gen uint32) {
	s.seq++
	s.events.push(event{at: at, seq: s.seq, kind: kind, id: id, gen: gen})
}

func (s *simulator) scheduleFailure(srv int32) {
	if s.noFailures {
		return
	}
	// At least 1 ms, so that a server never fails in the instant it arrives.
	d := max(1, millis(s.rng.ExpFloat64()*s.mtbf))
	s.schedule(s.now+d, eventFailure, srv, s.servers[srv].incarnation)
}

// run processes events until a volume becomes unavailable, the horizon
// passes or nothing is left to do.
func (s *simulator) run() Outcome {
	for len(s.events) > 0 {
		e := s.events.pop()
		if s.horizon > 0 && e.at > s.horizon {
			s.now = s.horizon
			break
		}
		s.now = e.at
		s.processed++
		lost := s.step(e)
		if s.afterEvent != nil {
			s.afterEvent()
		}
		if lost >= 0 {
			return s.outcome(false, int(lost))
		}
	}
	return s.outcome(true, -1)
}

func (s *simulator) outcome(censored bool, vol int) Outcome {
	return Outcome{
		Time:      time.Duration(s.now) * time.Millisecond,
		Censored:  censored,
		Volume:    vol,
		Failures:  s.failed,
		Transfers: s.completed,
		Moves:     s.moves,
		Aborted:   s.aborted,
		ActiveMax: s.activeMax,
		Events:    s.processed,
	}
}

// step applies one event and the policy's decisions; it returns a volume
// that became unavailable, or -1.
func (s *simulator) step(e event) int32 {
	switch e.kind {
	case eventFailure:
		if e.gen != s.servers[e.id].incarnation || !s.cluster.Live[e.id] {
			return -1
		}
		if lost := s.fail(e.id); lost >= 0 {
			return lost
		}
	case eventRepair:
		if e.gen != s.servers[e.id].incarnation || s.cluster.Live[e.id] {
			return -1
		}
		s.cluster.Live[e.id] = true
		s.scheduleFailure(e.id)
	case eventTransferDone:
		if e.gen != s.gen[e.id] || s.chains[e.id].Joining == placement.None {
			return -1
		}
		s.promote(e.id)
	}
	s.decide()
	return -1
}

// fail crashes server f and removes it from every chain, as the master
// does: the chains' extensions are aborted, and a chain whose last member
// it was is lost. It returns the lowest such volume, or -1. The server
// comes back empty after RepairDelay.
func (s *simulator) fail(f int32) int32 {
	s.failed++
	srv := &s.servers[f]
	lost := int32(-1)
	for _, v := range slices.Clone(srv.volumes) {
		ch := &s.chains[v]
		if ch.Joining != placement.None {
			s.abort(v)
		}
		i := slices.Index(ch.Members, int(f))
		if i < 0 {
			continue
		}
		if len(ch.Members) == 1 {
			if lost < 0 || v < lost {
				lost = v
			}
			continue
		}
		s.removeMember(v, int(f))
	}
	if lost >= 0 {
		return lost
	}
	if s.cluster.Load[f] != 0 || s.cluster.Transfers[f] != 0 || len(srv.volumes) != 0 {
		panic(fmt.Sprintf("INVARIANT: failed server %d still counts load %d, transfers %d, volumes %v", f, s.cluster.Load[f], s.cluster.Transfers[f], srv.volumes))
	}
	srv.incarnation++
	if s.m.RepairDelay == 0 {
		s.scheduleFailure(f)
		return -1
	}
	s.cluster.Live[f] = false
	s.schedule(s.now+toMillis(s.m.RepairDelay), eventRepair, f, srv.incarnation)
	return -1
}

// removeMember removes member i from volume v's chain.
func (s *simulator) removeMember(v int32, i int) {
	ch := &s.chains[v]
	k := slices.Index(ch.Members, i)
	wasShort := len(ch.Members) < s.m.Replicas
	ch.Members = slices.Delete(ch.Members, k, k+1)
	s.cluster.Load[i]--
	s.dropVolume(i, v)
	if !wasShort && len(ch.Members) < s.m.Replicas {
		s.cluster.Short++
	}
	s.updateCandidate(v)
}

// dropVolume removes v from server i's list.
func (s *simulator) dropVolume(i int, v int32) {
	vols := s.servers[i].volumes
	k := slices.Index(vols, v)
	vols[k] = vols[len(vols)-1]
	s.servers[i].volumes = vols[:len(vols)-1]
}

// abort ends volume v's extension without its joining server.
func (s *simulator) abort(v int32) {
	ch := &s.chains[v]
	j, tail := ch.Joining, ch.Members[len(ch.Members)-1]
	s.cluster.Active--
	s.cluster.Transfers[j]--
	s.cluster.Transfers[tail]--
	s.cluster.Load[j]--
	s.dropVolume(j, v)
	ch.Joining = placement.None
	s.gen[v]++
	s.aborted++
	s.updateCandidate(v)
}

// promote makes volume v's joining server its tail: its copy is complete.
func (s *simulator) promote(v int32) {
	ch := &s.chains[v]
	j, tail := ch.Joining, ch.Members[len(ch.Members)-1]
	s.cluster.Active--
	s.cluster.Transfers[j]--
	s.cluster.Transfers[tail]--
	s.completed++
	wasShort := len(ch.Members) < s.m.Replicas
	ch.Members = append(ch.Members, j) // j's load and volume list counted it already
	ch.Joining = placement.None
	if wasShort && len(ch.Members) >= s.m.Replicas {
		s.cluster.Short--
	}
	s.updateCandidate(v)
}

// decide runs the placement policy, as the master does on every tick, and
// applies its decisions, until it decides nothing more.
func (s *simulator) decide() {
	for {
		chains := s.scratch[:0]
		for _, v := range s.candidates {
			chains = append(chains, s.chains[v])
		}
		s.scratch = chains
		changes := s.cluster.Recover(chains)
		for _, c := range changes {
			s.apply(c)
		}
		if s.cluster.Idle() {
			if move, ok := s.cluster.Rebalance(s.chainsOf); ok {
				s.moves++
				s.apply(move)
				continue
			}
		}
		if len(changes) == 0 {
			return
		}
	}
}

// chainsOf returns the chains that name server i, in volume order.
func (s *simulator) chainsOf(i int) []placement.Chain {
	vols := slices.Sorted(slices.Values(s.servers[i].volumes))
	out := make([]placement.Chain, len(vols))
	for k, v := range vols {
		out[k] = s.chains[v]
	}
	return out
}

// apply makes one of the policy's changes. The policy counted the
// extensions it started; a shrink is counted here.
func (s *simulator) apply(c placement.Change) {
	v := int32(c.Volume)
	ch := &s.chains[v]
	switch c.Kind {
	case placement.Extend:
		if c.Source != ch.Members[len(ch.Members)-1] || ch.Joining != placement.None {
			panic(fmt.Sprintf("INVARIANT: extension %+v of %+v not from its tail", c, *ch))
		}
		ch.Joining = c.Server
		s.servers[c.Server].volumes = append(s.servers[c.Server].volumes, v)
		s.gen[v]++
		src, dst := &s.servers[c.Source], &s.servers[c.Server]
		done := max(s.now, src.sendFree, dst.receiveFree) + s.transferTime
		src.sendFree, dst.receiveFree = done, done
		s.schedule(done, eventTransferDone, v, s.gen[v])
		s.activeMax = max(s.activeMax, s.cluster.Active)
		s.updateCandidate(v)
		if s.onStart != nil {
			s.onStart(v, c.Source, c.Server)
		}
	case placement.Shrink:
		i := slices.Index(ch.Members, c.Server)
		if i < 0 || i == len(ch.Members)-1 || ch.Joining != placement.None {
			panic(fmt.Sprintf("INVARIANT: shrink %+v of %+v", c, *ch))
		}
		s.removeMember(v, c.Server)
	}
}

// updateCandidate keeps v in the candidates exactly when the policy may
// change it: not being extended, and not of length t.
func (s *simulator) updateCandidate(v int32) {
	ch := &s.chains[v]
	want := ch.Joining == placement.None && len(ch.Members) != s.m.Replicas
	if want == s.isCandidate[v] {
		return
	}
	s.isCandidate[v] = want
	i, _ := slices.BinarySearch(s.candidates, v)
	if want {
		s.candidates = slices.Insert(s.candidates, i, v)
	} else {
		s.candidates = slices.Delete(s.candidates, i, i+1)
	}
}

// checkInvariants panics if the simulator's state is inconsistent. Tests
// call it after every event.
func (s *simulator) checkInvariants() {
	fresh := placement.NewCluster(s.m.Strategy, s.m.Replicas, s.m.RecoveryPerServerMax, s.m.Servers)
	fresh.Count(s.chains)
	c := s.cluster
	if !slices.Equal(fresh.Load, c.Load) || !slices.Equal(fresh.Transfers, c.Transfers) || fresh.Active != c.Active || fresh.Short != c.Short {
		panic(fmt.Sprintf("INVARIANT: counts load %v transfers %v active %d short %d, the chains give %v %v %d %d",
			c.Load, c.Transfers, c.Active, c.Short, fresh.Load, fresh.Transfers, fresh.Active, fresh.Short))
	}
	budget := s.m.RecoveryPerServerMax
	if budget == 0 {
		budget = placement.RecoveryPerServerDefault
	}
	if limit := placement.RecoveriesMax(s.m.Strategy, s.m.Replicas); limit > 0 && c.Active > limit {
		panic(fmt.Sprintf("INVARIANT: %d extensions running, the limit is %d", c.Active, limit))
	}
	named := make([][]int32, s.m.Servers)
	var candidates []int32
	for v, ch := range s.chains {
		all := slices.Clone(ch.Members)
		if ch.Joining != placement.None {
			all = append(all, ch.Joining)
		}
		for _, i := range all {
			named[i] = append(named[i], int32(v))
			if !c.Live[i] {
				panic(fmt.Sprintf("INVARIANT: volume %d names server %d, which is down", v, i))
			}
		}
		slices.Sort(all)
		if len(slices.Compact(slices.Clone(all))) != len(all) {
			panic(fmt.Sprintf("INVARIANT: volume %d has two replicas on one server: %+v", v, ch))
		}
		if len(ch.Members) == 0 || len(ch.Members) > s.m.Replicas+1 {
			panic(fmt.Sprintf("INVARIANT: volume %d has %d members", v, len(ch.Members)))
		}
		if ch.Joining == placement.None && len(ch.Members) != s.m.Replicas {
			candidates = append(candidates, int32(v))
		}
	}
	if !slices.Equal(candidates, s.candidates) {
		panic(fmt.Sprintf("INVARIANT: candidates %v, the chains give %v", s.candidates, candidates))
	}
	for i := range s.servers {
		if got := slices.Sorted(slices.Values(s.servers[i].volumes)); !slices.Equal(got, named[i]) {
			panic(fmt.Sprintf("INVARIANT: server %d lists volumes %v, the chains name it in %v", i, got, named[i]))
		}
		if c.Transfers[i] > budget {
			panic(fmt.Sprintf("INVARIANT: server %d in %d transfers, budget %d", i, c.Transfers[i], budget))
		}
	}
}
