package check

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/wire"
)

// History builders. Results carry what kv.Apply / kv.Read report.

func put(client int, key, value string, call, ret int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)},
		Call: call, Return: ret, Result: wire.Result{Status: wire.StatusOK, Found: true}}
}

func putUnknown(client int, key, value string, call int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)},
		Call: call, Unknown: true}
}

func getFound(client int, key, value string, call, ret int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpGet, Key: key},
		Call: call, Return: ret, Result: wire.Result{Status: wire.StatusOK, Found: true, Value: []byte(value)}}
}

func getAbsent(client int, key string, call, ret int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpGet, Key: key},
		Call: call, Return: ret, Result: wire.Result{Status: wire.StatusOK}}
}

func incr(client int, key string, delta int64, result string, call, ret int64) Operation {
	return Operation{Client: client, Op: wire.Op{Kind: wire.OpIncrement, Key: key, Delta: delta},
		Call: call, Return: ret, Result: wire.Result{Status: wire.StatusOK, Found: true, Value: []byte(result)}}
}

func TestLinearizable(t *testing.T) {
	tests := []struct {
		name    string
		history []Operation
		want    porcupine.CheckResult
	}{
		{"empty history", nil, porcupine.Ok},
		{"sequential put then get", []Operation{
			put(0, "x", "1", 0, 10),
			getFound(1, "x", "1", 20, 30),
		}, porcupine.Ok},
		{"get before any put sees absent", []Operation{
			getAbsent(1, "x", 0, 5),
			put(0, "x", "1", 10, 20),
		}, porcupine.Ok},
		{"stale read after completed put", []Operation{
			put(0, "x", "1", 0, 10),
			getAbsent(1, "x", 20, 30),
		}, porcupine.Illegal},
		{"read of a value never written", []Operation{
			put(0, "x", "1", 0, 10),
			getFound(1, "x", "2", 20, 30),
		}, porcupine.Illegal},
		{"read overlapping a put may see either", []Operation{
			put(0, "x", "1", 0, 30),
			getAbsent(1, "x", 10, 20),
			getFound(2, "x", "1", 11, 21),
		}, porcupine.Ok},
		{"wrong put result", []Operation{
			{Client: 0, Op: wire.Op{Kind: wire.OpPut, Key: "x", Value: []byte("1")}, Call: 0, Return: 10,
				Result: wire.Result{Status: wire.StatusOK, Found: false}},
		}, porcupine.Illegal},

		// An update whose outcome is unknown may or may not have happened.
		{"unknown put later seen", []Operation{
			putUnknown(0, "x", "1", 0),
			getFound(1, "x", "1", 20, 30),
		}, porcupine.Ok},
		{"unknown put never seen", []Operation{
			putUnknown(0, "x", "1", 0),
			getAbsent(1, "x", 20, 30),
		}, porcupine.Ok},
		{"unknown put seen then unseen", []Operation{
			putUnknown(0, "x", "1", 0),
			getFound(1, "x", "1", 20, 30),
			getAbsent(1, "x", 40, 50),
		}, porcupine.Illegal},
		{"unknown put cannot precede its call", []Operation{
			getFound(1, "x", "1", 0, 10),
			putUnknown(0, "x", "1", 20),
		}, porcupine.Illegal},
		// Unknown outcomes nobody saw are left out before the search;
		// what they could not explain stays wrong.
		{"unseen unknown puts leave a stale read stale", []Operation{
			put(0, "x", "1", 0, 10),
			putUnknown(1, "x", "2", 5),
			putUnknown(2, "x", "3", 6),
			getAbsent(3, "x", 20, 30),
		}, porcupine.Illegal},
		{"unknown put a compare-and-set relied on", []Operation{
			putUnknown(0, "x", "1", 0),
			{Client: 1, Op: wire.Op{Kind: wire.OpCompareAndSet, Key: "x", Expected: []byte("1"), Value: []byte("2")}, Call: 20, Return: 30,
				Result: wire.Result{Status: wire.StatusOK, Found: true}},
		}, porcupine.Ok},
		{"unseen unknown put after the key exists", []Operation{
			put(0, "x", "1", 0, 10),
			putUnknown(1, "x", "2", 20),
			put(2, "x", "3", 30, 40),
			getFound(3, "x", "3", 50, 60),
		}, porcupine.Ok},
		{"unknown get", []Operation{
			put(0, "x", "1", 0, 10),
			{Client: 1, Op: wire.Op{Kind: wire.OpGet, Key: "x"}, Call: 20, Unknown: true},
			getFound(2, "x", "1", 30, 40),
		}, porcupine.Ok},

		// Overlapping puts may take effect in either order, but the reads
		// after both must agree on one.
		{"concurrent puts, first wins", []Operation{
			put(0, "x", "1", 0, 20),
			put(1, "x", "2", 5, 25),
			getFound(2, "x", "1", 30, 40),
		}, porcupine.Ok},
		{"concurrent puts, second wins", []Operation{
			put(0, "x", "1", 0, 20),
			put(1, "x", "2", 5, 25),
			getFound(2, "x", "2", 30, 40),
		}, porcupine.Ok},
		{"concurrent puts, reads disagree", []Operation{
			put(0, "x", "1", 0, 20),
			put(1, "x", "2", 5, 25),
			getFound(2, "x", "1", 30, 40),
			getFound(2, "x", "2", 50, 60),
		}, porcupine.Illegal},
		{"sequential puts, old value read", []Operation{
			put(0, "x", "1", 0, 10),
			put(1, "x", "2", 20, 30),
			getFound(2, "x", "1", 40, 50),
		}, porcupine.Illegal},

		// The model runs kv.Apply, so results of computed updates are checked.
		{"increments in order", []Operation{
			incr(0, "n", 1, "1", 0, 10),
			incr(1, "n", 1, "2", 20, 30),
		}, porcupine.Ok},
		{"increment result lost", []Operation{
			incr(0, "n", 1, "1", 0, 10),
			incr(1, "n", 1, "1", 20, 30),
		}, porcupine.Illegal},

		// Keys are independent.
		{"other key unaffected", []Operation{
			put(0, "x", "1", 0, 10),
			getAbsent(1, "y", 20, 30),
		}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Linearizable(tt.history, 10*time.Second)
			if got != tt.want {
				t.Errorf("Linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}

const vol wire.VolumeID = 1

// update returns the update at sn of a history; variant tells apart two
// different updates at the same SN.
func update(sn wire.SN, variant string) *wire.Update {
	return &wire.Update{
		SN: sn, Key: "k" + variant, Changed: true, Value: []byte(variant),
		Client: wire.ClientID(len(variant) + 1), ReqNo: uint64(sn),
	}
}

// applyAll feeds a node the updates SN 1..n of history variant.
func applyAll(h *Histories, node wire.NodeID, n int, variant string) {
	for sn := 1; sn <= n; sn++ {
		h.Applied(node, vol, update(wire.SN(sn), variant))
	}
}

func TestHistoriesApplied(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 3, "")
	applyAll(h, "b", 3, "")
	hist := h.Of("a", vol)
	if len(hist) != 3 {
		t.Fatalf("len(Hist(a)) = %d, want 3", len(hist))
	}
	for i, e := range hist {
		if e.Client != 1 || e.ReqNo != uint64(i+1) {
			t.Errorf("Hist(a)[%d] = client %d req %d, want client 1 req %d", i, e.Client, e.ReqNo, i+1)
		}
	}
	if !reflect.DeepEqual(h.Of("a", vol), h.Of("b", vol)) {
		t.Error("the same updates gave different histories")
	}
	if h.Of("a", vol+1) != nil {
		t.Error("Hist(a) of another volume is not empty")
	}

	// Updates that differ only in value give different digests.
	applyAll(h, "c", 1, "")
	h.Applied("c", vol, &wire.Update{SN: 2, Key: "k", Changed: true, Value: []byte("other"), Client: 1, ReqNo: 2})
	if IsPrefix(h.Of("c", vol), h.Of("a", vol)) {
		t.Error("a history with another value at SN 2 is a prefix")
	}
	if !IsPrefix(h.Of("c", vol)[:1], h.Of("a", vol)) {
		t.Error("equal first updates are not a prefix")
	}
}

// A crash keeps a history as far as the disk does. A replica reset (its
// server removed from the chain) that crashes before the reset was
// committed keeps its earlier state on disk, and with it the history from
// before the reset (found by the simulator with servers of several
// loops, sim.TestLoopsKeepEveryGuarantee seed 2).
func TestHistoriesCrashed(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 3, "")
	want := slices.Clone(h.Of("a", vol))
	h.Crashed("a", vol, 2)
	if got := h.Of("a", vol); !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("after a crash keeping SN 2: %v, want %v", got, want[:2])
	}
	h.Applied("a", vol, update(3, ""))
	h.Reset("a", vol)
	h.Crashed("a", vol, 3)
	if got := h.Of("a", vol); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a crash undoing a reset: %v, want %v", got, want)
	}
}

func TestHistoriesAppliedOutOfOrderPanics(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 1, "")
	defer func() {
		if recover() == nil {
			t.Error("applying SN 3 after SN 1 did not panic")
		}
	}()
	h.Applied("a", vol, update(3, ""))
}

func TestIsPrefix(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 3, "")
	applyAll(h, "x", 2, "x")
	a, x := h.Of("a", vol), h.Of("x", vol)
	tests := []struct {
		name string
		p, q []Entry
		want bool
	}{
		{"empty of empty", nil, nil, true},
		{"empty of any", nil, a, true},
		{"shorter", a[:2], a, true},
		{"equal", a, a, true},
		{"longer", a, a[:2], false},
		{"diverged", x, a, false},
	}
	for _, tt := range tests {
		if got := IsPrefix(tt.p, tt.q); got != tt.want {
			t.Errorf("%s: IsPrefix = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestChainInvariants(t *testing.T) {
	// applied lists, per node, how many updates of which variant it applied.
	type applied struct {
		node    wire.NodeID
		n       int
		variant string
	}
	// The proper chain: a ahead of b ahead of the tail c, with Sent lists
	// holding exactly what the tail has not processed.
	properHist := []applied{{"a", 3, ""}, {"b", 2, ""}, {"c", 1, ""}}
	properChain := []ReplicaState{
		{ID: "a", Applied: 3, SentFirst: 2, SentLast: 3},
		{ID: "b", Applied: 2, SentFirst: 2, SentLast: 2},
		{ID: "c", Applied: 1},
	}
	withState := func(i int, r ReplicaState) []ReplicaState {
		c := append([]ReplicaState(nil), properChain...)
		c[i] = r
		return c
	}

	tests := []struct {
		name  string
		hist  []applied
		chain []ReplicaState
		tail  int // index in chain, or -1 for no live tail
		want  string
	}{
		{"proper prefix chain", properHist, properChain, 2, ""},
		{"all caught up, empty Sent", []applied{{"a", 2, ""}, {"b", 2, ""}, {"c", 2, ""}},
			[]ReplicaState{{ID: "a", Applied: 2}, {ID: "b", Applied: 2}, {ID: "c", Applied: 2}}, 2, ""},
		{"Sent may keep acknowledged updates", properHist,
			withState(0, ReplicaState{ID: "a", Applied: 3, SentFirst: 1, SentLast: 3}), 2, ""},
		{"empty chain", nil, nil, -1, ""},
		{"no live tail skips Sent checks", properHist,
			withState(0, ReplicaState{ID: "a", Applied: 3}), -1, ""},

		{"applied count misreported", properHist,
			withState(1, ReplicaState{ID: "b", Applied: 3, SentFirst: 2, SentLast: 3}), 2,
			"b reports applied 3 but applied 2 updates"},
		{"tail diverged from its predecessor",
			[]applied{{"a", 3, ""}, {"b", 2, ""}, {"c", 1, ""}, {"c", 2, "z"}},
			withState(2, ReplicaState{ID: "c", Applied: 2}), 2,
			"update propagation: Hist(c) (2 updates) is not a prefix of Hist(a) (3 updates)"},
		{"successor ahead of predecessor",
			[]applied{{"a", 3, ""}, {"b", 2, ""}, {"c", 3, ""}},
			withState(2, ReplicaState{ID: "c", Applied: 3}), 2,
			"update propagation: Hist(c) (3 updates) is not a prefix of Hist(b) (2 updates)"},

		{"head Sent misses an update", properHist,
			withState(0, ReplicaState{ID: "a", Applied: 3, SentFirst: 3, SentLast: 3}), 2,
			"inprocess requests: a applied 3, tail c applied 1, but Sent(a) covers [3, 3]"},
		{"head Sent empty", properHist,
			withState(0, ReplicaState{ID: "a", Applied: 3}), 2,
			"inprocess requests: a applied 3, tail c applied 1, but Sent(a) covers [0, 0]"},
		{"head Sent short of applied", properHist,
			withState(0, ReplicaState{ID: "a", Applied: 3, SentFirst: 2, SentLast: 2}), 2,
			"inprocess requests: a applied 3, tail c applied 1, but Sent(a) covers [2, 2]"},
		{"middle Sent misses an update", properHist,
			withState(1, ReplicaState{ID: "b", Applied: 2}), 2,
			"inprocess requests: b applied 2, tail c applied 1, but Sent(b) covers [0, 0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistories()
			for _, a := range tt.hist {
				// Continue the node's history from where it is.
				for sn := len(h.Of(a.node, vol)) + 1; sn <= a.n; sn++ {
					h.Applied(a.node, vol, update(wire.SN(sn), a.variant))
				}
			}
			var tail *ReplicaState
			if tt.tail >= 0 {
				tail = &tt.chain[tt.tail]
			}
			if got := h.ChainInvariants(vol, tt.chain, tail); got != tt.want {
				t.Errorf("ChainInvariants =\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}

func TestSnapshotInstalled(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 3, "")
	original := append([]Entry(nil), h.Of("a", vol)...)

	h.SnapshotInstalled("j", vol, "a", 2)
	if got := h.Of("j", vol); !reflect.DeepEqual(got, original[:2]) {
		t.Fatalf("Hist(j) = %v, want the first 2 entries of Hist(a) %v", got, original)
	}
	// The joiner continues on its own copy: a diverging SN 3 leaves a alone.
	h.Applied("j", vol, update(3, "j"))
	if !reflect.DeepEqual(h.Of("a", vol), original) {
		t.Errorf("Hist(a) changed when j applied after its snapshot")
	}
	if IsPrefix(h.Of("j", vol), h.Of("a", vol)) {
		t.Errorf("Hist(j) with another SN 3 is a prefix of Hist(a)")
	}

	h.SnapshotInstalled("empty", vol, "a", 0)
	if got := h.Of("empty", vol); len(got) != 0 {
		t.Errorf("snapshot at SN 0 gave a history of %d entries", len(got))
	}

	// The source is reset (removed from the chain); a snapshot it took
	// before still arrives and is checked against its old history.
	h.Reset("a", vol)
	if got := h.Of("a", vol); got != nil {
		t.Fatalf("Hist(a) after Reset = %v, want empty", got)
	}
	h.SnapshotInstalled("k", vol, "a", 3)
	if got := h.Of("k", vol); !reflect.DeepEqual(got, original) {
		t.Errorf("Hist(k) from the retired history = %v, want %v", got, original)
	}

	// The source starts again with a shorter history: a longer snapshot
	// still comes from the retired one, and a second Reset of an empty
	// history keeps it.
	applyAll(h, "a", 1, "")
	h.SnapshotInstalled("m", vol, "a", 2)
	if got := h.Of("m", vol); !reflect.DeepEqual(got, original[:2]) {
		t.Errorf("Hist(m) = %v, want the first 2 retired entries %v", got, original[:2])
	}
	h.Reset("a", vol)
	h.Reset("a", vol)
	h.SnapshotInstalled("n", vol, "a", 1)
	if got := h.Of("n", vol); !reflect.DeepEqual(got, original[:1]) {
		t.Errorf("Hist(n) = %v, want %v", got, original[:1])
	}
}

func TestSnapshotInstalledBeyondSourcePanics(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 2, "")
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("a snapshot at SN 3 from a source with 2 updates did not panic")
		}
		if msg, _ := r.(string); !strings.Contains(msg, "never had it") {
			t.Errorf("panic = %v, want one saying the source never had the SN", r)
		}
	}()
	h.SnapshotInstalled("j", vol, "a", 3)
}

func TestForget(t *testing.T) {
	h := NewHistories()
	applyAll(h, "a", 2, "")
	h.Forget("a", vol)
	if got := h.Of("a", vol); got != nil {
		t.Errorf("Hist(a) after Forget = %v, want empty", got)
	}
	// A restarted replica starts from SN 1.
	h.Applied("a", vol, update(1, ""))
	if got := len(h.Of("a", vol)); got != 1 {
		t.Errorf("len(Hist(a)) after restart = %d, want 1", got)
	}
}

// Settle drops the unknown updates no replica applied: they took
// effect nowhere.
func TestSettle(t *testing.T) {
	id := UpdateID{Client: 7, ReqNo: 3}
	unknown := putUnknown(0, "x", "1", 0)
	unknown.ID = id
	tests := []struct {
		name    string
		history []Operation
		applied map[UpdateID]bool
		want    porcupine.CheckResult
	}{
		{"applied, read", []Operation{unknown, getFound(1, "x", "1", 20, 30)},
			map[UpdateID]bool{id: true}, porcupine.Ok},
		{"applied, read late", []Operation{unknown, getAbsent(1, "x", 20, 30), getFound(1, "x", "1", 40, 50)},
			map[UpdateID]bool{id: true}, porcupine.Ok},
		{"never applied, yet read", []Operation{unknown, getFound(1, "x", "1", 20, 30)},
			map[UpdateID]bool{}, porcupine.Illegal},
		{"never applied, not read", []Operation{unknown, getAbsent(1, "x", 20, 30)},
			map[UpdateID]bool{}, porcupine.Ok},
		{"without an id: unknown as ever", []Operation{putUnknown(0, "x", "1", 0), getFound(1, "x", "1", 20, 30)},
			map[UpdateID]bool{}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := Linearizable(Settle(tt.history, tt.applied), 10*time.Second); got != tt.want {
				t.Errorf("Linearizable(Settle) = %v, want %v", got, tt.want)
			}
		})
	}
}
