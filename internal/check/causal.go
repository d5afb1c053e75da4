package check

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// Causal convergence (CCv, the formal form of causal+) after Bouajjani,
// Enea, Guerraoui and Hamza, "On Verifying Causal Consistency" (POPL'17).
// A history holds CCv when some causal order co ⊇ PO and some total
// arbitration arb ⊇ co make every read return the arb-last write on its
// key among the writes in its causal past (⊥ if there is none). When every
// put writes a value of its own, that holds exactly when none of the bad
// patterns below occurs (RF = reads-from, matched by value; CO = (PO ∪ RF)⁺):
//
//   - CyclicCO: PO ∪ RF has a cycle.
//   - WriteCOInitRead: a read returns ⊥ although a write to its key is
//     causally before it.
//   - ThinAirRead: a read returns a value no put wrote to its key.
//   - WriteCORead: w RF r and w <CO w' <CO r for another write w' to the key.
//   - CyclicCF: CF ∪ CO has a cycle, where w1 CF w2 iff both write key x,
//     w1 ≠ w2, and some read r with w2 RF r has w1 <CO r (every arbitration
//     must then put w1 before w2).
//
// The checker follows NOTES-chainreaction-nfsv4.md A4.2: a topological sort
// of PO ∪ RF, a vector clock per operation (sessions × operations of
// memory), and for each read, per session, only the session's last write to
// the key within the read's causal past, found by binary search. That last
// write stands for the session's earlier ones: they are PO-before it, so
// they reach everything it reaches. Time O(n·S·log n) for n operations in S
// sessions, plus the cycle search over at most one CF edge per read and
// session.

// Bad-pattern names, in the order CausalConvergence looks for them.
const (
	patternMalformed       = "Malformed"
	patternThinAirRead     = "ThinAirRead"
	patternCyclicCO        = "CyclicCO"
	patternWriteCOInitRead = "WriteCOInitRead"
	patternWriteCORead     = "WriteCORead"
	patternCyclicCF        = "CyclicCF"
)

// pathStepsMax bounds how many operations a path or cycle lists in a
// violation's Detail; longer ones are elided in the middle.
const pathStepsMax = 16

// CausalViolation is a bad pattern found in a history.
type CausalViolation struct {
	Pattern string // "CyclicCO", "WriteCOInitRead", "ThinAirRead", "WriteCORead", "CyclicCF", or "Malformed"
	Detail  string // the operations involved, human readable (client, op, value, times)
}

// Error names the pattern and the operations involved.
func (v *CausalViolation) Error() string {
	return fmt.Sprintf("not causal+ (%s): %s", v.Pattern, v.Detail)
}

// CausalConvergence checks a history for causal convergence (CCv = causal+);
// nil if none of the bad patterns occurs.
//
// The history holds puts and gets only, and each put writes a value no other
// put writes to the same key. A get with Result.Found false read the initial
// value ⊥. The operations of one client form a session (program order PO),
// ordered by Call; they must not overlap in time. A put whose outcome is
// unknown counts only if some get read its value, and then it must be its
// client's last operation (its Return is taken as +∞); one nobody read is
// dropped, and so is every get whose outcome is unknown. Anything else is
// reported as pattern "Malformed". Otherwise the first bad pattern found is
// reported, in the order ThinAirRead, CyclicCO, WriteCOInitRead,
// WriteCORead, CyclicCF; the same history always gives the same report.
func CausalConvergence(history []Operation) *CausalViolation {
	h, v := newCausalHistory(history)
	if v != nil {
		return v
	}
	g := causalGraph{h: h}
	order, done := g.topologicalOrder()
	if len(order) < h.n {
		return &CausalViolation{Pattern: patternCyclicCO,
			Detail: "operations in a cycle of program order and reads-from:" + h.describeCycle(g.cycle(done))}
	}
	h.computeClocks(order)
	if v := h.initReads(); v != nil {
		return v
	}
	cf, v := h.overwrittenReads()
	if v != nil {
		return v
	}
	g = causalGraph{h: h, cf: cf}
	if order, done = g.topologicalOrder(); len(order) < h.n {
		return &CausalViolation{Pattern: patternCyclicCF,
			Detail: "no arbitration order fits these operations (cf: a read saw the later write with the earlier one in its causal past):" +
				h.describeCycle(g.cycle(done))}
	}
	return nil
}

// causalHistory is a history reduced to the operations that count, numbered
// session by session: the operations of session s are ids start[s] ..
// start[s+1]-1 in program order.
type causalHistory struct {
	history  []Operation
	n        int
	sessions int
	start    []int32 // per session, its first id; start[sessions] = n
	op       []int32 // per id, the index in history
	session  []int32 // per id
	pos      []int32 // per id, its place in its session, counting from 1
	key      []int32 // per id, an interned key
	write    []bool  // per id: a put
	rfSource []int32 // per id of a get, the id of the put it read, or -1 for ⊥
	rfOut    csr     // per put, the gets that read it
	clock    []int32 // per id, sessions entries: clock[id*sessions+s] = last position of session s in id's causal past (positions count from 1)
	writers  [][]writerRun
}

// writerRun is one session's writes to one key: their positions in the
// session, ascending.
type writerRun struct {
	session   int32
	positions []int32
}

// csr is an adjacency list in compressed sparse row form: the neighbours
// of v are to[first[v]:first[v+1]], with via[i] the read behind edge i (CF
// edges only).
type csr struct {
	first []int32
	to    []int32
	via   []int32
}

func (c *csr) neighbours(v int32) []int32 {
	if c.first == nil {
		return nil
	}
	return c.to[c.first[v]:c.first[v+1]]
}

// newCSR builds the adjacency of n nodes from edges (from[i] → to[i]),
// keeping each node's edges in the order given.
func newCSR(n int, from, to, via []int32) csr {
	c := csr{first: make([]int32, n+1), to: make([]int32, len(from))}
	if via != nil {
		c.via = make([]int32, len(from))
	}
	for _, f := range from {
		c.first[f+1]++
	}
	for v := range n {
		c.first[v+1] += c.first[v]
	}
	next := slices.Clone(c.first[:n])
	for i, f := range from {
		c.to[next[f]] = to[i]
		if via != nil {
			c.via[next[f]] = via[i]
		}
		next[f]++
	}
	return c
}

type keyValue struct{ key, value string }

// newCausalHistory validates a history and numbers the operations that
// count; it reports Malformed and ThinAirRead.
func newCausalHistory(history []Operation) (*causalHistory, *CausalViolation) {
	malformed := func(format string, args ...any) *CausalViolation {
		return &CausalViolation{Pattern: patternMalformed, Detail: fmt.Sprintf(format, args...)}
	}
	writer := map[keyValue]int{} // (key, value) → index in history of its put
	for i, op := range history {
		switch {
		case op.Op.Kind != wire.OpPut && op.Op.Kind != wire.OpGet:
			return nil, malformed("%s: only puts and gets can be checked for causal+", describeOperation(op))
		case !op.Unknown && op.Result.Status != wire.StatusOK:
			return nil, malformed("%s: status %s, puts and gets always succeed", describeOperation(op), op.Result.Status)
		case !op.Unknown && op.Return < op.Call:
			return nil, malformed("%s: returns before it is called", describeOperation(op))
		case op.Op.Kind == wire.OpGet && !op.Unknown && !op.Result.Found && len(op.Result.Value) > 0:
			return nil, malformed("%s: reports a value although it found none", describeOperation(op))
		case op.Op.Kind == wire.OpPut:
			kv := keyValue{op.Op.Key, string(op.Op.Value)}
			if j, ok := writer[kv]; ok {
				return nil, malformed("%s and %s: two puts of one value to one key (values must be unique per key)",
					describeOperation(history[j]), describeOperation(op))
			}
			writer[kv] = i
		}
	}

	// The puts someone read, and the first read of a value nobody wrote.
	observed := make([]bool, len(history))
	source := make([]int, len(history)) // per get that found a value, the index of its put
	thinAir := -1
	for i, op := range history {
		if op.Op.Kind != wire.OpGet || op.Unknown || !op.Result.Found {
			continue
		}
		if j, ok := writer[keyValue{op.Op.Key, string(op.Result.Value)}]; ok {
			observed[j] = true
			source[i] = j
		} else if thinAir < 0 {
			thinAir = i
		}
	}

	// Sessions: the operations that count, by client, in call order.
	bySession := map[int][]int32{}
	for i, op := range history {
		if op.Unknown && (op.Op.Kind == wire.OpGet || !observed[i]) {
			continue
		}
		bySession[op.Client] = append(bySession[op.Client], int32(i))
	}
	clients := make([]int, 0, len(bySession))
	for c := range bySession {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	returns := func(op Operation) int64 {
		if op.Unknown {
			return math.MaxInt64
		}
		return op.Return
	}
	h := &causalHistory{history: history, sessions: len(clients), start: make([]int32, 0, len(clients)+1)}
	for s, c := range clients {
		ops := bySession[c]
		slices.SortFunc(ops, func(a, b int32) int {
			oa, ob := history[a], history[b]
			if oa.Call != ob.Call {
				return cmp.Compare(oa.Call, ob.Call)
			}
			if ra, rb := returns(oa), returns(ob); ra != rb {
				return cmp.Compare(ra, rb)
			}
			return int(a - b)
		})
		// latest is the earlier operation returning last: any overlap
		// with an earlier operation is an overlap with it.
		latest := int32(-1)
		for _, i := range ops {
			if latest >= 0 {
				prev, op := history[latest], history[i]
				if op.Call < returns(prev) && prev.Call < returns(op) {
					why := "overlap in time"
					if prev.Unknown {
						why = "the first has an unknown outcome, yet its client went on (a read of it needs it to be the client's last operation)"
					}
					return nil, malformed("%s and %s: operations of one client must be sequential; %s",
						describeOperation(prev), describeOperation(op), why)
				}
			}
			if latest < 0 || returns(history[i]) >= returns(history[latest]) {
				latest = i
			}
		}
		h.start = append(h.start, int32(len(h.op)))
		h.op = append(h.op, ops...)
		for j := range ops {
			h.session = append(h.session, int32(s))
			h.pos = append(h.pos, int32(j+1))
		}
	}
	h.n = len(h.op)
	h.start = append(h.start, int32(h.n))
	if thinAir >= 0 {
		op := history[thinAir]
		return nil, &CausalViolation{Pattern: patternThinAirRead,
			Detail: fmt.Sprintf("%s: no put wrote %q to %s", describeOperation(op), op.Result.Value, op.Op.Key)}
	}

	// Keys, reads-from, and each key's writes per session.
	keys := map[string]int32{}
	id := make([]int32, len(history)) // index in history → id, for the puts
	h.key = make([]int32, h.n)
	h.write = make([]bool, h.n)
	h.rfSource = make([]int32, h.n)
	for v, i := range h.op {
		op := history[i]
		k, ok := keys[op.Op.Key]
		if !ok {
			k = int32(len(keys))
			keys[op.Op.Key] = k
			h.writers = append(h.writers, nil)
		}
		h.key[v] = k
		h.rfSource[v] = -1
		if op.Op.Kind == wire.OpPut {
			h.write[v] = true
			id[i] = int32(v)
			s := h.session[v]
			runs := h.writers[k]
			if len(runs) == 0 || runs[len(runs)-1].session != s {
				runs = append(runs, writerRun{session: s})
			}
			runs[len(runs)-1].positions = append(runs[len(runs)-1].positions, h.position(int32(v)))
			h.writers[k] = runs
		}
	}
	var rfFrom, rfTo []int32
	for v, i := range h.op {
		op := history[i]
		if op.Op.Kind == wire.OpGet && op.Result.Found {
			w := id[source[i]]
			h.rfSource[v] = w
			rfFrom = append(rfFrom, w)
			rfTo = append(rfTo, int32(v))
		}
	}
	h.rfOut = newCSR(h.n, rfFrom, rfTo, nil)
	return h, nil
}

// position is v's place in its session, counting from 1.
func (h *causalHistory) position(v int32) int32 { return h.pos[v] }

// poPredecessor is the operation before v in its session, or -1.
func (h *causalHistory) poPredecessor(v int32) int32 {
	if v > h.start[h.session[v]] {
		return v - 1
	}
	return -1
}

// poSuccessor is the operation after v in its session, or -1.
func (h *causalHistory) poSuccessor(v int32) int32 {
	if v+1 < h.start[h.session[v]+1] {
		return v + 1
	}
	return -1
}

// computeClocks fills the vector clocks, visiting PO ∪ RF in topological
// order: an operation's causal past is its PO predecessor's and, for a
// read, its write's, plus itself.
func (h *causalHistory) computeClocks(order []int32) {
	S := h.sessions
	h.clock = make([]int32, h.n*S)
	for _, v := range order {
		row := h.clock[int(v)*S : int(v+1)*S]
		if p := h.poPredecessor(v); p >= 0 {
			copy(row, h.clock[int(p)*S:int(p+1)*S])
		}
		if w := h.rfSource[v]; w >= 0 {
			for s, c := range h.clock[int(w)*S : int(w+1)*S] {
				row[s] = max(row[s], c)
			}
		}
		row[h.session[v]] = h.position(v)
	}
}

// before reports a <CO b.
func (h *causalHistory) before(a, b int32) bool {
	return a != b && h.clock[int(b)*h.sessions+int(h.session[a])] >= h.position(a)
}

// lastWriteBefore is run's last write causally before (or equal to) v, or -1.
func (h *causalHistory) lastWriteBefore(run writerRun, v int32) int32 {
	bound := h.clock[int(v)*h.sessions+int(run.session)]
	j, _ := slices.BinarySearch(run.positions, bound+1) // first position > bound
	if j == 0 {
		return -1
	}
	return h.start[run.session] + run.positions[j-1] - 1
}

// initReads finds WriteCOInitRead: a read of ⊥ with a write to its key in
// its causal past.
func (h *causalHistory) initReads() *CausalViolation {
	for r := range int32(h.n) {
		if h.write[r] || h.rfSource[r] >= 0 {
			continue
		}
		for _, run := range h.writers[h.key[r]] {
			if w := h.lastWriteBefore(run, r); w >= 0 {
				return &CausalViolation{Pattern: patternWriteCOInitRead,
					Detail: fmt.Sprintf("%s read the initial value, yet this put is causally before it:%s",
						h.describe(r), h.describePath(w, r))}
			}
		}
	}
	return nil
}

// overwrittenReads finds WriteCORead and, failing that, returns the CF
// edges that matter: for each read r of write w and each session, the
// session's last write ws ≠ w to the key causally before r, unless ws <CO w
// already. Earlier writes of the session reach w through ws.
func (h *causalHistory) overwrittenReads() (csr, *CausalViolation) {
	var from, to, via []int32
	for r := range int32(h.n) {
		w := h.rfSource[r]
		if w < 0 {
			continue
		}
		for _, run := range h.writers[h.key[r]] {
			ws := h.lastWriteBefore(run, r)
			if ws < 0 || ws == w || h.before(ws, w) {
				continue
			}
			if h.before(w, ws) {
				return csr{}, &CausalViolation{Pattern: patternWriteCORead,
					Detail: fmt.Sprintf("%s read a value that a later put had overwritten in its causal past; the put it read:%s\nand the overwriting put before the read:%s",
						h.describe(r), h.describePath(w, ws), h.describePath(ws, r))}
			}
			from, to, via = append(from, ws), append(to, w), append(via, r)
		}
	}
	return newCSR(h.n, from, to, via), nil
}

// Edge kinds of the graphs checked for cycles.
const (
	edgePO byte = iota + 1
	edgeRF
	edgeCF
)

// causalGraph is PO ∪ RF, plus the CF edges when cf is set.
type causalGraph struct {
	h  *causalHistory
	cf csr
}

// successors calls f for each edge out of v, in a fixed order.
func (g causalGraph) successors(v int32, f func(u int32, kind byte, via int32)) {
	if u := g.h.poSuccessor(v); u >= 0 {
		f(u, edgePO, -1)
	}
	for _, u := range g.h.rfOut.neighbours(v) {
		f(u, edgeRF, -1)
	}
	if g.cf.first != nil {
		for i := g.cf.first[v]; i < g.cf.first[v+1]; i++ {
			f(g.cf.to[i], edgeCF, g.cf.via[i])
		}
	}
}

// topologicalOrder sorts the graph (Kahn); if it has a cycle, the order is
// short and done marks the operations sorted.
func (g causalGraph) topologicalOrder() (order []int32, done []bool) {
	n := g.h.n
	indegree := make([]int32, n)
	for v := range int32(n) {
		g.successors(v, func(u int32, _ byte, _ int32) { indegree[u]++ })
	}
	order = make([]int32, 0, n)
	for v := range int32(n) {
		if indegree[v] == 0 {
			order = append(order, v)
		}
	}
	for i := 0; i < len(order); i++ {
		g.successors(order[i], func(u int32, _ byte, _ int32) {
			if indegree[u]--; indegree[u] == 0 {
				order = append(order, u)
			}
		})
	}
	done = make([]bool, n)
	for _, v := range order {
		done[v] = true
	}
	return order, done
}

// step is one operation on a path, with the edge that led to it (zero for
// the first).
type step struct {
	v    int32
	kind byte
	via  int32
}

// cycle returns a shortest cycle through some operation left unsorted by
// topologicalOrder. Every unsorted operation has an unsorted predecessor,
// so following predecessors from one ends on a cycle; a breadth-first
// search from there finds the shortest way round.
func (g causalGraph) cycle(done []bool) []step {
	n := g.h.n
	// One unsorted predecessor per unsorted operation.
	pred := make([]int32, n)
	for v := range int32(n) {
		if !done[v] {
			g.successors(v, func(u int32, _ byte, _ int32) {
				if !done[u] {
					pred[u] = v
				}
			})
		}
	}
	start := slices.Index(done, false)
	seen := make([]bool, n)
	v := int32(start)
	for !seen[v] {
		seen[v] = true
		v = pred[v]
	}
	return g.shortestPath(v, v, done)
}

// shortestPath finds a shortest path of at least one edge from a to b
// through operations not in excluded (nil: none), by breadth-first search.
func (g causalGraph) shortestPath(a, b int32, excluded []bool) []step {
	n := g.h.n
	parent := make([]step, n) // parent[u]: the edge into u, v the operation it leaves
	visited := make([]bool, n)
	visited[a] = true
	queue := []int32{a}
	var last step
	found := false
	for i := 0; i < len(queue) && !found; i++ {
		v := queue[i]
		g.successors(v, func(u int32, kind byte, via int32) {
			if found || (excluded != nil && excluded[u]) {
				return
			}
			if u == b {
				last, found = step{v, kind, via}, true
				return
			}
			if !visited[u] {
				visited[u] = true
				parent[u] = step{v, kind, via}
				queue = append(queue, u)
			}
		})
	}
	if !found {
		return nil
	}
	path := []step{{v: b, kind: last.kind, via: last.via}}
	for v := last.v; v != a; v = parent[v].v {
		path = append(path, step{v: v, kind: parent[v].kind, via: parent[v].via})
	}
	path = append(path, step{v: a})
	slices.Reverse(path)
	return path
}

// describePath lists a shortest causal path from a to b.
func (h *causalHistory) describePath(a, b int32) string {
	return h.describeSteps(causalGraph{h: h}.shortestPath(a, b, nil))
}

// describeCycle lists a cycle, its first operation again at the end.
func (h *causalHistory) describeCycle(cycle []step) string {
	return h.describeSteps(cycle)
}

// describeSteps lists a path one operation per line, eliding the middle
// of a long one.
func (h *causalHistory) describeSteps(path []step) string {
	var b strings.Builder
	for i, s := range path {
		if len(path) > pathStepsMax && i == pathStepsMax/2 {
			fmt.Fprintf(&b, "\n    … %d more …", len(path)-pathStepsMax)
		}
		if len(path) > pathStepsMax && i >= pathStepsMax/2 && i < len(path)-pathStepsMax/2 {
			continue
		}
		switch s.kind {
		case 0:
			b.WriteString("\n    ")
		case edgePO:
			b.WriteString("\n  then ")
		case edgeRF:
			b.WriteString("\n  read by ")
		case edgeCF:
			fmt.Fprintf(&b, "\n  must precede in arbitration (%s read the put below with the put above in its causal past) ", h.describe(s.via))
		}
		b.WriteString(h.describe(s.v))
	}
	return b.String()
}

func (h *causalHistory) describe(v int32) string { return describeOperation(h.history[h.op[v]]) }

// describeOperation names an operation: client, operation, result, times.
func describeOperation(op Operation) string {
	ret := "?"
	if !op.Unknown {
		ret = fmt.Sprint(op.Return)
	}
	var what string
	switch {
	case op.Op.Kind != wire.OpGet:
		what = op.Op.String()
	case op.Unknown:
		what = op.Op.String() + " → ?"
	case op.Result.Found:
		what = fmt.Sprintf("%s → %q", op.Op, op.Result.Value)
	default:
		what = op.Op.String() + " → ⊥"
	}
	return fmt.Sprintf("client %d %s [%d,%s]", op.Client, what, op.Call, ret)
}
