package check

import (
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
