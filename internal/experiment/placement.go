package experiment

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Strategy is a volume placement and recovery strategy of CR §5.4.
type Strategy int

const (
	// Ring places a volume's replicas on consecutive servers of a
	// consistent-hash ring; a lost replica is replaced on the first server
	// clockwise from the volume's point that is up and not in its chain, so
	// one failure's recoveries go to its t successors, and at most t of
	// them run at once.
	Ring Strategy = iota
	// RndSeq places replicas on random servers but, like Ring, runs at most
	// t of one failure's recoveries at once.
	RndSeq
	// RndPar places replicas on random servers and runs as many recoveries
	// at once as free sources and targets allow, up to RecoveryShareMax of
	// the servers.
	RndPar
)

// Strategies lists every strategy in the order of the paper's Figure 7.
var Strategies = []Strategy{Ring, RndSeq, RndPar}

func (s Strategy) String() string {
	switch s {
	case Ring:
		return "ring"
	case RndSeq:
		return "rndseq"
	case RndPar:
		return "rndpar"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Model holds the parameters of one MTBU simulation (CR §5.4).
type Model struct {
	Servers  int      // N, constant: a failed server is replaced by an empty one
	Replicas int      // t, the chain length of every volume
	Strategy Strategy // placement and recovery parallelism

	VolumesPerServer int           // replicas a server holds at time 0; N·VolumesPerServer/t volumes
	MTBF             time.Duration // mean of each server's exponential time to failure
	ServerCopy       time.Duration // time to copy one whole server's data (VolumesPerServer volumes)
	TransferMin      time.Duration // the shortest one volume's transfer can take
	RecoveryShareMax float64       // at most this fraction of the servers' count of transfers run at once
	RepairDelay      time.Duration // time from a failure until the empty replacement server is up

	// Horizon ends a replication that has seen no unavailability; its sample
	// is then censored (a lower bound). Zero means no horizon.
	Horizon time.Duration
}

// PaperModel returns the parameters of CR §5.4 for n servers, chain length
// t and strategy s: 100 volumes per server, MTBF 24 h, 4 h to copy a server,
// transfers of at least 10 s, at most 40% of the servers recovering at once.
func PaperModel(s Strategy, n, t int) Model {
	return Model{
		Servers:          n,
		Replicas:         t,
		Strategy:         s,
		VolumesPerServer: 100,
		MTBF:             24 * time.Hour,
		ServerCopy:       4 * time.Hour,
		TransferMin:      10 * time.Second,
		RecoveryShareMax: 0.4,
	}
}

func (m Model) validate() error {
	switch {
	case m.Servers < 1, m.Replicas < 1, m.VolumesPerServer < 1:
		return fmt.Errorf("servers, replicas and volumes per server must be positive: %+v", m)
	case m.Replicas > m.Servers:
		return fmt.Errorf("chain length %d exceeds %d servers", m.Replicas, m.Servers)
	case m.MTBF <= 0, m.ServerCopy <= 0, m.TransferMin < 0, m.RepairDelay < 0, m.Horizon < 0:
		return fmt.Errorf("durations must be positive: %+v", m)
	case !(m.RecoveryShareMax > 0 && m.RecoveryShareMax <= 1):
		return fmt.Errorf("recovery share %v not in (0, 1]", m.RecoveryShareMax)
	case m.Strategy != Ring && m.Strategy != RndSeq && m.Strategy != RndPar:
		return fmt.Errorf("unknown strategy %v", m.Strategy)
	}
	return nil
}

// Volumes is the number of volumes: N·VolumesPerServer/t, rounded down.
func (m Model) Volumes() int { return m.Servers * m.VolumesPerServer / m.Replicas }

// TransferTime is how long one volume's recovery takes: its share of a
// server's copy time, at least TransferMin.
func (m Model) TransferTime() time.Duration {
	return max(m.TransferMin, m.ServerCopy/time.Duration(m.VolumesPerServer))
}

// TransfersMax is the limit on recoveries running at once over the whole
// network: RecoveryShareMax of the servers, at least one.
func (m Model) TransfersMax() int {
	return max(1, int(math.Floor(m.RecoveryShareMax*float64(m.Servers)+1e-9)))
}

// GroupTransfersMax is the limit on one failure's recoveries running at
// once: t for Ring and RndSeq, none (0) for RndPar.
func (m Model) GroupTransfersMax() int {
	if m.Strategy == RndPar {
		return 0
	}
	return m.Replicas
}

// Outcome is one replication's result.
type Outcome struct {
	Time           time.Duration // time of the first unavailability, or the horizon
	Censored       bool          // no unavailability before the horizon
	Volume         int           // the volume that became unavailable (-1 if censored)
	Failures       int           // server failures simulated
	Transfers      int           // volume recoveries completed
	ActiveMax      int           // most recoveries running at once
	Events         int           // events processed
	GroupActiveMax int           // most recoveries of one failure running at once
}

// Hours is o.Time in hours.
func (o Outcome) Hours() float64 { return o.Time.Hours() }

// Simulate runs one replication of m from a fresh, fully replicated state
// until some volume has lost all its replicas (or the horizon), drawing every
// random choice from rng.
func Simulate(m Model, rng *rand.Rand) (Outcome, error) {
	s, err := newSimulator(m, rng)
	if err != nil {
		return Outcome{}, err
	}
	for i := range s.servers {
		s.scheduleFailure(int32(i))
	}
	return s.run(), nil
}

// The simulator counts time in milliseconds.
type millis = int64

func toMillis(d time.Duration) millis { return millis(d / time.Millisecond) }

// replicasMax bounds t; a volume keeps its replicas inline.
const replicasMax = 8

const none = -1

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
	id   int32  // server or transfer
	gen  uint32 // the server's incarnation or the transfer's generation
}

func (e event) before(o event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// eventFIFO holds events scheduled in time order.
type eventFIFO struct {
	events []event
	head   int
}

func (f *eventFIFO) push(e event) {
	if f.head > 1024 && f.head*2 > len(f.events) {
		n := copy(f.events, f.events[f.head:])
		f.events, f.head = f.events[:n], 0
	}
	f.events = append(f.events, e)
}

func (f *eventFIFO) peek() (event, bool) {
	if f.head == len(f.events) {
		return event{}, false
	}
	return f.events[f.head], true
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
	up          bool
	incarnation uint32
	sending     int32   // transfer this server is the source of, or none
	receiving   int32   // transfer this server is the target of, or none
	volumes     []int32 // volumes of which this server holds a complete replica
	waitSend    []int32 // tasks waiting for this server to stop sending, by order
	waitRecv    []int32 // tasks waiting for this server to stop receiving (a ring target), by order
	waitJoin    []int32 // tasks waiting for this server's incoming replica (a future source)
}

type volume struct {
	start     int32 // ring: the volume's point (the first server of its chain at time 0)
	nHolders  uint8
	nIncoming uint8
	nReserved uint8
	queued    int32              // recovery tasks not yet started
	holders   [replicasMax]int32 // servers with a complete replica
	incoming  [replicasMax]int32 // servers a replica is being copied to
	reserved  [replicasMax]int32 // ring: servers chosen for queued tasks
}

// isMember reports whether srv holds, receives or is to receive a replica.
func (v *volume) isMember(srv int32) bool {
	return slices.Contains(v.holders[:v.nHolders], srv) || slices.Contains(v.incoming[:v.nIncoming], srv) ||
		slices.Contains(v.reserved[:v.nReserved], srv)
}

func (v *volume) reserve(srv int32) {
	v.reserved[v.nReserved] = srv
	v.nReserved++
}

func (v *volume) unreserve(srv int32) {
	i := slices.Index(v.reserved[:v.nReserved], srv)
	v.nReserved--
	v.reserved[i] = v.reserved[v.nReserved]
}

type taskState uint8

const (
	taskFree taskState = iota
	taskReady
	taskParked
	taskRunning
)

// A task is one lost replica of one volume to re-create. group is the
// failure that lost it; order is its place in the FIFO recovery queue.
//
// On the ring, a task's target is chosen when the task is created, from
// the servers up at the time of the failure: the failed server's own
// replacement is not up yet, so its volumes go to t distinct successors. If
// the target fails before the copy starts, another is chosen.
type task struct {
	order     uint64
	volume    int32
	group     int32
	state     taskState
	target    int32  // ring: the chosen target, or none
	targetInc uint32 // ring: the target's incarnation when chosen
}

// A taskRef names a task in one life: it is stale once the task started
// (its id may since have been reused).
type taskRef struct {
	id    int32
	order uint64
}

type group struct {
	active  int32   // transfers running
	waiting []int32 // tasks waiting for one of them to end
	listed  bool    // in simulator.waitingGroups
}

// A resource is something a transfer holds: a server's sending or
// receiving, or a slot of a failure's limit.
type resource struct {
	kind resourceKind
	id   int32
}

type resourceKind uint8

const (
	resourceSend resourceKind = iota
	resourceRecv
	resourceGroup
)

type transfer struct {
	task           int32
	source, target int32
	gen            uint32
	live           bool
	done           event // when it ends
}

// simulator runs one replication. Recovery tasks wait in a queue ordered by
// age (ready); a task that cannot start parks on the one resource whose
// release could let it start (its failure's transfer limit, the source or
// target it needs) and is woken when that resource is released, or when any
// server fails or is repaired. This gives the same schedule as rescanning
// every waiting task after every event, without the rescans.
type simulator struct {
	m   Model
	rng *rand.Rand

	now millis
	seq uint64
	// Failures wait in a heap. Transfers and repairs all take the same
	// time, so their ends come in the order they were scheduled: each kind
	// waits in a FIFO.
	failures eventQueue
	fifos    [2]eventFIFO // transfer ends, repairs

	servers       []server
	volumes       []volume
	tasks         []task
	freeTasks     []int32
	transfers     []transfer
	freeTransfers []int32
	groups        []group
	waitingGroups []int32 // groups with waiting tasks
	waitAnyTarget []int32 // tasks waiting for any server to stop receiving
	ready         []int32 // tasks by order
	woken         []int32 // tasks to merge into ready
	scratch       []int32
	waiting       []taskRef  // every ready or parked task by order, and some stale refs
	released      []resource // resources released by this event
	releasedNext  []resource
	order         uint64

	transferTime millis
	mtbf         float64 // milliseconds
	horizon      millis
	activeLimit  int
	groupLimit   int32

	active         int // running transfers
	activeMax      int
	groupActiveMax int
	failed         int
	completed      int
	processed      int

	// noFailures stops the simulator from scheduling random failures; tests
	// fail servers by hand.
	noFailures bool
	// afterEvent, if set, runs after every event (tests check invariants).
	afterEvent func()
	// onStart, if set, runs when a transfer starts.
	onStart func(tr *transfer)
}

func newSimulator(m Model, rng *rand.Rand) (*simulator, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	if m.Replicas > replicasMax {
		return nil, fmt.Errorf("chain length %d above the simulator's limit %d", m.Replicas, replicasMax)
	}
	s := &simulator{
		m:            m,
		rng:          rng,
		transferTime: max(1, toMillis(m.TransferTime())),
		mtbf:         float64(toMillis(m.MTBF)),
		horizon:      toMillis(m.Horizon),
		activeLimit:  m.TransfersMax(),
		groupLimit:   int32(m.GroupTransfersMax()),
		servers:      make([]server, m.Servers),
		volumes:      make([]volume, m.Volumes()),
	}
	for i := range s.servers {
		s.servers[i] = server{up: true, sending: none, receiving: none, volumes: make([]int32, 0, 2*m.VolumesPerServer)}
	}
	if m.Strategy == Ring {
		s.placeRing()
	} else {
		s.placeRandom()
	}
	return s, nil
}

func (s *simulator) addHolder(v, srv int32) {
	vol := &s.volumes[v]
	vol.holders[vol.nHolders] = srv
	vol.nHolders++
	s.servers[srv].volumes = append(s.servers[srv].volumes, v)
}

// placeRing puts volume v on the t consecutive servers starting at v mod N,
// so each server starts about VolumesPerServer/t chains and holds about
// VolumesPerServer replicas.
func (s *simulator) placeRing() {
	n, t := int32(s.m.Servers), int32(s.m.Replicas)
	for v := range int32(len(s.volumes)) {
		vol := &s.volumes[v]
		vol.start = v % n
		for k := range t {
			s.addHolder(v, (vol.start+k)%n)
		}
	}
}

// placeRandom puts each volume's t replicas on t distinct random servers
// with every server holding VolumesPerServer replicas (a few hold fewer
// when t does not divide N·VolumesPerServer): a random matching of replica
// slots to volumes, with duplicates within a volume swapped away.
func (s *simulator) placeRandom() {
	n, t := s.m.Servers, s.m.Replicas
	slots := make([]int32, 0, n*s.m.VolumesPerServer)
	for srv := range int32(n) {
		for range s.m.VolumesPerServer {
			slots = append(slots, srv)
		}
	}
	s.rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
	for pass := 0; ; pass++ {
		if pass > 1000 {
			panic("placeRandom: cannot place replicas on distinct servers")
		}
		clean := true
		for v := range s.volumes {
			chain := slots[v*t : v*t+t]
			for i := 1; i < t; i++ {
				if slices.Contains(chain[:i], chain[i]) {
					clean = false
					j := s.rng.IntN(len(slots))
					slots[v*t+i], slots[j] = slots[j], slots[v*t+i]
				}
			}
		}
		if clean {
			break
		}
	}
	for v := range int32(len(s.volumes)) {
		for _, srv := range slots[int(v)*t : int(v)*t+t] {
			s.addHolder(v, srv)
		}
	}
}

func (s *simulator) schedule(at millis, kind eventKind, id int32, gen uint32) event {
	s.seq++
	e := event{at: at, seq: s.seq, kind: kind, id: id, gen: gen}
	switch kind {
	case eventFailure:
		s.failures.push(e)
	case eventTransferDone:
		s.fifos[0].push(e)
	case eventRepair:
		s.fifos[1].push(e)
	}
	return e
}

// next removes and returns the earliest event, if any.
func (s *simulator) next() (event, bool) {
	var e event
	from := -2 // none
	if len(s.failures) > 0 {
		e, from = s.failures[0], -1
	}
	for i := range s.fifos {
		if f, ok := s.fifos[i].peek(); ok && (from == -2 || f.before(e)) {
			e, from = f, i
		}
	}
	switch from {
	case -2:
		return event{}, false
	case -1:
		s.failures.pop()
	default:
		s.fifos[from].head++
	}
	return e, true
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
	for {
		e, ok := s.next()
		if !ok {
			break
		}
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
		Time:           time.Duration(s.now) * time.Millisecond,
		Censored:       censored,
		Volume:         vol,
		Failures:       s.failed,
		Transfers:      s.completed,
		ActiveMax:      s.activeMax,
		Events:         s.processed,
		GroupActiveMax: s.groupActiveMax,
	}
}

// step applies one event; it returns a volume that became unavailable, or
// -1.
func (s *simulator) step(e event) int32 {
	switch e.kind {
	case eventFailure:
		srv := &s.servers[e.id]
		if e.gen != srv.incarnation || !srv.up {
			return -1
		}
		if lost := s.fail(e.id); lost >= 0 {
			return lost
		}
	case eventRepair:
		srv := &s.servers[e.id]
		if e.gen != srv.incarnation || srv.up {
			return -1
		}
		srv.up = true
		s.scheduleFailure(e.id)
		s.wakeAll()
	case eventTransferDone:
		tr := &s.transfers[e.id]
		if !tr.live || tr.gen != e.gen {
			return -1
		}
		s.complete(e.id)
	}
	s.startTransfers()
	return -1
}

// fail crashes server f: its transfers stop and their tasks go back to the
// queue, every volume it held loses a replica and queues a recovery task,
// and an empty replacement takes its place (after RepairDelay). It returns
// a volume left without replicas, or -1.
func (s *simulator) fail(f int32) int32 {
	s.failed++
	srv := &s.servers[f]
	if srv.sending != none {
		s.cancel(srv.sending)
	}
	if srv.receiving != none {
		s.cancel(srv.receiving)
	}
	// The server is gone before its volumes' recoveries pick targets.
	srv.incarnation++
	if s.m.RepairDelay == 0 {
		s.scheduleFailure(f)
	} else {
		srv.up = false
		s.schedule(s.now+toMillis(s.m.RepairDelay), eventRepair, f, srv.incarnation)
	}
	g := int32(len(s.groups))
	s.groups = append(s.groups, group{})
	lost := int32(-1)
	for _, v := range srv.volumes {
		vol := &s.volumes[v]
		i := slices.Index(vol.holders[:vol.nHolders], f)
		if i < 0 {
			panic(fmt.Sprintf("INVARIANT: server %d lists volume %d, which does not list it", f, v))
		}
		vol.nHolders--
		vol.holders[i] = vol.holders[vol.nHolders]
		if vol.nHolders == 0 && lost < 0 {
			lost = v
		}
		s.newTask(v, g)
	}
	srv.volumes = srv.volumes[:0]
	s.wakeAll()
	return lost
}

func (s *simulator) newTask(v, g int32) {
	var id int32
	if n := len(s.freeTasks); n > 0 {
		id = s.freeTasks[n-1]
		s.freeTasks = s.freeTasks[:n-1]
	} else {
		id = int32(len(s.tasks))
		s.tasks = append(s.tasks, task{})
	}
	s.order++
	s.tasks[id] = task{order: s.order, volume: v, group: g, state: taskReady, target: none}
	s.volumes[v].queued++
	if s.m.Strategy == Ring {
		s.chooseRingTarget(&s.tasks[id])
	}
	s.woken = append(s.woken, id)
	s.waiting = append(s.waiting, taskRef{id, s.order})
}

// cancel stops a running transfer (its source or target failed) and puts
// its task back in the queue in its original place.
func (s *simulator) cancel(id int32) {
	tr := &s.transfers[id]
	s.release(id)
	tk := &s.tasks[tr.task]
	tk.state = taskReady
	s.volumes[tk.volume].queued++
	if s.m.Strategy == Ring {
		// Keep the target; tryStart replaces it if it is the one that failed.
		s.volumes[tk.volume].reserve(tr.target)
		tk.target = tr.target
	}
	s.woken = append(s.woken, tr.task)
	// Its ref from before it started may still be in s.waiting.
	if i, found := slices.BinarySearchFunc(s.waiting, tk.order, func(r taskRef, o uint64) int { return cmp.Compare(r.order, o) }); !found {
		s.waiting = slices.Insert(s.waiting, i, taskRef{tr.task, tk.order})
	}
}

// release frees a transfer's source, target and limits, and wakes the
// tasks that waited for them.
func (s *simulator) release(id int32) {
	tr := &s.transfers[id]
	tr.live = false
	src, dst := &s.servers[tr.source], &s.servers[tr.target]
	src.sending = none
	dst.receiving = none
	s.wake(&dst.waitJoin)
	s.wake(&s.waitAnyTarget)
	s.released = append(s.released, resource{resourceSend, tr.source}, resource{resourceRecv, tr.target}, resource{resourceGroup, s.tasks[tr.task].group})
	tk := &s.tasks[tr.task]
	vol := &s.volumes[tk.volume]
	i := slices.Index(vol.incoming[:vol.nIncoming], tr.target)
	vol.nIncoming--
	vol.incoming[i] = vol.incoming[vol.nIncoming]
	s.active--
	g := &s.groups[tk.group]
	g.active--
	s.freeTransfers = append(s.freeTransfers, id)
}

func (s *simulator) complete(id int32) {
	tr := &s.transfers[id]
	s.release(id)
	s.completed++
	tk := &s.tasks[tr.task]
	s.addHolder(tk.volume, tr.target)
	tk.state = taskFree
	s.freeTasks = append(s.freeTasks, tr.task)
}

// park puts task id on a wait list, keeping the list by order.
func (s *simulator) park(list *[]int32, id int32) {
	s.tasks[id].state = taskParked
	order := s.tasks[id].order
	i := len(*list)
	for i > 0 && s.tasks[(*list)[i-1]].order > order {
		i--
	}
	*list = slices.Insert(*list, i, id)
}

// waitList is the list of tasks waiting for r.
func (s *simulator) waitList(r resource) *[]int32 {
	switch r.kind {
	case resourceSend:
		return &s.servers[r.id].waitSend
	case resourceRecv:
		return &s.servers[r.id].waitRecv
	}
	return &s.groups[r.id].waiting
}

// available reports whether a transfer could take r now.
func (s *simulator) available(r resource) bool {
	switch r.kind {
	case resourceSend:
		return s.servers[r.id].up && s.servers[r.id].sending == none
	case resourceRecv:
		return s.servers[r.id].up && s.servers[r.id].receiving == none
	}
	return s.groupLimit == 0 || s.groups[r.id].active < s.groupLimit
}

// wakeReleased wakes the oldest task waiting for each released resource
// that is still available, and keeps those resources to try again: the
// woken task may wait for something else instead.
func (s *simulator) wakeReleased() {
	released := s.released
	s.released = s.releasedNext[:0]
	for _, r := range released {
		list := s.waitList(r)
		if len(*list) == 0 || !s.available(r) {
			continue
		}
		id := (*list)[0]
		*list = slices.Delete(*list, 0, 1)
		s.tasks[id].state = taskReady
		s.woken = append(s.woken, id)
		s.released = append(s.released, r)
	}
	s.releasedNext = released[:0]
}

func (s *simulator) wake(list *[]int32) {
	for _, id := range *list {
		if s.tasks[id].state != taskParked {
			panic(fmt.Sprintf("INVARIANT: task %d woken in state %d", id, s.tasks[id].state))
		}
		s.tasks[id].state = taskReady
	}
	s.woken = append(s.woken, *list...)
	*list = (*list)[:0]
}

// wakeAll makes every waiting task ready: the ready queue becomes the list
// of all waiting tasks, which is kept by order, less its stale refs.
func (s *simulator) wakeAll() {
	for i := range s.servers {
		srv := &s.servers[i]
		srv.waitSend, srv.waitRecv, srv.waitJoin = srv.waitSend[:0], srv.waitRecv[:0], srv.waitJoin[:0]
	}
	s.waitAnyTarget = s.waitAnyTarget[:0]
	for _, g := range s.waitingGroups {
		s.groups[g].waiting = s.groups[g].waiting[:0]
		s.groups[g].listed = false
	}
	s.waitingGroups = s.waitingGroups[:0]
	live := s.waiting[:0]
	ready := s.ready[:0]
	for _, r := range s.waiting {
		tk := &s.tasks[r.id]
		if tk.order != r.order || (tk.state != taskReady && tk.state != taskParked) {
			continue
		}
		tk.state = taskReady
		live = append(live, r)
		ready = append(ready, r.id)
	}
	s.waiting = live
	s.ready = ready
	s.woken = s.woken[:0]
}

// mergeWoken merges the woken tasks into the ready queue by order.
func (s *simulator) mergeWoken() {
	if len(s.woken) == 0 {
		return
	}
	byOrder := func(a, b int32) int { return cmp.Compare(s.tasks[a].order, s.tasks[b].order) }
	slices.SortFunc(s.woken, byOrder)
	merged := s.scratch[:0]
	i, j := 0, 0
	for i < len(s.ready) && j < len(s.woken) {
		if byOrder(s.ready[i], s.woken[j]) < 0 {
			merged = append(merged, s.ready[i])
			i++
		} else {
			merged = append(merged, s.woken[j])
			j++
		}
	}
	merged = append(merged, s.ready[i:]...)
	merged = append(merged, s.woken[j:]...)
	s.scratch = s.ready
	s.ready = merged
	s.woken = s.woken[:0]
}

// startTransfers starts ready tasks, oldest first, while the network-wide
// limit allows; a task that cannot start parks. Then it wakes tasks that
// waited for released resources, until none is left to try.
func (s *simulator) startTransfers() {
	for first := true; ; first = false {
		if !first {
			s.wakeReleased()
			if len(s.woken) == 0 {
				s.released = s.released[:0]
				return
			}
		}
		s.mergeWoken()
		s.scanReady()
	}
}

func (s *simulator) scanReady() {
	kept := s.ready[:0]
	for i, id := range s.ready {
		if s.active >= s.activeLimit {
			kept = append(kept, s.ready[i:]...)
			break
		}
		tk := &s.tasks[id]
		if g := &s.groups[tk.group]; s.groupLimit > 0 && g.active >= s.groupLimit {
			s.park(&g.waiting, id)
			if !g.listed {
				g.listed = true
				s.waitingGroups = append(s.waitingGroups, tk.group)
			}
			continue
		}
		s.tryStart(id)
	}
	s.ready = kept
}

// tryStart starts task id's transfer if a source and a target are free, and
// otherwise parks it on what it waits for.
func (s *simulator) tryStart(id int32) {
	tk := &s.tasks[id]
	vol := &s.volumes[tk.volume]
	// A source: a holder that is not sending. If none, wait for whichever
	// comes first: a holder ends its transfer, or a replica being copied
	// completes.
	freeSources := 0
	for _, h := range vol.holders[:vol.nHolders] {
		if s.servers[h].sending == none {
			freeSources++
		}
	}
	if freeSources == 0 {
		var first *transfer
		var list *[]int32
		for _, h := range vol.holders[:vol.nHolders] {
			if tr := &s.transfers[s.servers[h].sending]; first == nil || tr.done.before(first.done) {
				first, list = tr, &s.servers[h].waitSend
			}
		}
		for _, d := range vol.incoming[:vol.nIncoming] {
			if tr := &s.transfers[s.servers[d].receiving]; tr.done.before(first.done) {
				first, list = tr, &s.servers[d].waitJoin
			}
		}
		if list == nil {
			panic(fmt.Sprintf("INVARIANT: task %d for volume %d, which has no replica", id, tk.volume))
		}
		s.park(list, id)
		return
	}
	var target int32
	if s.m.Strategy == Ring {
		if tk.target != none && (!s.servers[tk.target].up || s.servers[tk.target].incarnation != tk.targetInc) {
			vol.unreserve(tk.target)
			tk.target = none
		}
		if tk.target == none && !s.chooseRingTarget(tk) {
			s.park(&s.waitAnyTarget, id)
			return
		}
		target = tk.target
		if s.servers[target].receiving != none {
			s.park(&s.servers[target].waitRecv, id)
			return
		}
		vol.unreserve(target)
		tk.target = none
	} else {
		target = s.randomTarget(vol)
		if target == none {
			s.park(&s.waitAnyTarget, id)
			return
		}
	}
	source := s.pickSource(vol, freeSources)

	var tid int32
	if n := len(s.freeTransfers); n > 0 {
		tid = s.freeTransfers[n-1]
		s.freeTransfers = s.freeTransfers[:n-1]
	} else {
		tid = int32(len(s.transfers))
		s.transfers = append(s.transfers, transfer{})
	}
	tr := &s.transfers[tid]
	gen := tr.gen + 1
	*tr = transfer{task: id, source: source, target: target, gen: gen, live: true}
	tr.done = s.schedule(s.now+s.transferTime, eventTransferDone, tid, gen)
	tk.state = taskRunning
	s.servers[source].sending = tid
	s.servers[target].receiving = tid
	vol.incoming[vol.nIncoming] = target
	vol.nIncoming++
	vol.queued--
	s.active++
	s.activeMax = max(s.activeMax, s.active)
	g := &s.groups[tk.group]
	g.active++
	s.groupActiveMax = max(s.groupActiveMax, int(g.active))
	if s.onStart != nil {
		s.onStart(tr)
	}
}

// pickSource returns a random one of vol's freeCount holders that are not
// sending.
func (s *simulator) pickSource(vol *volume, freeCount int) int32 {
	k := 0
	if freeCount > 1 {
		k = s.rng.IntN(freeCount)
	}
	for _, h := range vol.holders[:vol.nHolders] {
		if s.servers[h].sending == none {
			if k == 0 {
				return h
			}
			k--
		}
	}
	panic("unreachable")
}

// chooseRingTarget sets tk's target to the first server clockwise from its
// volume's point that is up and not in the chain (consistent hashing's next
// successor), and reserves it; it reports false if every server is in the
// chain or down. A server that came back empty inside a chain's span is
// thus refilled by the chain's next recovery.
func (s *simulator) chooseRingTarget(tk *task) bool {
	vol := &s.volumes[tk.volume]
	n := int32(s.m.Servers)
	for k := range n {
		srv := (vol.start + k) % n
		if s.servers[srv].up && !vol.isMember(srv) {
			vol.reserve(srv)
			tk.target, tk.targetInc = srv, s.servers[srv].incarnation
			return true
		}
	}
	return false
}

// randomTarget is a uniformly random server that is up, not in the chain
// and not receiving, or none.
func (s *simulator) randomTarget(vol *volume) int32 {
	n := s.m.Servers
	ok := func(srv int32) bool {
		sv := &s.servers[srv]
		return sv.up && sv.receiving == none && !vol.isMember(srv)
	}
	for range 8 {
		if srv := int32(s.rng.IntN(n)); ok(srv) {
			return srv
		}
	}
	// Mostly busy: pick uniformly among the eligible ones.
	count := 0
	for srv := range int32(n) {
		if ok(srv) {
			count++
		}
	}
	if count == 0 {
		return none
	}
	k := s.rng.IntN(count)
	for srv := range int32(n) {
		if ok(srv) {
			if k == 0 {
				return srv
			}
			k--
		}
	}
	panic("unreachable")
}

// checkInvariants panics if the simulator's state is inconsistent. Tests
// call it after every event.
func (s *simulator) checkInvariants() {
	t := s.m.Replicas
	queued := make([]int32, len(s.volumes))
	reserved := make([][]int32, len(s.volumes))
	for id := range s.tasks {
		if st := s.tasks[id].state; st == taskReady || st == taskParked {
			queued[s.tasks[id].volume]++
			if tg := s.tasks[id].target; tg != none {
				reserved[s.tasks[id].volume] = append(reserved[s.tasks[id].volume], tg)
			}
		}
	}
	for v := range s.volumes {
		vol := &s.volumes[v]
		if got := int(vol.nHolders) + int(vol.nIncoming) + int(vol.queued); got != t {
			panic(fmt.Sprintf("INVARIANT: volume %d: %d holders + %d incoming + %d queued != t=%d", v, vol.nHolders, vol.nIncoming, vol.queued, t))
		}
		if queued[v] != vol.queued {
			panic(fmt.Sprintf("INVARIANT: volume %d counts %d queued tasks, the queue has %d", v, vol.queued, queued[v]))
		}
		got := slices.Sorted(slices.Values(vol.reserved[:vol.nReserved]))
		if want := slices.Sorted(slices.Values(reserved[v])); !slices.Equal(got, want) {
			panic(fmt.Sprintf("INVARIANT: volume %d reserves %v, its queued tasks target %v", v, got, want))
		}
		members := append(slices.Clone(vol.holders[:vol.nHolders]), vol.incoming[:vol.nIncoming]...)
		members = append(members, vol.reserved[:vol.nReserved]...)
		slices.Sort(members)
		if len(slices.Compact(members)) != int(vol.nHolders)+int(vol.nIncoming)+int(vol.nReserved) {
			panic(fmt.Sprintf("INVARIANT: volume %d has two replicas on one server: %v + %v + %v", v, vol.holders[:vol.nHolders], vol.incoming[:vol.nIncoming], vol.reserved[:vol.nReserved]))
		}
		for _, h := range vol.holders[:vol.nHolders] {
			if !slices.Contains(s.servers[h].volumes, int32(v)) {
				panic(fmt.Sprintf("INVARIANT: volume %d lists holder %d, which does not list it", v, h))
			}
		}
	}
	for srv := range s.servers {
		for _, v := range s.servers[srv].volumes {
			if !slices.Contains(s.volumes[v].holders[:s.volumes[v].nHolders], int32(srv)) {
				panic(fmt.Sprintf("INVARIANT: server %d lists volume %d, which does not list it", srv, v))
			}
		}
	}
	active, perGroup := 0, make(map[int32]int32)
	for id := range s.transfers {
		tr := &s.transfers[id]
		if !tr.live {
			continue
		}
		active++
		perGroup[s.tasks[tr.task].group]++
		if s.servers[tr.source].sending != int32(id) || s.servers[tr.target].receiving != int32(id) {
			panic(fmt.Sprintf("INVARIANT: transfer %d is not its source's and target's only transfer", id))
		}
	}
	if active != s.active || active > s.activeLimit {
		panic(fmt.Sprintf("INVARIANT: %d transfers running, counted %d, limit %d", active, s.active, s.activeLimit))
	}
	for g := range s.groups {
		c := perGroup[int32(g)]
		if s.groups[g].active != c || (s.groupLimit > 0 && c > s.groupLimit) {
			panic(fmt.Sprintf("INVARIANT: failure %d has %d transfers running, counted %d, limit %d", g, c, s.groups[g].active, s.groupLimit))
		}
	}
	if !slices.IsSortedFunc(s.ready, func(a, b int32) int { return cmp.Compare(s.tasks[a].order, s.tasks[b].order) }) {
		panic("INVARIANT: recovery queue out of order")
	}
}
