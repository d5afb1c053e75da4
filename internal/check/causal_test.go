package check

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// getUnknown is a get whose outcome the client never learned; its Result
// is whatever a buggy recorder might leave there.
func getUnknown(client int, key, value string, call int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: call, Unknown: true,
		Result: wire.Result{Found: true, Value: []byte(value)}}
}

func TestCausalConvergence(t *testing.T) {
	tests := []struct {
		name    string
		history []Operation
		want    string   // pattern, "" for causal+
		detail  []string // substrings the Detail must hold
	}{
		// Causal+ histories, most of them not linearizable.
		{name: "empty history"},
		{name: "reader has not seen a completed put", history: []Operation{
			put(0, "x", "a", 0, 10),
			getAbsent(1, "x", 20, 30),
		}},
		{name: "one reader sees the newer value, a later one the older", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(0, "x", "b", 20, 30),
			getFound(1, "x", "b", 40, 50),
			getFound(2, "x", "a", 60, 70),
		}},
		{name: "each writer reads its own concurrent write", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(1, "x", "b", 0, 10),
			getFound(0, "x", "a", 20, 30),
			getFound(1, "x", "b", 20, 30),
		}},
		{name: "readers see concurrent writes in the same order", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(1, "x", "b", 0, 10),
			getFound(2, "x", "a", 20, 30),
			getFound(2, "x", "b", 40, 50),
			getAbsent(3, "x", 20, 30),
			getFound(3, "x", "a", 60, 70),
			getFound(3, "x", "b", 80, 90),
		}},
		{name: "causal chain across three sessions respected", history: []Operation{
			put(0, "x", "a", 0, 10),
			getFound(1, "x", "a", 20, 30),
			put(1, "y", "b", 40, 50),
			getFound(2, "y", "b", 60, 70),
			getFound(2, "x", "a", 80, 90),
			getAbsent(2, "z", 100, 110),
		}},
		{name: "overwrite seen only by a reader that read it", history: []Operation{
			put(0, "x", "a", 0, 10),
			getFound(1, "x", "a", 20, 30),
			put(1, "x", "b", 40, 50),
			getFound(2, "x", "a", 60, 70),
			getFound(1, "x", "b", 60, 70),
		}},
		{name: "one value under two keys", history: []Operation{
			put(0, "x", "v", 0, 10),
			put(1, "y", "v", 0, 10),
			getFound(2, "y", "v", 20, 30),
			getAbsent(2, "x", 40, 50),
		}},
		{name: "operations sorted by call, not by position in the history", history: []Operation{
			getFound(0, "x", "b", 40, 50),
			put(0, "x", "b", 20, 30),
			put(0, "x", "a", 0, 10),
		}},

		// Puts and gets whose outcome is unknown.
		{name: "unknown put read by others", history: []Operation{
			putUnknown(0, "x", "a", 0),
			getFound(1, "x", "a", 20, 30),
			getFound(2, "x", "a", 20, 30),
		}},
		{name: "unknown put nobody read is dropped, its client goes on", history: []Operation{
			putUnknown(0, "x", "a", 0),
			getAbsent(0, "x", 10, 20),
			getAbsent(1, "x", 30, 40),
		}},
		{name: "unknown get ignored, whatever its result says", history: []Operation{
			getUnknown(0, "x", "never-written", 0),
			put(0, "x", "a", 10, 20),
			getFound(0, "x", "a", 30, 40),
		}},

		// ThinAirRead.
		{name: "read of a value never written", history: []Operation{
			put(0, "x", "a", 0, 10),
			getFound(1, "x", "b", 20, 30),
		}, want: patternThinAirRead, detail: []string{`client 1 get(x) → "b" [20,30]`}},
		{name: "read of a value written to another key", history: []Operation{
			put(0, "y", "a", 0, 10),
			getFound(1, "x", "a", 20, 30),
		}, want: patternThinAirRead},

		// CyclicCO.
		{name: "each of two clients reads what the other writes next", history: []Operation{
			getFound(0, "x", "a", 0, 10),
			put(0, "y", "b", 20, 30),
			getFound(1, "y", "b", 0, 10),
			put(1, "x", "a", 20, 30),
		}, want: patternCyclicCO, detail: []string{`put(y, "b")`, `put(x, "a")`, "read by"}},
		{name: "read of the client's own later write", history: []Operation{
			getFound(0, "x", "a", 0, 10),
			put(0, "x", "a", 20, 30),
		}, want: patternCyclicCO},

		// WriteCOInitRead.
		{name: "client misses its own write", history: []Operation{
			put(0, "x", "a", 0, 10),
			getAbsent(0, "x", 20, 30),
		}, want: patternWriteCOInitRead},
		{name: "initial value read after a causal chain across three sessions", history: []Operation{
			put(0, "x", "a", 0, 10),
			getFound(1, "x", "a", 20, 30),
			put(1, "y", "b", 40, 50),
			getFound(2, "y", "b", 60, 70),
			getAbsent(2, "x", 80, 90),
		}, want: patternWriteCOInitRead, detail: []string{`client 2 get(x) → ⊥ [80,90]`, `client 0 put(x, "a") [0,10]`}},

		// WriteCORead.
		{name: "client reads its own overwritten write", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(0, "x", "b", 20, 30),
			getFound(0, "x", "a", 40, 50),
		}, want: patternWriteCORead},
		{name: "reader goes back to an overwritten value", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(0, "x", "b", 20, 30),
			getFound(1, "x", "b", 40, 50),
			getFound(1, "x", "a", 60, 70),
		}, want: patternWriteCORead},
		{name: "overwritten value read after a transitive chain across three sessions", history: []Operation{
			put(0, "x", "a", 0, 10),
			getFound(1, "x", "a", 20, 30),
			put(1, "x", "b", 40, 50),
			put(1, "y", "c", 60, 70),
			getFound(2, "y", "c", 80, 90),
			getFound(2, "x", "a", 100, 110),
		}, want: patternWriteCORead, detail: []string{`client 2 get(x) → "a" [100,110]`, `client 1 put(x, "b") [40,50]`}},
		{name: "overwritten unknown put", history: []Operation{
			putUnknown(0, "x", "a", 0),
			getFound(1, "x", "a", 10, 20),
			put(1, "x", "b", 30, 40),
			getFound(1, "x", "a", 50, 60),
		}, want: patternWriteCORead},

		// CyclicCF.
		{name: "two readers see concurrent writes in opposite orders", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(1, "x", "b", 0, 10),
			getFound(2, "x", "a", 20, 30),
			getFound(2, "x", "b", 40, 50),
			getFound(3, "x", "b", 20, 30),
			getFound(3, "x", "a", 40, 50),
		}, want: patternCyclicCF, detail: []string{"must precede in arbitration"}},
		{name: "arbitration cycle over two keys", history: []Operation{
			put(0, "x", "x0", 0, 10),
			put(0, "y", "y0", 20, 30),
			put(1, "y", "y1", 0, 10),
			put(1, "x", "x1", 20, 30),
			getFound(2, "y", "y0", 40, 50),
			getFound(2, "y", "y1", 60, 70),
			getFound(3, "x", "x1", 40, 50),
			getFound(3, "x", "x0", 60, 70),
		}, want: patternCyclicCF, detail: []string{`put(x, "x0")`, `put(y, "y0")`, `put(y, "y1")`, `put(x, "x1")`}},

		// Malformed.
		{name: "delete", history: []Operation{
			put(0, "x", "a", 0, 10),
			{Client: 0, Op: wire.Op{Kind: wire.OpDelete, Key: "x"}, Call: 20, Return: 30},
		}, want: patternMalformed, detail: []string{"delete(x)"}},
		{name: "increment", history: []Operation{
			incr(0, "n", 1, "1", 0, 10),
		}, want: patternMalformed},
		{name: "one value put twice to one key", history: []Operation{
			put(0, "x", "a", 0, 10),
			put(1, "x", "a", 20, 30),
		}, want: patternMalformed, detail: []string{"unique"}},
		{name: "one value put twice, once with unknown outcome", history: []Operation{
			put(0, "x", "a", 0, 10),
			putUnknown(1, "x", "a", 20),
		}, want: patternMalformed},
		{name: "overlapping operations of one client", history: []Operation{
			put(0, "x", "a", 0, 20),
			getAbsent(0, "y", 10, 30),
		}, want: patternMalformed, detail: []string{"sequential"}},
		{name: "client goes on after an unknown put someone read", history: []Operation{
			putUnknown(0, "x", "a", 0),
			getFound(0, "x", "a", 10, 20),
		}, want: patternMalformed, detail: []string{"unknown outcome"}},
		{name: "return before call", history: []Operation{
			put(0, "x", "a", 10, 0),
		}, want: patternMalformed},
		{name: "get found nothing but has a value", history: []Operation{
			{Client: 0, Op: wire.Op{Kind: wire.OpGet, Key: "x"}, Call: 0, Return: 10, Result: wire.Result{Value: []byte("a")}},
		}, want: patternMalformed},
		{name: "failed status", history: []Operation{
			{Client: 0, Op: wire.Op{Kind: wire.OpPut, Key: "x", Value: []byte("a")}, Call: 0, Return: 10,
				Result: wire.Result{Status: wire.StatusCompareFailed}},
		}, want: patternMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := CausalConvergence(tt.history)
			got := ""
			if v != nil {
				got = v.Pattern
			}
			if got != tt.want {
				t.Fatalf("CausalConvergence = %v, want pattern %q", v, tt.want)
			}
			for _, s := range tt.detail {
				if !strings.Contains(v.Detail, s) {
					t.Errorf("Detail lacks %q:\n%s", s, v.Detail)
				}
			}
			if v != nil && !strings.Contains(v.Error(), tt.want) {
				t.Errorf("Error() = %q does not name the pattern", v.Error())
			}
			// The order of the history does not matter.
			if v2 := CausalConvergence(reversed(tt.history)); (v2 == nil) != (v == nil) || v2 != nil && v2.Pattern != v.Pattern {
				t.Errorf("reversed history gives %v, want %v", v2, v)
			}
		})
	}
}

func reversed(h []Operation) []Operation {
	r := slices.Clone(h)
	slices.Reverse(r)
	return r
}

// referenceCausalConvergence applies the definitions of the bad patterns
// literally (transitive closure, every CF edge) to a well-formed history
// of completed puts and gets; the fast checker must agree with it.
func referenceCausalConvergence(history []Operation) string {
	n := len(history)
	edge := make([][]bool, n)
	for i := range edge {
		edge[i] = make([]bool, n)
	}
	source := make([]int, n)
	for r, op := range history {
		source[r] = -1
		if op.Op.Kind != wire.OpGet || !op.Result.Found {
			continue
		}
		for w, wop := range history {
			if wop.Op.Kind == wire.OpPut && wop.Op.Key == op.Op.Key && string(wop.Op.Value) == string(op.Result.Value) {
				source[r] = w
			}
		}
		if source[r] < 0 {
			return patternThinAirRead
		}
		edge[source[r]][r] = true
	}
	for a, oa := range history {
		for b, ob := range history {
			if oa.Client == ob.Client && oa.Call < ob.Call {
				edge[a][b] = true
			}
		}
	}
	closure := func(e [][]bool) [][]bool {
		c := make([][]bool, n)
		for i := range c {
			c[i] = slices.Clone(e[i])
		}
		for k := range n {
			for i := range n {
				if c[i][k] {
					for j := range n {
						c[i][j] = c[i][j] || c[k][j]
					}
				}
			}
		}
		return c
	}
	cyclic := func(c [][]bool) bool {
		for i := range n {
			if c[i][i] {
				return true
			}
		}
		return false
	}
	co := closure(edge)
	if cyclic(co) {
		return patternCyclicCO
	}
	writesTo := func(w int, key string) bool {
		return history[w].Op.Kind == wire.OpPut && history[w].Op.Key == key
	}
	for r, op := range history {
		if op.Op.Kind == wire.OpGet && source[r] < 0 {
			for w := range n {
				if writesTo(w, op.Op.Key) && co[w][r] {
					return patternWriteCOInitRead
				}
			}
		}
	}
	for r := range n {
		if w := source[r]; w >= 0 {
			for w2 := range n {
				if w2 != w && writesTo(w2, history[r].Op.Key) && co[w][w2] && co[w2][r] {
					return patternWriteCORead
				}
			}
		}
	}
	for r := range n {
		if w := source[r]; w >= 0 {
			for w1 := range n {
				if w1 != w && writesTo(w1, history[r].Op.Key) && co[w1][r] {
					co[w1][w] = true // CF
				}
			}
		}
	}
	if cyclic(closure(co)) {
		return patternCyclicCF
	}
	return ""
}

// randomSmallHistory draws a small well-formed history in which gets
// return ⊥, any value put to their key (earlier or later), or rarely a
// value nobody put, so that every pattern turns up.
func randomSmallHistory(rng *rand.Rand) []Operation {
	keys := []string{"x", "y"}
	var h []Operation
	var gets []int
	values := map[string][]string{}
	for c := range 3 {
		for j := range 1 + rng.IntN(4) {
			call := int64(10*j + rng.IntN(5))
			key := keys[rng.IntN(len(keys))]
			if rng.IntN(2) == 0 {
				v := fmt.Sprintf("%d.%d", c, j)
				values[key] = append(values[key], v)
				h = append(h, put(c, key, v, call, call+5))
			} else {
				gets = append(gets, len(h))
				h = append(h, getAbsent(c, key, call, call+5))
			}
		}
	}
	for _, i := range gets {
		vs := values[h[i].Op.Key]
		switch p := rng.IntN(20); {
		case p == 0:
			h[i].Result = wire.Result{Found: true, Value: []byte("thin air")}
		case p < 5 || len(vs) == 0:
		default:
			h[i].Result = wire.Result{Found: true, Value: []byte(vs[rng.IntN(len(vs))])}
		}
	}
	rng.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
	return h
}

// TestCausalConvergenceAgreesWithDefinitions compares the fast checker
// with the literal definitions on many small random histories.
func TestCausalConvergenceAgreesWithDefinitions(t *testing.T) {
	seen := map[string]int{}
	for seed := range uint64(20000) {
		h := randomSmallHistory(rand.New(rand.NewPCG(seed, 1)))
		want := referenceCausalConvergence(h)
		got := ""
		v := CausalConvergence(h)
		if v != nil {
			got = v.Pattern
		}
		if got != want {
			t.Fatalf("seed %d: CausalConvergence = %v, definitions say %q; history:\n%s", seed, v, want, describeHistory(h))
		}
		seen[want]++
	}
	t.Logf("outcomes: %v", seen)
	for _, p := range []string{"", patternThinAirRead, patternCyclicCO, patternWriteCOInitRead, patternWriteCORead, patternCyclicCF} {
		if seen[p] < 50 {
			t.Errorf("only %d of the random histories give %q; the generator no longer exercises it (%v)", seen[p], p, seen)
		}
	}
}

func describeHistory(h []Operation) string {
	var b strings.Builder
	for _, op := range h {
		fmt.Fprintf(&b, "  %s\n", describeOperation(op))
	}
	return b.String()
}

// causalModel generates histories of a correct causal+ store: replicas
// apply writes in causal order (each write after the writes its client
// had seen) and keep the last writer by Lamport time, so every replica
// orders writes by one arbitration that extends causality; a client reads
// and writes at any replica holding at least its own causal past.
type causalModel struct {
	rng      *rand.Rand
	clients  []modelClient
	replicas []modelReplica
	writes   [][]*modelWrite // per client, its writes in order
	history  []Operation
	reads    []modelRead
	now      int64
	keys     int
	// unknownOneIn: one operation in unknownOneIn has an unknown outcome
	// and ends its client's session (0: none).
	unknownOneIn int
}

type modelWrite struct {
	client  int
	key     string
	value   string
	lamport int64
	past    []int // per client, how many of its writes are in this write's causal past, itself included
}

type modelClient struct {
	past  []int // per client, how many of its writes are in this client's causal past
	clock int64
	done  bool
}

type modelReplica struct {
	applied []int // per client, how many of its writes this replica applied
	store   map[string]*modelWrite
}

// modelRead remembers a get and the reader's causal past just before it.
type modelRead struct {
	index int // in history
	past  []int
}

func newCausalModel(seed uint64, clients, replicas, keys int) *causalModel {
	m := &causalModel{rng: rand.New(rand.NewPCG(seed, 2)), keys: keys, writes: make([][]*modelWrite, clients), unknownOneIn: 300}
	for range clients {
		m.clients = append(m.clients, modelClient{past: make([]int, clients)})
	}
	for range replicas {
		m.replicas = append(m.replicas, modelReplica{applied: make([]int, clients), store: map[string]*modelWrite{}})
	}
	return m
}

func covers(have, want []int) bool {
	for i := range have {
		if have[i] < want[i] {
			return false
		}
	}
	return true
}

// apply installs w at replica r if it wins by (Lamport time, client).
func (r *modelReplica) apply(w *modelWrite) {
	r.applied[w.client]++
	if old := r.store[w.key]; old == nil || old.lamport < w.lamport || old.lamport == w.lamport && old.client < w.client {
		r.store[w.key] = w
	}
}

// deliver applies at a random replica one write whose causal past that
// replica already holds, if there is one.
func (m *causalModel) deliver() {
	r := &m.replicas[m.rng.IntN(len(m.replicas))]
	first := m.rng.IntN(len(m.clients))
	for i := range m.clients {
		c := (first + i) % len(m.clients)
		if next := r.applied[c]; next < len(m.writes[c]) {
			if w := m.writes[c][next]; covers(r.applied, slices.Concat(w.past[:c], []int{next}, w.past[c+1:])) {
				r.apply(w)
				return
			}
		}
	}
}

// operate runs one operation of client c at a replica that holds its past.
// With small probability the operation is its last and its outcome unknown.
func (m *causalModel) operate(c int) {
	cl := &m.clients[c]
	var fresh []int
	for i := range m.replicas {
		if covers(m.replicas[i].applied, cl.past) {
			fresh = append(fresh, i)
		}
	}
	r := &m.replicas[fresh[m.rng.IntN(len(fresh))]]
	key := fmt.Sprintf("k%d", m.rng.IntN(m.keys))
	call := m.now
	m.now += 1 + int64(m.rng.IntN(3))
	ret := m.now
	m.now++
	unknown := m.unknownOneIn > 0 && m.rng.IntN(m.unknownOneIn) == 0
	if m.rng.IntN(2) == 0 {
		if unknown && m.rng.IntN(2) == 0 {
			// Lost before any replica applied it.
			m.history = append(m.history, putUnknown(c, key, fmt.Sprintf("c%d.lost", c), call))
			cl.done = true
			return
		}
		cl.clock++
		w := &modelWrite{client: c, key: key, value: fmt.Sprintf("c%d.%d", c, len(m.writes[c])), lamport: cl.clock, past: slices.Clone(cl.past)}
		w.past[c]++
		m.writes[c] = append(m.writes[c], w)
		r.apply(w)
		cl.past = slices.Clone(w.past)
		if unknown {
			m.history = append(m.history, putUnknown(c, key, w.value, call))
			cl.done = true
			return
		}
		m.history = append(m.history, put(c, key, w.value, call, ret))
		return
	}
	if unknown {
		m.history = append(m.history, getUnknown(c, key, "garbage", call))
		cl.done = true
		return
	}
	m.reads = append(m.reads, modelRead{index: len(m.history), past: slices.Clone(cl.past)})
	w := r.store[key]
	if w == nil {
		m.history = append(m.history, getAbsent(c, key, call, ret))
		return
	}
	for i, n := range w.past {
		cl.past[i] = max(cl.past[i], n)
	}
	cl.clock = max(cl.clock, w.lamport)
	m.history = append(m.history, getFound(c, key, w.value, call, ret))
}

// run performs about ops operations, interleaved with deliveries.
func (m *causalModel) run(ops int) []Operation {
	for len(m.history) < ops {
		if m.rng.IntN(3) == 0 {
			m.deliver()
			continue
		}
		c := m.rng.IntN(len(m.clients))
		if m.clients[c].done {
			if !slices.ContainsFunc(m.clients, func(cl modelClient) bool { return !cl.done }) {
				break
			}
			continue
		}
		m.operate(c)
	}
	return m.history
}

// TestCausalConvergenceOfCausalStore: histories of a correct causal+ store
// pass, over many seeds and shapes.
func TestCausalConvergenceOfCausalStore(t *testing.T) {
	for seed := range uint64(300) {
		clients, replicas, keys := 1+int(seed%5), 1+int(seed/5%4), 1+int(seed/20%6)
		m := newCausalModel(seed, clients, replicas, keys)
		h := m.run(400)
		if v := CausalConvergence(h); v != nil {
			t.Fatalf("seed %d (%d clients, %d replicas, %d keys): %v\nhistory:\n%s", seed, clients, replicas, keys, v, describeHistory(h))
		}
	}
}

// TestCausalConvergenceCatchesStaleRead corrupts one read of a correct
// history so that it returns a value its reader had seen overwritten (or
// ⊥ where it had seen a write), and requires the checker to catch it.
func TestCausalConvergenceCatchesStaleRead(t *testing.T) {
	caught := map[string]int{}
	for seed := range uint64(300) {
		m := newCausalModel(seed, 2+int(seed%4), 1+int(seed/4%3), 1+int(seed/12%3))
		h := m.run(300)
		if v := CausalConvergence(h); v != nil {
			t.Fatalf("seed %d: uncorrupted history fails: %v", seed, v)
		}
		inPast := func(w *modelWrite, past []int) bool { return past[w.client] >= countThrough(m.writes[w.client], w) }
		// Half the seeds corrupt a read to ⊥, half to an overwritten value.
		toInitial := seed%2 == 0
		read, value := -1, (*modelWrite)(nil)
		for _, i := range m.rng.Perm(len(m.reads)) {
			rd := m.reads[i]
			key := h[rd.index].Op.Key
			var older []*modelWrite // writes to key in the reader's past
			for _, ws := range m.writes {
				for _, w := range ws {
					if w.key == key && inPast(w, rd.past) {
						older = append(older, w)
					}
				}
			}
			if toInitial && len(older) > 0 {
				read = rd.index
				break
			}
			// An older write some newer one in the past overwrote.
			for _, old := range older {
				if slices.ContainsFunc(older, func(newer *modelWrite) bool { return newer != old && inPast(old, newer.past) }) {
					read, value = rd.index, old
					break
				}
			}
			if read >= 0 {
				break
			}
		}
		if read < 0 {
			continue
		}
		bad := slices.Clone(h)
		want := patternWriteCOInitRead
		bad[read].Result = wire.Result{}
		if value != nil {
			want = patternWriteCORead
			bad[read].Result = wire.Result{Found: true, Value: []byte(value.value)}
		}
		v := CausalConvergence(bad)
		if v == nil || v.Pattern != want {
			t.Fatalf("seed %d: read %s corrupted to %s: got %v, want %s", seed, describeOperation(h[read]), describeOperation(bad[read]), v, want)
		}
		caught[want]++
	}
	t.Logf("caught: %v", caught)
	if caught[patternWriteCORead] < 100 || caught[patternWriteCOInitRead] < 100 {
		t.Errorf("too few corruptions tried (%v): the generator no longer produces overwritten values", caught)
	}
}

// countThrough is w's position (from 1) among its client's writes.
func countThrough(ws []*modelWrite, w *modelWrite) int { return slices.Index(ws, w) + 1 }

// TestCausalConvergenceDeterministic: the same history gives the same
// report, down to the Detail.
func TestCausalConvergenceDeterministic(t *testing.T) {
	h := []Operation{
		put(0, "x", "a", 0, 10), put(1, "x", "b", 0, 10),
		getFound(2, "x", "a", 20, 30), getFound(2, "x", "b", 40, 50),
		getFound(3, "x", "b", 20, 30), getFound(3, "x", "a", 40, 50),
		put(4, "y", "c", 0, 10), put(4, "y", "d", 20, 30), getFound(5, "y", "d", 0, 10), getFound(5, "y", "c", 20, 30),
	}
	first := CausalConvergence(h)
	if first == nil {
		t.Fatal("no violation found")
	}
	for range 20 {
		if v := CausalConvergence(h); *v != *first {
			t.Fatalf("second run reports %v, first %v", v, first)
		}
	}
}

// BenchmarkCausalConvergence checks a 50 000-operation history of 10
// clients over 3 replicas and 1 000 keys.
func BenchmarkCausalConvergence(b *testing.B) {
	m := newCausalModel(1, 10, 3, 1000)
	m.unknownOneIn = 0
	h := m.run(50000)
	if len(h) != 50000 {
		b.Fatalf("history of %d operations", len(h))
	}
	runs := 0
	for b.Loop() {
		if v := CausalConvergence(h); v != nil {
			b.Fatal(v)
		}
		runs++
	}
	b.ReportMetric(float64(len(h)*runs)/b.Elapsed().Seconds(), "ops/s")
}
