package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// The proxy checker passes a history whose final values are the last
// acknowledged SETs (or an unknown one's), and fails one that loses an
// acknowledged SET: the key missing at the end, or back to a value
// written before the lost SET began; or ends on a value nobody wrote.
func TestCheckProxy(t *testing.T) {
	set := func(client int, at int64, key, value string, outcome Outcome) Record {
		r := rec(client, at, put(key, value), outcome, wire.Result{})
		if outcome == OK {
			r.Result = wire.Result{Found: true}
		}
		return r
	}
	final := func(at int64, key string, result wire.Result) Record {
		return rec(finalClient, at, get(key), OK, result)
	}
	base := func() []Record {
		return []Record{
			set(100, 0, "x0.0", "p100.0", OK),
			rec(101, 2, get("x0.0"), OK, found("p100.0")),
			set(101, 4, "x0.0", "p101.1", OK),
			// Errors while the proxy restarts: a failed GET, an unknown
			// SET (it may take effect later), a SET refused before it
			// was sent.
			rec(100, 6, get("x0.0"), Failed, wire.Result{}),
			set(100, 8, "x0.0", "p100.2", Unknown),
			set(101, 10, "x0.0", "p101.3", Failed),
			set(100, 0, "x1.0", "p100.9", OK),
		}
	}
	for _, tc := range []struct {
		name    string
		finals  []Record
		problem string
	}{
		{"the last acknowledged SET", []Record{final(20, "x0.0", found("p101.1")), final(20, "x1.0", found("p100.9"))}, ""},
		{"an unknown SET took effect", []Record{final(20, "x0.0", found("p100.2")), final(20, "x1.0", found("p100.9"))}, ""},
		{"an acknowledged key missing", []Record{final(20, "x0.0", found("p101.1")), final(20, "x1.0", wire.Result{})},
			"1 acknowledged SETs lost; acknowledged SET x1.0 p100.9 (at 0s) lost: the key is missing at the end"},
		{"back to an older value", []Record{final(20, "x0.0", found("p100.0")), final(20, "x1.0", found("p100.9"))},
			"1 acknowledged SETs lost; acknowledged SET x0.0 p101.1 (at 4ms) lost: the final value \"p100.0\" is that of a SET that returned before it began"},
		{"a SET reported failed took effect", []Record{final(20, "x0.0", found("p101.3")), final(20, "x1.0", found("p100.9"))},
			"x0.0's final value \"p101.3\" was never written by a SET (or its SET was reported failed)"},
		{"no final read", []Record{final(20, "x0.0", found("p101.1"))}, "no final read of x1.0"},
	} {
		v := checkProxy(append(base(), tc.finals...), time.Minute)
		switch {
		case tc.problem == "" && !v.OK:
			t.Errorf("%s: %+v", tc.name, v)
		case tc.problem != "" && (v.OK || !strings.HasPrefix(v.Reason, tc.problem)):
			t.Errorf("%s: reason %q, want %q", tc.name, v.Reason, tc.problem)
		}
	}
	// A stale read during the run: linearizability catches it.
	stale := append(base(), rec(100, 5, get("x0.0"), OK, found("p100.0")), rec(101, 7, get("x0.0"), OK, found("p100.0")),
		final(20, "x0.0", found("p101.1")), final(20, "x1.0", found("p100.9")))
	stale[2].Call, stale[2].Return = int64(3*time.Millisecond), int64(4*time.Millisecond)
	if v := checkProxy(stale, time.Minute); v.OK || !strings.Contains(v.Reason, "not linearizable (x0.0)") {
		t.Errorf("a stale read: %+v", v)
	}
	if v := checkProxy(nil, time.Minute); v.OK {
		t.Error("an empty history passed")
	}
}
