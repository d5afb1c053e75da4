package torture

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/causalwork"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// rec builds a record; at is its call time in ms, it returns 1 ms later.
func rec(client int, at int64, op wire.Op, outcome Outcome, result wire.Result) Record {
	ms := int64(time.Millisecond)
	return Record{Set: isSetKey(op.Key), Client: client, Op: op, Call: at * ms, Return: (at + 1) * ms, Outcome: outcome, Result: result}
}

func put(key, value string) wire.Op {
	return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}
}
func get(key string) wire.Op { return wire.Op{Kind: wire.OpGet, Key: key} }
func appendOp(key, element string) wire.Op {
	return wire.Op{Kind: wire.OpAppend, Key: key, Value: []byte(element + " ")}
}
func found(value string) wire.Result { return wire.Result{Found: true, Value: []byte(value)} }

func TestCheckRegisters(t *testing.T) {
	ok := []Record{
		rec(1, 0, put("r0.0", "a"), OK, wire.Result{Found: true}),
		rec(2, 2, get("r0.0"), OK, found("a")),
		// An update with an unknown outcome may have taken effect...
		rec(1, 4, put("r0.0", "b"), Unknown, wire.Result{}),
		rec(2, 6, get("r0.0"), OK, found("b")),
		// ... and a failed one took none.
		rec(1, 8, put("r0.0", "c"), Failed, wire.Result{}),
		rec(3, 10, wire.Op{Kind: wire.OpCompareAndSet, Key: "r0.0", Expected: []byte("b"), Value: []byte("d")}, OK, wire.Result{Found: true}),
		rec(finalClient, 12, get("r0.0"), OK, found("d")),
		rec(1, 0, wire.Op{Kind: wire.OpIncrement, Key: "n0.0", Delta: 1}, OK, found("1")),
		// Set keys are the set checker's.
		rec(5, 0, appendOp("a0.0", "x"), OK, found("bogus")),
	}
	if v := checkRegisters(ok, "", time.Minute); !v.OK || !strings.Contains(v.Detail, "7 operations on 2 keys") {
		t.Fatalf("a linearizable history: %+v", v)
	}

	// A stale read: b was written and read, then a is read again. The
	// verdict names the key and writes porcupine's visualization.
	dir := t.TempDir()
	stale := append(ok[:4:4], rec(3, 8, get("r0.0"), OK, found("a")))
	v := checkRegisters(stale, dir, time.Minute)
	if v.OK || !strings.Contains(v.Reason, "1 of 1 register keys not linearizable (r0.0)") || len(v.Files) != 1 {
		t.Fatalf("a stale read: %+v", v)
	}
	if data, err := os.ReadFile(v.Files[0]); err != nil || !strings.Contains(string(data), "<html") {
		t.Fatalf("visualization %s: %v", v.Files[0], err)
	}

	// A failed update must not have taken effect.
	phantom := []Record{
		rec(1, 0, put("r1.0", "a"), Failed, wire.Result{}),
		rec(2, 2, get("r1.0"), OK, found("a")),
	}
	if v := checkRegisters(phantom, "", time.Minute); v.OK {
		t.Fatalf("a read of a failed write: %+v", v)
	}
	if v := checkRegisters(nil, "", time.Minute); v.OK {
		t.Fatal("an empty history passed")
	}
	onlyUnknown := []Record{rec(1, 0, put("r1.0", "a"), Unknown, wire.Result{}), rec(2, 2, get("r1.0"), OK, found("a"))}
	if v := checkRegisters(onlyUnknown, "", time.Minute); v.OK || !strings.Contains(v.Reason, "nothing to check") {
		t.Fatalf("a history without acknowledged updates: %+v", v)
	}
}

func TestCheckSets(t *testing.T) {
	base := func() []Record {
		return []Record{
			rec(6, 0, appendOp("a0.0", "6.0"), OK, found("6.0 ")),
			rec(7, 1, appendOp("a0.0", "7.0"), OK, found("6.0 7.0 ")),
			rec(6, 2, get("a0.0"), OK, found("6.0 ")), // a read is checked for being a prefix only
			rec(7, 3, appendOp("a0.0", "7.1"), Unknown, wire.Result{}),
			rec(6, 4, appendOp("a0.0", "6.1"), Failed, wire.Result{}),
			rec(finalClient, 10, get("a0.0"), OK, found("6.0 7.0 7.1 ")),
		}
	}
	if v := checkSets(base()); !v.OK || !strings.Contains(v.Detail, "all 2 acknowledged elements present once, 1 of 1 unknown") {
		t.Fatalf("a good history: %+v", v)
	}
	for _, tc := range []struct {
		name  string
		final string
		want  string
	}{
		{"lost", "6.0 7.1 ", "1 acknowledged elements lost"},
		{"duplicate", "6.0 7.0 7.0 ", "element 7.0 twice"},
		{"invented", "6.0 7.0 9.9 ", "element 9.9 in a0.0's final value was never appended"},
		{"failed but present", "6.0 7.0 6.1 ", "its append was reported not applied"},
		{"reordered", "7.0 6.0 ", "not a prefix of the final value"},
	} {
		h := base()
		h[len(h)-1].Result = found(tc.final)
		if v := checkSets(h); v.OK || !strings.Contains(v.Reason, tc.want) {
			t.Errorf("%s: %+v, want a failure with %q", tc.name, v, tc.want)
		}
	}
	if v := checkSets(base()[:5]); v.OK || !strings.Contains(v.Reason, "no final read of a0.0") {
		t.Errorf("no final read: %+v", v)
	}
}

// A saved history reads back as it was written, and Recheck runs the
// checkers on it.
func TestHistoryRoundTripAndRecheck(t *testing.T) {
	dir := t.TempDir()
	h := []Record{
		rec(1, 0, put("r0.0", "a"), OK, wire.Result{Found: true}),
		rec(2, 2, get("r0.0"), OK, found("a")),
		rec(1, 4, put("r0.0", "b"), Unknown, wire.Result{}),
		rec(1, 12, wire.Op{Kind: wire.OpIncrement, Key: "n0.0", Delta: 1}, OK, found("1")),
		rec(finalClient, 14, get("r0.0"), OK, found("b")),
	}
	h[2].Err = "timed out"
	if err := writeHistory(filepath.Join(dir, "history.jsonl"), h); err != nil {
		t.Fatal(err)
	}
	got, err := readHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("read back %+v\nwrote %+v", got, h)
	}
	var out strings.Builder
	if _, err := Recheck(dir, time.Minute, &out); err != nil || !strings.Contains(out.String(), "registers ok") {
		t.Fatalf("recheck: %v\n%s", err, out.String())
	}
}

// The counter bounds catch a lost and a doubled increment, and accept
// unknown increments counted or not.
func TestCounterBounds(t *testing.T) {
	incr := func(client int, at int64, outcome Outcome, v string) Record {
		return rec(client, at, wire.Op{Kind: wire.OpIncrement, Key: "n0.0", Delta: 1}, outcome, found(v))
	}
	ops := func(rs ...Record) []check.Operation {
		var out []check.Operation
		for _, r := range rs {
			out = append(out, check.Operation{Client: r.Client, Op: r.Op, Call: r.Call, Return: r.Return, Result: r.Result, Unknown: r.Outcome == Unknown})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		h    []check.Operation
		ok   bool
	}{
		{"in order", ops(incr(1, 0, OK, "1"), incr(2, 2, OK, "2"), rec(3, 4, get("n0.0"), OK, found("2"))), true},
		{"an unknown increment counted", ops(incr(1, 0, OK, "1"), incr(2, 2, Unknown, ""), rec(3, 4, get("n0.0"), OK, found("2"))), true},
		{"an unknown increment not counted", ops(incr(1, 0, OK, "1"), incr(2, 2, Unknown, ""), rec(3, 4, get("n0.0"), OK, found("1"))), true},
		{"a lost increment", ops(incr(1, 0, OK, "1"), incr(2, 2, OK, "2"), rec(3, 4, get("n0.0"), OK, found("1"))), false},
		{"a doubled count", ops(incr(1, 0, OK, "1"), incr(2, 0, OK, "1")), false},
		{"a count from nowhere", ops(incr(1, 0, OK, "1"), rec(3, 4, get("n0.0"), OK, found("3"))), false},
	} {
		if ok, why := checkCounterBounds(tc.h); ok != tc.ok {
			t.Errorf("%s: ok %v (%s), want %v", tc.name, ok, why, tc.ok)
		}
	}
}

// The causal verdict passes a causal+, converged history, and fails one
// whose final value goes back on an acknowledged write; a failed run's
// causal history is kept and rechecked.
func TestCheckCausal(t *testing.T) {
	op := func(session int, at int64, o wire.Op, result wire.Result) check.Operation {
		return check.Operation{Client: session, Op: o, Call: at, Return: at + 1, Result: result}
	}
	acked := wire.Result{Found: true}
	good := causalwork.Report{Keys: []string{"c/k0"}, History: []check.Operation{
		op(1, 0, put("c/k0", "a"), acked), op(1, 10, put("c/k0", "b"), acked),
		op(2, 20, get("c/k0"), found("b")), op(1, 30, get("c/k0"), found("b")),
	}}
	good.Final = map[string][]check.Operation{"c/k0": good.History[2:]}
	if v := checkCausal(good); !v.OK {
		t.Fatalf("a good history failed: %s", v.Detail)
	}
	lost := causalwork.Report{Keys: []string{"c/k0"}, History: []check.Operation{
		op(1, 0, put("c/k0", "a"), acked), op(1, 10, put("c/k0", "b"), acked),
		op(2, 20, get("c/k0"), found("a")),
	}}
	lost.Final = map[string][]check.Operation{"c/k0": lost.History[2:]}
	v := checkCausal(lost)
	if v.OK || !strings.Contains(v.Reason, "lost write") {
		t.Fatalf("a lost write passed: %+v", v)
	}
	dir := t.TempDir()
	if err := writeHistory(filepath.Join(dir, "history.jsonl"), nil); err != nil {
		t.Fatal(err)
	}
	if err := writeCausalReport(filepath.Join(dir, causalHistoryFile), lost); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ok, err := Recheck(dir, time.Second, &out)
	if err != nil || ok || !strings.Contains(out.String(), "causal    FAIL") {
		t.Fatalf("recheck: ok %v, err %v, output:\n%s", ok, err, out.String())
	}
}
