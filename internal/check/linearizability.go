// Package check holds the correctness checkers run over simulated and real
// histories: a porcupine model of Catena's key-value operations for
// linearizability, a causal+ (CCv) checker for causal mode (causal.go), and
// the chain invariants of CR §3.
package check

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Operation is one client operation in a history, as the client saw it.
type Operation struct {
	Client int
	Op     wire.Op
	// Call and Return are real (not per-node) times. An operation whose
	// outcome the client never learned has Unknown set: it may or may not
	// have taken effect, at any time after Call.
	Call, Return int64
	Result       wire.Result
	Unknown      bool
}

type output struct {
	result  wire.Result
	unknown bool
}

// state is one key's value in the model; comparable, so porcupine's
// default equality works.
type state struct {
	value  string
	exists bool
}

// Model is the sequential specification of one key, partitioned by key.
// Updates are specified by kv.Apply, the function the head executes.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(wire.Op).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return state{} },
	Step: func(s, in, out any) (bool, any) {
		st, op, o := s.(state), in.(wire.Op), out.(output)
		prior := kv.Object{Value: []byte(st.value), Exists: st.exists}
		if op.Kind.IsQuery() {
			if o.unknown {
				return true, st
			}
			return o.result.Found == st.exists && bytes.Equal(o.result.Value, prior.Value), st
		}
		next, _, result := kv.Apply(op, prior)
		ns := state{value: string(next.Value), exists: next.Exists}
		if o.unknown {
			return true, ns
		}
		return sameResult(result, o.result), ns
	},
	DescribeOperation: func(in, out any) string {
		o := out.(output)
		if o.unknown {
			return fmt.Sprintf("%v → ?", in.(wire.Op))
		}
		return fmt.Sprintf("%v → %s found=%v %q", in.(wire.Op), o.result.Status, o.result.Found, o.result.Value)
	},
	DescribeState: func(s any) string {
		st := s.(state)
		if !st.exists {
			return "absent"
		}
		return fmt.Sprintf("%q", st.value)
	},
}

func sameResult(want, got wire.Result) bool {
	return want.Status == got.Status && want.Found == got.Found && bytes.Equal(want.Value, got.Value)
}

// Linearizable checks a history against Model. The result is
// porcupine.Ok, porcupine.Illegal, or porcupine.Unknown if the check did
// not finish within timeout; callers treat anything but Ok as a failure.
func Linearizable(history []Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	ops := make([]porcupine.Operation, 0, len(history))
	for _, h := range history {
		ret := h.Return
		if h.Unknown {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{
			ClientId: h.Client, Input: h.Op, Call: h.Call,
			Output: output{result: h.Result, unknown: h.Unknown}, Return: ret,
		})
	}
	return porcupine.CheckOperationsVerbose(Model, ops, timeout)
}
