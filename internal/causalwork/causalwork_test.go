package causalwork

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// The checks find what they are meant to find (no processes: histories
// written by hand).
func TestCausalFindings(t *testing.T) {
	put := func(session int, key, value string, call int64, acked bool) check.Operation {
		op := check.Operation{Client: session, Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, Call: call, Return: call + 1}
		if acked {
			op.Result.Found = true
		} else {
			op.Unknown, op.Return = true, 0
		}
		return op
	}
	get := func(session int, key, value string, call int64) check.Operation {
		op := check.Operation{Client: session, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: call, Return: call + 1}
		if value != "" {
			op.Result.Found, op.Result.Value = true, []byte(value)
		}
		return op
	}
	tests := []struct {
		name     string
		history  []check.Operation
		final    []int // indexes in history of the final reads
		problems []string
		want     []string // substrings of the findings, in order; none: no finding
	}{
		{name: "converged on the last acknowledged write", history: []check.Operation{
			put(1, "x", "a", 0, true), put(1, "x", "b", 10, true),
			get(2, "x", "a", 5), get(2, "x", "b", 30), get(1, "x", "b", 30),
		}, final: []int{3, 4}},
		{name: "a maybe-applied later write may win", history: []check.Operation{
			put(1, "x", "a", 0, true), put(1, "x", "b", 10, false),
			get(2, "x", "b", 30),
		}, final: []int{2}},
		{name: "a concurrent write of another session may win", history: []check.Operation{
			put(1, "x", "a", 0, true), put(2, "x", "b", 0, true),
			get(3, "x", "b", 30),
		}, final: []int{2}},
		{name: "final value older than the session's last acknowledged write", history: []check.Operation{
			put(1, "x", "a", 0, true), put(1, "x", "b", 10, true),
			get(2, "x", "a", 30),
		}, final: []int{2}, want: []string{`lost write: x="b" acknowledged in session 1 after its write of the final value "a"`}},
		{name: "final value absent after an acknowledged write", history: []check.Operation{
			put(1, "x", "a", 0, true),
			get(2, "x", "", 30),
		}, final: []int{1}, want: []string{`lost write: x="a" acknowledged in session 1, final value ⊥`}},
		{name: "sessions read different final values", history: []check.Operation{
			put(1, "x", "a", 0, true), put(2, "x", "b", 0, true),
			get(1, "x", "a", 30), get(2, "x", "b", 30),
		}, final: []int{2, 3}, want: []string{`no convergence on x: session 1 reads "a", session 2 reads "b"`}},
		{name: "a session reads back past its own write", history: []check.Operation{
			put(1, "x", "a", 0, true), put(1, "x", "b", 10, true),
			get(1, "x", "a", 30),
		}, final: []int{2}, want: []string{"not causal+ (WriteCORead)", "lost write"}},
		{name: "a refused read is reported", history: []check.Operation{
			put(1, "x", "a", 0, true), get(1, "x", "a", 30),
		}, final: []int{1}, problems: []string{"get x in session 1: unknown version"}, want: []string{"unknown version"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			final := map[string][]check.Operation{}
			for _, i := range tc.final {
				final["x"] = append(final["x"], tc.history[i])
			}
			got := Report{History: tc.history, Final: final, Problems: tc.problems, Keys: []string{"x"}}.Findings()
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d is %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
