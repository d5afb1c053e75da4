package torture

import (
	"fmt"
	"strconv"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// checkCounterBounds checks a counter key's history (increments by 1 and
// reads) the way Jepsen's counter checker does, for the keys porcupine
// cannot decide in time: many increments of unknown outcome make its
// search exponential. It is weaker than linearizability but catches a
// lost or doubled increment: every value a read or an acknowledged
// increment returned must count at least the acknowledged increments
// that ended before it began, and at most the increments (acknowledged
// or unknown) that began before it ended; and no two acknowledged
// increments may return the same value.
func checkCounterBounds(ops []check.Operation) (bool, string) {
	type incr struct{ call, ret int64 }
	var acked, started []incr
	for _, op := range ops {
		switch op.Op.Kind {
		case wire.OpIncrement:
			if op.Op.Delta != 1 {
				return false, fmt.Sprintf("increment by %d: the bounds check takes increments by 1", op.Op.Delta)
			}
			started = append(started, incr{op.Call, op.Return})
			if !op.Unknown {
				acked = append(acked, incr{op.Call, op.Return})
			}
		case wire.OpGet:
		default:
			return false, fmt.Sprintf("a %v: not a counter", op.Op.Kind)
		}
	}
	seen := map[int64]bool{}
	for _, op := range ops {
		if op.Unknown {
			continue
		}
		v := int64(0)
		if op.Result.Found {
			n, err := strconv.ParseInt(string(op.Result.Value), 10, 64)
			if err != nil {
				return false, fmt.Sprintf("value %q is not a count", op.Result.Value)
			}
			v = n
		}
		lo, hi := int64(0), int64(0)
		for _, a := range acked {
			if a.ret < op.Call {
				lo++
			}
		}
		for _, s := range started {
			if s.call < op.Return {
				hi++
			}
		}
		if op.Op.Kind == wire.OpIncrement {
			lo++ // its own
			if seen[v] {
				return false, fmt.Sprintf("two acknowledged increments returned %d", v)
			}
			seen[v] = true
		}
		if v < lo || v > hi {
			return false, fmt.Sprintf("%v at [%d, %d] ns returned %d, outside [%d, %d]", op.Op.Kind, op.Call, op.Return, v, lo, hi)
		}
	}
	return true, ""
}
