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
	// ID names an update in the replicas' histories (its client and
	// request number), where a simulation can tell whether any replica
	// applied it (Settle); zero when unknown.
	ID UpdateID
}

// UpdateID names an update: the client that asked for it and its
// request number.
type UpdateID struct {
	Client wire.ClientID
	ReqNo  uint64
}

// Settle drops from history the updates of unknown outcome that no
// replica ever applied, as an omniscient observer (a simulation) saw
// them (applied): they took effect nowhere. Each would otherwise cost
// porcupine a branch at every later point of its key's history. (An
// update applied is kept, unbounded: applying is not taking effect, as
// an update a site gave up when it rejoined shows, applied there and
// undone by its restore.)
func Settle(history []Operation, applied map[UpdateID]bool) []Operation {
	out := make([]Operation, 0, len(history))
	for _, h := range history {
		if h.Unknown && !h.Op.Kind.IsQuery() && h.ID != (UpdateID{}) && !applied[h.ID] {
			continue
		}
		out = append(out, h)
	}
	return out
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
	typ    wire.ObjectType
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
		prior := kv.Object{Value: []byte(st.value), Exists: st.exists, Type: st.typ}
		if op.Kind.IsQuery() {
			if o.unknown {
				return true, st
			}
			want := kv.Read(op, prior) // (a hash's fields, decoded as the member does)
			return want.Status == o.result.Status && o.result.Found == st.exists && bytes.Equal(o.result.Value, want.Value) && o.result.Type == want.Type, st
		}
		next, _, result := kv.Apply(op, prior, 0)
		ns := state{value: string(next.Value), exists: next.Exists, typ: next.Type}
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
		if st.typ == wire.TypeHash {
			fields, _ := kv.DecodeFields([]byte(st.value))
			return fmt.Sprintf("hash %v", fields)
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
//
// Operations whose outcome is unknown and whose effect nobody could
// have seen are left out first (unseen): an unknown outcome may be
// placed after every other operation, where it changes nothing the
// history shows, so the history is linearizable with them exactly when
// it is without them. Each costs porcupine a branch at every step
// otherwise, which a fault run with dozens of them on one key turns
// into minutes.
func Linearizable(history []Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	unseen := unseenUnknowns(history)
	ops := make([]porcupine.Operation, 0, len(history))
	for i, h := range history {
		if unseen[i] {
			continue
		}
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

// unseenUnknowns returns the operations of unknown outcome whose effect
// no operation of the history can have observed: queries, and writes
// of a value nobody read or compared with, on a key that no increment,
// append or delete touches and that a write known to have succeeded
// created before the unknown write was called (so that the write
// changed the key's value only, never whether it exists, which a put's
// or a compare-and-set's answer also tells).
func unseenUnknowns(history []Operation) map[int]bool {
	type keyFacts struct {
		derived      bool  // an increment, append or delete touches the key
		createdBy    int64 // when the first write known to succeed returned
		created      bool
		valuesSeen   map[string]bool
		unknownWrite []int
	}
	keys := map[string]*keyFacts{}
	out := map[int]bool{}
	for i, h := range history {
		k := keys[h.Op.Key]
		if k == nil {
			k = &keyFacts{valuesSeen: map[string]bool{}}
			keys[h.Op.Key] = k
		}
		switch h.Op.Kind {
		case wire.OpIncrement, wire.OpAppend, wire.OpDelete:
			k.derived = true
		case wire.OpCompareAndSet:
			k.valuesSeen[string(h.Op.Expected)] = true
		}
		switch {
		case h.Unknown && h.Op.Kind.IsQuery():
			out[i] = true
		case h.Unknown:
			k.unknownWrite = append(k.unknownWrite, i)
		case h.Result.Found:
			k.valuesSeen[string(h.Result.Value)] = true
		}
		creates := h.Op.Kind == wire.OpPut || h.Op.Kind == wire.OpCompareAndSet || h.Op.Kind == wire.OpSwap
		if creates && !h.Unknown && h.Result.Status == wire.StatusOK && (!k.created || h.Return < k.createdBy) {
			k.created, k.createdBy = true, h.Return
		}
	}
	for _, k := range keys {
		if k.derived || !k.created {
			continue
		}
		for _, i := range k.unknownWrite {
			h := history[i]
			switch h.Op.Kind {
			case wire.OpPut, wire.OpCompareAndSet, wire.OpSwap, wire.OpReplace:
				if h.Call > k.createdBy && !k.valuesSeen[string(h.Op.Value)] {
					out[i] = true
				}
			}
		}
	}
	return out
}
