package torture

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// The backup checker (-backup): what a backup holds, or the cluster it
// was restored into, against the history.
//
// A backup reads each volume as one state frozen at its tail at some
// moment between the manifest's Started and Finished (internal/backup):
// every key's value in it is the value the key held at that moment. So
// a key's value must be one the history allows the key to have held at
// some moment of the window, and a key the history shows existing before
// the window began must be there: the workloads never delete a key and
// set no deadline (a key with one would need the deadline's bounds too),
// so a key that existed once exists ever after. The check is per key;
// that all keys of a volume come from one moment is not checked.

// backupWindow bounds one backup in the history's time (nanoseconds
// since the fault phase began): Begin was read before backup.Run took
// the manifest's Started, End after it returned with Finished, so the
// window holds [Started, Finished] and the check is, if anything, a
// little lenient.
type backupWindow struct{ Begin, End int64 }

// backupReport is what checkBackupContents found.
type backupReport struct {
	// Keys counts the keys checked: those held, and those the history
	// wrote before the window ended; Held those held; Required those the
	// history shows existing before the window began.
	Keys, Held, Required int
	Problems             []string
}

// checkBackupContents checks contents, the keys and values one backup
// holds (or the cluster it was restored into), against history (the
// register, counter and set workloads' records) and causal (the causal
// workload's operations), for the backup taken in win. Per workload:
//
//   - Registers (unique values written by puts and compare-and-sets): a
//     value must be one a write (not failed, not a compare that failed)
//     of that key called before the window ended wrote; and if that write
//     was acknowledged, no acknowledged operation called after it
//     returned and returned before the window began may have written or
//     seen another value (the value was then certainly overwritten before
//     the window: values are unique and a write takes effect once).
//   - Counters (increments by one): the count c (absent: 0) must be at
//     least the increments acknowledged before the window began and every
//     count seen by an operation that returned before it began, and at
//     most the increments (acknowledged or unknown) called before it
//     ended and every count seen by an operation called after it ended
//     (one less for an increment's own result).
//   - Sets (appends of unique elements): every element must have been
//     appended to that key by an append (not failed) called before the
//     window ended, none twice; every value an operation that returned
//     before the window began saw (an append's result, a read) must be a
//     prefix of the value, and the value a prefix of every value an
//     operation called after it ended saw (the final read's included).
//   - Any of these keys must be held if an acknowledged operation that
//     returned before the window began shows it existing (a write that
//     took effect, a read or a compare that found it).
//   - Causal keys: a value must be one a put (acknowledged or unknown)
//     of that key called before the window ended wrote (concurrent
//     sessions' puts make "the latest" a matter of their stamps, left to
//     the causal checker), and a key a put acknowledged before the
//     window began must be held: a backup reads a causal volume at the
//     member that answers its writes, the k-th (docs/adr/0030).
//
// Any other key held is one no client wrote.
func checkBackupContents(history []Record, causal []check.Operation, win backupWindow, contents map[string][]byte) backupReport {
	var rep backupReport
	byKey := map[string][]Record{}
	for _, r := range history {
		byKey[r.Op.Key] = append(byKey[r.Op.Key], r)
	}
	causalPuts := map[string][]check.Operation{}
	for _, op := range causal {
		if op.Op.Kind == wire.OpPut {
			causalPuts[op.Op.Key] = append(causalPuts[op.Op.Key], op)
		}
	}
	keys := map[string]bool{}
	for k := range contents {
		keys[k] = true
	}
	for k, recs := range byKey {
		if slices.ContainsFunc(recs, func(r Record) bool { return r.mayTakeEffect() && r.Call < win.End }) {
			keys[k] = true
		}
	}
	for k, ops := range causalPuts {
		if slices.ContainsFunc(ops, func(op check.Operation) bool { return op.Call < win.End }) {
			keys[k] = true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		rep.Keys++
		value, held := contents[key]
		if held {
			rep.Held++
		}
		var problem string
		switch recs := byKey[key]; {
		case strings.HasPrefix(key, causalPrefix):
			problem = checkCausalHeld(key, value, held, causalPuts[key], win)
		case len(recs) == 0:
			problem = fmt.Sprintf("%s = %s: no client wrote this key", key, short(value))
		default:
			if existed := existedBefore(recs, win); existed != nil {
				rep.Required++
				if !held {
					problem = fmt.Sprintf("%s missing, though the %s showed it existing before the backup began at %s", key, existed.describe(), at(win.Begin))
					break
				}
			}
			if !held {
				break
			}
			switch {
			case strings.HasPrefix(key, registerPrefix):
				problem = checkRegisterHeld(key, value, recs, win)
			case strings.HasPrefix(key, counterPrefix):
				problem = checkCounterHeld(key, value, recs, win)
			case strings.HasPrefix(key, setPrefix):
				problem = checkSetHeld(key, value, recs, win)
			default:
				problem = fmt.Sprintf("%s = %s: a key of no workload", key, short(value))
			}
		}
		if problem != "" {
			rep.Problems = append(rep.Problems, problem)
		}
	}
	return rep
}

// existedBefore returns an acknowledged record that returned before the
// window began and shows its key existing, or nil.
func existedBefore(recs []Record, win backupWindow) *Record {
	for i, r := range recs {
		if r.Return < win.Begin && r.showsExisting() {
			return &recs[i]
		}
	}
	return nil
}

// checkRegisterHeld checks a register's value (see checkBackupContents).
func checkRegisterHeld(key string, value []byte, recs []Record, win backupWindow) string {
	var w *Record
	for i, r := range recs {
		if (r.Op.Kind == wire.OpPut || r.Op.Kind == wire.OpCompareAndSet) && bytes.Equal(r.Op.Value, value) {
			w = &recs[i]
			break
		}
	}
	switch {
	case w == nil:
		return fmt.Sprintf("%s = %s: no client wrote this value", key, short(value))
	case !w.mayTakeEffect():
		return fmt.Sprintf("%s = %s, but the %s", key, short(value), w.describe())
	case w.Call >= win.End:
		return fmt.Sprintf("%s = %s, written by the %s, after the backup ended at %s", key, short(value), w.describe(), at(win.End))
	case w.Outcome != OK:
		return "" // an unknown write may take effect at any time after its call
	}
	for _, o := range recs {
		if o.Call <= w.Return || o.Return >= win.Begin {
			continue
		}
		if v, found, known := o.valueAfter(); known && found && !bytes.Equal(v, value) {
			return fmt.Sprintf("%s = %s, written by the %s, but overwritten before the backup began at %s: then came the %s",
				key, short(value), w.describe(), at(win.Begin), o.describe())
		}
	}
	return ""
}

// checkCounterHeld checks a counter's count (see checkBackupContents).
func checkCounterHeld(key string, value []byte, recs []Record, win backupWindow) string {
	c, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return fmt.Sprintf("%s = %s: not a count", key, short(value))
	}
	lo, hi := int64(0), int64(0)
	var loWhy, hiWhy string
	raise := func(n int64, why string) {
		if n > lo {
			lo, loWhy = n, why
		}
	}
	lower := func(n int64, why string) {
		if n < hi {
			hi, hiWhy = n, why
		}
	}
	acked := int64(0)
	for _, r := range recs {
		if r.Op.Kind == wire.OpIncrement && r.mayTakeEffect() && r.Call < win.End {
			hi++
		}
		if r.Op.Kind == wire.OpIncrement && r.tookEffect() && r.Return < win.Begin {
			acked++
		}
	}
	hiWhy = fmt.Sprintf("the %d increments called before the backup ended at %s", hi, at(win.End))
	raise(acked, fmt.Sprintf("the %d increments acknowledged before the backup began at %s", acked, at(win.Begin)))
	for _, r := range recs {
		v, found, known := r.valueAfter()
		if !known {
			continue
		}
		n := int64(0)
		if found {
			if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				continue // the history's checkers judge that
			}
		}
		switch {
		case r.Return < win.Begin:
			raise(n, fmt.Sprintf("the count seen by the %s, before the backup began at %s", r.describe(), at(win.Begin)))
		case r.Call > win.End && r.Op.Kind == wire.OpIncrement:
			lower(n-1, fmt.Sprintf("the count before the %s, after the backup ended at %s", r.describe(), at(win.End)))
		case r.Call > win.End:
			lower(n, fmt.Sprintf("the count seen by the %s, after the backup ended at %s", r.describe(), at(win.End)))
		}
	}
	switch {
	case c < lo:
		return fmt.Sprintf("%s = %d, below %d: %s", key, c, lo, loWhy)
	case c > hi:
		return fmt.Sprintf("%s = %d, above %d: %s", key, c, hi, hiWhy)
	}
	return ""
}

// checkSetHeld checks a set's value (see checkBackupContents).
func checkSetHeld(key string, value []byte, recs []Record, win backupWindow) string {
	appends := map[string]*Record{} // by element
	for i, r := range recs {
		if r.Op.Kind == wire.OpAppend {
			appends[strings.TrimSpace(string(r.Op.Value))] = &recs[i]
		}
	}
	seen := map[string]bool{}
	for _, e := range strings.Fields(string(value)) {
		a := appends[e]
		switch {
		case seen[e]:
			return fmt.Sprintf("%s = %s: element %s twice", key, short(value), e)
		case a == nil:
			return fmt.Sprintf("%s = %s: element %s never appended to this key", key, short(value), e)
		case !a.mayTakeEffect():
			return fmt.Sprintf("%s = %s: element %s, but the %s", key, short(value), e, a.describe())
		case a.Call >= win.End:
			return fmt.Sprintf("%s = %s: element %s appended by the %s, after the backup ended at %s", key, short(value), e, a.describe(), at(win.End))
		}
		seen[e] = true
	}
	for _, r := range recs {
		v, found, known := r.valueAfter()
		switch {
		case !known:
		case r.Return < win.Begin && !bytes.HasPrefix(value, v):
			if e := firstMissing(v, value); e != "" {
				return fmt.Sprintf("%s = %s: lacks element %s, which the %s saw before the backup began at %s", key, short(value), e, r.describe(), at(win.Begin))
			}
			return fmt.Sprintf("%s = %s: not in the order of %s, which the %s saw before the backup began at %s", key, short(value), short(v), r.describe(), at(win.Begin))
		case r.Call > win.End && !found:
			return fmt.Sprintf("%s = %s, but the %s after the backup ended at %s", key, short(value), r.describe(), at(win.End))
		case r.Call > win.End && !bytes.HasPrefix(v, value):
			if e := firstMissing(value, v); e != "" {
				return fmt.Sprintf("%s = %s: element %s is not in what the %s saw after the backup ended at %s", key, short(value), e, r.describe(), at(win.End))
			}
			return fmt.Sprintf("%s = %s: not in the order of %s, which the %s saw after the backup ended at %s", key, short(value), short(v), r.describe(), at(win.End))
		}
	}
	return ""
}

// firstMissing returns the first element of the set value a that the
// set value b lacks, or "".
func firstMissing(a, b []byte) string {
	in := map[string]bool{}
	for _, e := range strings.Fields(string(b)) {
		in[e] = true
	}
	for _, e := range strings.Fields(string(a)) {
		if !in[e] {
			return e
		}
	}
	return ""
}

// checkCausalHeld checks a causal key (see checkBackupContents).
func checkCausalHeld(key string, value []byte, held bool, puts []check.Operation, win backupWindow) string {
	if !held {
		for _, p := range puts {
			if !p.Unknown && p.Return < win.Begin {
				return fmt.Sprintf("%s missing, though a put acknowledged at %s, before the backup began at %s, wrote it", key, at(p.Return), at(win.Begin))
			}
		}
		return ""
	}
	for _, p := range puts {
		if !bytes.Equal(p.Op.Value, value) {
			continue
		}
		if p.Call >= win.End {
			return fmt.Sprintf("%s = %s, written by a put called at %s, after the backup ended at %s", key, short(value), at(p.Call), at(win.End))
		}
		return ""
	}
	return fmt.Sprintf("%s = %s: no causal session wrote this value", key, short(value))
}

// tookEffect reports whether r is an update that certainly took effect.
func (r Record) tookEffect() bool {
	if r.Outcome != OK || r.Op.Kind.IsQuery() {
		return false
	}
	switch r.Op.Kind {
	case wire.OpCompareAndSet, wire.OpIncrement:
		return r.Result.Status == wire.StatusOK
	}
	return true
}

// mayTakeEffect reports whether r is an update that took effect or may
// have: one of unknown outcome may, at any time after its call.
func (r Record) mayTakeEffect() bool {
	return r.tookEffect() || r.Outcome == Unknown && !r.Op.Kind.IsQuery()
}

// showsExisting reports whether r, acknowledged, shows its key existing.
func (r Record) showsExisting() bool {
	return r.Outcome == OK && (r.tookEffect() || r.Result.Found)
}

// valueAfter returns what r, acknowledged, tells of its key's value
// right after it took effect (found false: absent); known is false when
// it tells nothing.
func (r Record) valueAfter() (value []byte, found, known bool) {
	if r.Outcome != OK {
		return nil, false, false
	}
	switch r.Op.Kind {
	case wire.OpPut:
		return r.Op.Value, true, true
	case wire.OpCompareAndSet:
		if r.Result.Status == wire.StatusOK {
			return r.Op.Value, true, true
		}
		return r.Result.Value, r.Result.Found, true
	case wire.OpGet:
		return r.Result.Value, r.Result.Found, true
	case wire.OpIncrement, wire.OpAppend:
		if r.Result.Status == wire.StatusOK {
			return r.Result.Value, true, true
		}
	}
	return nil, false, false
}

// describe names r in a finding: its kind, client, value and times.
func (r Record) describe() string {
	what := r.Op.Kind.String()
	if len(r.Op.Value) > 0 {
		what += " of " + short(r.Op.Value)
	}
	who := fmt.Sprintf("client %d", r.Client)
	if r.Client == finalClient {
		who = "final read"
	}
	switch {
	case r.Outcome == Failed:
		return fmt.Sprintf("%s (%s) called at %s was reported not applied", what, who, at(r.Call))
	case r.Outcome == Unknown:
		return fmt.Sprintf("%s (%s) called at %s, outcome unknown", what, who, at(r.Call))
	case r.Op.Kind == wire.OpCompareAndSet && r.Result.Status != wire.StatusOK:
		return fmt.Sprintf("%s (%s) between %s and %s, which failed its compare, finding %s", what, who, at(r.Call), at(r.Return), foundValue(r.Result))
	case r.Op.Kind.IsQuery():
		return fmt.Sprintf("%s (%s) between %s and %s, which read %s", what, who, at(r.Call), at(r.Return), foundValue(r.Result))
	}
	return fmt.Sprintf("%s (%s), acknowledged, between %s and %s", what, who, at(r.Call), at(r.Return))
}

func foundValue(res wire.Result) string {
	if !res.Found {
		return "nothing"
	}
	return short(res.Value)
}

// at formats a time of the history.
func at(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

// short quotes a value, cut to its first 40 bytes.
func short(v []byte) string {
	if len(v) > 40 {
		return strconv.Quote(string(v[:40])) + "..."
	}
	return strconv.Quote(string(v))
}
