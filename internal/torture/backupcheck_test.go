package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/backup"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

func cas(key, expected, value string) wire.Op {
	return wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: []byte(expected), Value: []byte(value)}
}
func incr(key string) wire.Op { return wire.Op{Kind: wire.OpIncrement, Key: key, Delta: 1} }

var acked = wire.Result{Found: true}

// The backup checker on small histories, the backup's window from 100 to
// 200 ms: each case gives the history, what the backup holds, and the
// finding expected ("": none).
func TestCheckBackupContents(t *testing.T) {
	ms := int64(time.Millisecond)
	win := backupWindow{Begin: 100 * ms, End: 200 * ms}
	// A register written before, during and after the window.
	register := []Record{
		rec(1, 10, put("r0.0", "a"), OK, acked),
		rec(2, 50, put("r0.0", "b"), OK, acked),
		rec(1, 150, put("r0.0", "c"), OK, acked),
		rec(2, 250, put("r0.0", "d"), OK, acked),
	}
	// Two writes concurrent with each other, both acknowledged before the
	// window: either may be the last.
	concurrent := []Record{
		{Client: 1, Op: put("r1.0", "x"), Call: 10 * ms, Return: 60 * ms, Outcome: OK, Result: acked},
		{Client: 2, Op: put("r1.0", "y"), Call: 20 * ms, Return: 50 * ms, Outcome: OK, Result: acked},
	}
	counter := []Record{
		rec(1, 10, incr("n0.0"), OK, found("1")),
		rec(2, 20, incr("n0.0"), OK, found("2")),
		rec(3, 30, incr("n0.0"), Unknown, wire.Result{}),
		rec(1, 150, incr("n0.0"), OK, found("4")),
		rec(2, 250, incr("n0.0"), OK, found("5")),
		rec(finalClient, 300, get("n0.0"), OK, found("5")),
	}
	set := []Record{
		rec(5, 10, appendOp("a0.0", "5.1"), OK, found("5.1 ")),
		rec(6, 20, appendOp("a0.0", "6.1"), Unknown, wire.Result{}),
		rec(5, 30, appendOp("a0.0", "5.2"), OK, found("5.1 6.1 5.2 ")),
		rec(6, 150, appendOp("a0.0", "6.2"), OK, found("5.1 6.1 5.2 6.2 ")),
		rec(5, 250, appendOp("a0.0", "5.3"), OK, found("5.1 6.1 5.2 6.2 5.3 ")),
		rec(6, 260, appendOp("a0.0", "6.3"), Failed, wire.Result{}),
		rec(finalClient, 300, get("a0.0"), OK, found("5.1 6.1 5.2 6.2 5.3 ")),
	}
	causal := []check.Operation{
		{Client: 1, Op: put("c/k0", "c1.1"), Call: 10 * ms, Return: 11 * ms, Result: acked},
		{Client: 2, Op: put("c/k0", "c2.1"), Call: 250 * ms, Return: 251 * ms, Result: acked},
	}
	for _, tc := range []struct {
		name     string
		history  []Record
		contents map[string]string
		want     string
	}{
		{"the last write before the window", register, map[string]string{"r0.0": "b"}, ""},
		{"a write in the window", register, map[string]string{"r0.0": "c"}, ""},
		{"a write overwritten before the window", register, map[string]string{"r0.0": "a"},
			`r0.0 = "a", written by the put of "a" (client 1), acknowledged, between 10ms and 11ms, but overwritten before the backup began at 100ms: then came the put of "b" (client 2), acknowledged, between 50ms and 51ms`},
		{"a write called after the window", register, map[string]string{"r0.0": "d"},
			`r0.0 = "d", written by the put of "d" (client 2), acknowledged, between 250ms and 251ms, after the backup ended at 200ms`},
		{"a value no client wrote", register, map[string]string{"r0.0": "z"}, `r0.0 = "z": no client wrote this value`},
		{"a register acknowledged before the window, missing", register, map[string]string{},
			`r0.0 missing, though the put of "a" (client 1), acknowledged, between 10ms and 11ms showed it existing before the backup began at 100ms`},
		{"either of two concurrent writes", concurrent, map[string]string{"r1.0": "x"}, ""},
		{"the other of two concurrent writes", concurrent, map[string]string{"r1.0": "y"}, ""},
		{"the earlier of two writes, a read of the later before the window", append(concurrent[:2:2], rec(3, 70, get("r1.0"), OK, found("y"))),
			map[string]string{"r1.0": "x"}, `overwritten before the backup began at 100ms: then came the get (client 3) between 70ms and 71ms, which read "y"`},
		{"a register only an unknown write may have created, missing", []Record{rec(1, 10, put("r2.0", "a"), Unknown, wire.Result{})}, map[string]string{}, ""},
		{"a register only an unknown write may have created, held", []Record{rec(1, 10, put("r2.0", "a"), Unknown, wire.Result{})}, map[string]string{"r2.0": "a"}, ""},
		{"a value whose write was reported not applied", []Record{rec(1, 10, put("r2.0", "a"), Failed, wire.Result{})}, map[string]string{"r2.0": "a"},
			`r2.0 = "a", but the put of "a" (client 1) called at 10ms was reported not applied`},
		{"a compare-and-set that failed", []Record{rec(1, 10, put("r2.0", "a"), OK, acked), rec(2, 20, cas("r2.0", "z", "b"), OK, wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("a")})},
			map[string]string{"r2.0": "b"}, `r2.0 = "b", but the cas of "b" (client 2) between 20ms and 21ms, which failed its compare, finding "a"`},
		{"a compare-and-set that swapped", []Record{rec(1, 10, put("r2.0", "a"), OK, acked), rec(2, 20, cas("r2.0", "a", "b"), OK, acked)},
			map[string]string{"r2.0": "b"}, ""},

		{"a count in bounds", counter, map[string]string{"n0.0": "3"}, ""},
		{"a count with the unknown increment", counter, map[string]string{"n0.0": "2"}, ""},
		{"a count with the increment in the window", counter, map[string]string{"n0.0": "4"}, ""},
		{"a count below the acknowledged increments", counter, map[string]string{"n0.0": "1"},
			"n0.0 = 1, below 2: the 2 increments acknowledged before the backup began at 100ms"},
		{"a count with an increment called after the window", counter, map[string]string{"n0.0": "5"},
			"n0.0 = 5, above 4: the 4 increments called before the backup ended at 200ms"},
		{"a count below what a read before the window saw", append(counter[:3:3], rec(3, 60, get("n0.0"), OK, found("3"))), map[string]string{"n0.0": "2"},
			`n0.0 = 2, below 3: the count seen by the get (client 3) between 60ms and 61ms, which read "3", before the backup began at 100ms`},
		{"a count above what a read after the window saw", []Record{
			rec(1, 10, incr("n1.0"), OK, found("1")),
			rec(2, 30, incr("n1.0"), Unknown, wire.Result{}),
			rec(3, 210, get("n1.0"), OK, found("1")),
		}, map[string]string{"n1.0": "2"}, `n1.0 = 2, above 1: the count seen by the get (client 3) between 210ms and 211ms, which read "1", after the backup ended at 200ms`},
		{"a count above what an increment after the window saw", []Record{
			rec(1, 10, incr("n1.0"), OK, found("1")),
			rec(2, 30, incr("n1.0"), Unknown, wire.Result{}),
			rec(3, 210, incr("n1.0"), OK, found("2")),
		}, map[string]string{"n1.0": "2"}, `n1.0 = 2, above 1: the count before the incr (client 3), acknowledged, between 210ms and 211ms, after the backup ended at 200ms`},
		{"a counter missing", counter, map[string]string{}, "n0.0 missing, though the incr (client 1), acknowledged, between 10ms and 11ms showed it existing before the backup began at 100ms"},
		{"not a count", counter, map[string]string{"n0.0": "x"}, `n0.0 = "x": not a count`},

		{"a set as before the window", set, map[string]string{"a0.0": "5.1 6.1 5.2 "}, ""},
		{"a set as in the window", set, map[string]string{"a0.0": "5.1 6.1 5.2 6.2 "}, ""},
		{"a set without an acknowledged element", set, map[string]string{"a0.0": "5.1 6.1 "},
			`a0.0 = "5.1 6.1 ": lacks element 5.2, which the append of "5.2 " (client 5), acknowledged, between 30ms and 31ms saw before the backup began at 100ms`},
		{"a set with an element appended after the window", set, map[string]string{"a0.0": "5.1 6.1 5.2 6.2 5.3 "},
			`element 5.3 appended by the append of "5.3 " (client 5), acknowledged, between 250ms and 251ms, after the backup ended at 200ms`},
		{"a set with an element whose append failed", set, map[string]string{"a0.0": "5.1 6.1 5.2 6.3 "}, `element 6.3, but the append of "6.3 " (client 6) called at 260ms was reported not applied`},
		{"a set with an element twice", set, map[string]string{"a0.0": "5.1 6.1 5.2 5.2 "}, "element 5.2 twice"},
		{"a set not a prefix of the final value", set, map[string]string{"a0.0": "5.1 5.2 6.1 "}, `a0.0 = "5.1 5.2 6.1 ": not in the order of "5.1 6.1 5.2 ", which the append of "5.2 " (client 5), acknowledged, between 30ms and 31ms saw before`},
		{"a set missing", set, map[string]string{}, "a0.0 missing"},
		{"a set with an unknown append the later reads lack", append(set[:6:6], rec(finalClient, 300, get("a0.0"), OK, found("5.1 5.2 6.2 5.3 "))), map[string]string{"a0.0": "5.1 6.1 5.2 "},
			`a0.0 = "5.1 6.1 5.2 ": element 6.1 is not in what the get (final read) between 300ms and 301ms, which read "5.1 5.2 6.2 5.3 " saw after the backup ended at 200ms`},
		{"a set a read after the window found absent", []Record{rec(6, 20, appendOp("a1.0", "6.1"), Unknown, wire.Result{}), rec(finalClient, 300, get("a1.0"), OK, wire.Result{})},
			map[string]string{"a1.0": "6.1 "}, `a1.0 = "6.1 ", but the get (final read) between 300ms and 301ms, which read nothing after the backup ended at 200ms`},

		{"a causal value", nil, map[string]string{"c/k0": "c1.1"}, ""},
		{"a causal key missing", nil, map[string]string{}, `c/k0 missing, though a put acknowledged at 11ms, before the backup began at 100ms, wrote it`},
		{"a causal value written after the window", nil, map[string]string{"c/k0": "c2.1"}, `c/k0 = "c2.1", written by a put called at 250ms, after the backup ended at 200ms`},
		{"a causal value never written", nil, map[string]string{"c/k0": "c9.9"}, "no causal session wrote this value"},

		{"a key no client wrote", nil, map[string]string{"r9.0": "a"}, `r9.0 = "a": no client wrote this key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contents := map[string][]byte{}
			for k, v := range tc.contents {
				contents[k] = []byte(v)
			}
			var causalOps []check.Operation
			if strings.HasPrefix(tc.name, "a causal") {
				causalOps = causal
			}
			rep := checkBackupContents(tc.history, causalOps, win, contents)
			got := strings.Join(rep.Problems, "; ")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("found %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("found %q, want a finding containing %q", got, tc.want)
			case tc.want != "" && len(rep.Problems) != 1:
				t.Errorf("found %d problems, want 1: %s", len(rep.Problems), got)
			}
		})
	}
}

// The restored cluster must hold exactly the backup's keys and values.
func TestCompareRestored(t *testing.T) {
	backedUp := map[string][]byte{"r0.0": []byte("a"), "r1.0": []byte("b"), "n0.0": []byte("3")}
	if d := compareRestored(backedUp, map[string][]byte{"r0.0": []byte("a"), "r1.0": []byte("b"), "n0.0": []byte("3")}); len(d) != 0 {
		t.Errorf("the same contents: %v", d)
	}
	d := compareRestored(backedUp, map[string][]byte{"r0.0": []byte("a"), "n0.0": []byte("4"), "r2.0": []byte("c")})
	want := []string{`n0.0 = "4", the backup holds "3"`, `r1.0 missing (the backup holds "b")`, `r2.0 = "c", not in the backup`}
	if strings.Join(d, "|") != strings.Join(want, "|") {
		t.Errorf("differences %q, want %q", d, want)
	}
}

// A backup's window narrows to when its volumes were frozen, mapped to
// the history's clock and widened by a margin, and never beyond the
// backup's own bounds.
func TestFrozenWindow(t *testing.T) {
	ms := int64(time.Millisecond)
	wall := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	win := backupWindow{Begin: 1000 * ms, End: 1500 * ms}
	m := backup.Manifest{FrozenFrom: wall.Add(100 * time.Millisecond), FrozenTo: wall.Add(105 * time.Millisecond)}
	if got := frozenWindow(win, 1000*ms, wall, m); got != (backupWindow{Begin: 1098 * ms, End: 1107 * ms}) {
		t.Errorf("narrowed to %v", got)
	}
	if got := frozenWindow(win, 1000*ms, wall, backup.Manifest{}); got != win {
		t.Errorf("a manifest without a frozen window: %v", got)
	}
	m = backup.Manifest{FrozenFrom: wall.Add(-time.Second), FrozenTo: wall.Add(time.Hour)}
	if got := frozenWindow(win, 1000*ms, wall, m); got != win {
		t.Errorf("a frozen window wider than the backup's: %v", got)
	}
}
