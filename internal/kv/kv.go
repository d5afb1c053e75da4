// Package kv defines what Catena's operations do to one object: the
// pre-programmed computations of CR §2. The head of a chain runs Apply once
// per update and ships the resulting object down the chain; the
// linearizability checker's model runs the same function, so the protocol
// is checked against the one definition of the operations.
package kv

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Limits on what a client may store. They are checked before a request
// enters the chain, so an oversized request changes nothing.
const (
	KeySizeMax   = 1024
	ValueSizeMax = 1 << 20
)

// Object is the state of one key. The zero Object is an absent key.
type Object struct {
	Value  []byte
	Exists bool
	// Stamp is, in a geo keyspace, the version's identity across sites
	// (wire.Stamp); there an absent key with a Stamp is a tombstone,
	// kept so that an older concurrent write arriving later loses.
	Stamp wire.Stamp
	// Expires is the deadline the head assigned (wire time, Unix
	// nanoseconds; 0: none). Past it the key reads as absent (Live),
	// until the head's replicated delete reclaims it (docs/adr/0028).
	Expires wire.Time
	// Type is the value's type: a string unless a hash (docs/adr/0029).
	Type wire.ObjectType
}

// ExpiresMax bounds deadlines and TTLs (about the year 2116), so that
// the head's clock plus a TTL cannot overflow; Redis likewise refuses an
// expire time it cannot represent.
const ExpiresMax wire.Time = 1 << 62

// Live returns object as it stands at time now: absent once its deadline
// has passed (a tombstone's Stamp stays). Readers decide with the
// member's clock, bounded by the clock check (docs/adr/0028 rule 2);
// writers only with the head's (rule 3).
func Live(object Object, now wire.Time) Object {
	if object.Expires != 0 && now >= object.Expires {
		return Object{Stamp: object.Stamp}
	}
	return object
}

// ErrBadOp is wrapped by every error Validate returns.
var ErrBadOp = errors.New("bad operation")

// Validate checks an operation against the limits and the known kinds.
func Validate(op wire.Op) error {
	switch {
	case !op.Kind.Valid():
		return fmt.Errorf("%w: unknown operation %d", ErrBadOp, op.Kind)
	case op.Kind == wire.OpScan:
		return validateScan(op)
	case op.Kind == wire.OpExport:
		return validateExport(op)
	case op.Kind == wire.OpWatch:
		return validateWatch(op)
	case op.Key == "":
		return fmt.Errorf("%w: empty key", ErrBadOp)
	case len(op.Key) > KeySizeMax:
		return fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix) && !strings.HasPrefix(op.Key, wire.LeaseKeyPrefix):
		return fmt.Errorf("%w: key %q starts with the reserved byte 0x00", ErrBadOp, op.Key)
	case len(op.Value) > ValueSizeMax:
		return fmt.Errorf("%w: value of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Value), ValueSizeMax)
	case len(op.Expected) > ValueSizeMax:
		return fmt.Errorf("%w: expected value of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Expected), ValueSizeMax)
	}
	if op.Kind.IsHash() {
		if err := validateHash(op); err != nil {
			return err
		}
	}
	return validateExpiry(op)
}

// validateExpiry checks an operation's deadline fields against its kind
// (docs/adr/0028): Redis's rules for SET's and EXPIRE's options.
func validateExpiry(op wire.Op) error {
	f := op.Expiry
	switch {
	case !op.SetsExpiry():
		return nil
	case !f.Valid():
		return fmt.Errorf("%w: unknown expiry flags %#x", ErrBadOp, uint8(f))
	case op.Expires != 0 && op.TTL != 0:
		return fmt.Errorf("%w: both a deadline and a TTL", ErrBadOp)
	case op.Expires < 0 || op.Expires > ExpiresMax || op.TTL > ExpiresMax || op.TTL < -ExpiresMax:
		return fmt.Errorf("%w: invalid expire time", ErrBadOp)
	}
	deadline := op.Expires != 0 || op.TTL != 0
	switch op.Kind {
	case wire.OpPut, wire.OpSwap, wire.OpReplace, wire.OpCompareAndSet:
		switch {
		case f&^wire.ExpiryKeep != 0:
			return fmt.Errorf("%w: %s takes no EXPIRE condition", ErrBadOp, op.Kind)
		case f&wire.ExpiryKeep != 0 && deadline:
			return fmt.Errorf("%w: a deadline and KEEPTTL together", ErrBadOp)
		case op.TTL < 0:
			return fmt.Errorf("%w: invalid expire time", ErrBadOp)
		}
		return nil
	case wire.OpExpire:
		persist := f&wire.ExpiryPersist != 0
		cond := f & (wire.ExpiryNX | wire.ExpiryXX | wire.ExpiryGT | wire.ExpiryLT)
		switch {
		case f&wire.ExpiryKeep != 0:
			return fmt.Errorf("%w: KEEPTTL is for writes", ErrBadOp)
		case persist && (deadline || cond != 0):
			return fmt.Errorf("%w: PERSIST takes no deadline or condition", ErrBadOp)
		case !persist && !deadline:
			return fmt.Errorf("%w: expire without a deadline", ErrBadOp)
		case cond&wire.ExpiryNX != 0 && cond != wire.ExpiryNX:
			return fmt.Errorf("%w: NX and XX, GT, or LT options at the same time are not compatible", ErrBadOp)
		case cond&wire.ExpiryGT != 0 && cond&wire.ExpiryLT != 0:
			return fmt.Errorf("%w: GT and LT options at the same time are not compatible", ErrBadOp)
		}
		return nil
	}
	return fmt.Errorf("%w: %s takes no expiry", ErrBadOp, op.Kind)
}

// validateScan checks an OpScan: its key is where the scan resumes
// (empty: the start), its value a pattern, its delta a count.
func validateScan(op wire.Op) error {
	switch {
	case len(op.Key) > KeySizeMax+1: // a key, or where a scan resumes after one (wire.ScanAfter)
		return fmt.Errorf("%w: scan start of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax+1)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix) && !strings.HasPrefix(op.Key, wire.LeaseKeyPrefix):
		return fmt.Errorf("%w: scan start %q begins with the reserved byte 0x00", ErrBadOp, op.Key)
	case len(op.Value) > wire.ScanPatternMax:
		return fmt.Errorf("%w: scan pattern of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Value), wire.ScanPatternMax)
	case op.Delta < 1 || op.Delta > wire.ScanCountMax:
		return fmt.Errorf("%w: scan count %d is not between 1 and %d", ErrBadOp, op.Delta, wire.ScanCountMax)
	case len(op.Expected) > 0 || op.ExpectAbsent:
		return fmt.Errorf("%w: a scan expects no value", ErrBadOp)
	}
	return nil
}

// validateExport checks an OpExport: its key is where the page starts
// (empty: the first key), its delta the export's id.
func validateExport(op wire.Op) error {
	switch {
	case len(op.Key) > KeySizeMax+1:
		return fmt.Errorf("%w: export start of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax+1)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix):
		return fmt.Errorf("%w: export start %q begins with the reserved byte 0x00", ErrBadOp, op.Key)
	case op.Delta == 0:
		return fmt.Errorf("%w: an export needs a nonzero id", ErrBadOp)
	case len(op.Value) > 0 || len(op.Expected) > 0 || op.ExpectAbsent || op.SetsExpiry():
		return fmt.Errorf("%w: an export takes only a start and an id", ErrBadOp)
	}
	return nil
}

// validateWatch checks an OpWatch: its key is the prefix watched (empty:
// every key) or, with wire.WatchExactKey, the key; its delta the revision
// it watches from; its TTL how long a member may hold it.
func validateWatch(op wire.Op) error {
	switch {
	case len(op.Key) > KeySizeMax:
		return fmt.Errorf("%w: watched key or prefix of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix):
		return fmt.Errorf("%w: watched prefix %q begins with the reserved byte 0x00", ErrBadOp, op.Key)
	case len(op.Value) > 1 || len(op.Value) == 1 && op.Value[0]&^wire.WatchExactKey != 0:
		return fmt.Errorf("%w: unknown watch flags %x", ErrBadOp, op.Value)
	case op.Key == "" && len(op.Value) == 1 && op.Value[0]&wire.WatchExactKey != 0:
		return fmt.Errorf("%w: a watch of one key needs the key", ErrBadOp)
	case op.Delta < wire.WatchFromNow:
		return fmt.Errorf("%w: watch from revision %d", ErrBadOp, op.Delta)
	case op.TTL < 0 || op.TTL > wire.WatchHoldMax:
		return fmt.Errorf("%w: a watch is held for at most %v, not %v", ErrBadOp, time.Duration(wire.WatchHoldMax), time.Duration(op.TTL))
	case len(op.Expected) > 0 || op.ExpectAbsent || op.Expires != 0 || op.Expiry != 0:
		return fmt.Errorf("%w: a watch takes only a key or prefix, a revision and a hold time", ErrBadOp)
	}
	return nil
}

// ReadsPrior reports whether Apply's outcome for the operation depends
// on the prior object: every operation but a blind Put (one that does
// not keep the key's deadline), whose caller may pass the zero Object
// and skip the read.
func ReadsPrior(op wire.Op) bool { return op.Kind != wire.OpPut || op.Expiry&wire.ExpiryKeep != 0 }

// Resolve returns op with a TTL turned into a deadline by the head's
// clock now: the head does it once, as it sequences the update, so a
// retry never moves the deadline (docs/adr/0028 rule 1).
func Resolve(op wire.Op, now wire.Time) wire.Op {
	if op.TTL != 0 {
		op.Expires, op.TTL = max(1, now+op.TTL), 0
	}
	return op
}

// Apply executes an update on the prior object at the head's time now
// and returns the new object, whether it changed, and the result for the
// client. It is deterministic. A new object whose deadline is not after
// now is deleted (Redis deletes a key given an expire time in the past).
// REQUIRES: op is valid, not a query, and resolved (Resolve); prior is
// live at now (Live).
func Apply(op wire.Op, prior Object, now wire.Time) (next Object, changed bool, result wire.Result) {
	next, changed, result = apply(op, prior, now)
	if next.Exists && next.Expires != 0 && next.Expires <= now {
		next, changed = Object{}, prior.Exists
	}
	if next.Exists {
		result.Expires = next.Expires
	}
	return next, changed, result
}

// deadline is the deadline a write gives its key: the operation's, or
// with ExpiryKeep the key's.
func deadline(op wire.Op, prior Object) wire.Time {
	if op.Expiry&wire.ExpiryKeep != 0 {
		return prior.Expires
	}
	return op.Expires
}

func apply(op wire.Op, prior Object, now wire.Time) (next Object, changed bool, result wire.Result) {
	switch {
	case op.Kind.IsHash():
		if prior.Exists && prior.Type != wire.TypeHash {
			return prior, false, wire.Result{Status: wire.StatusWrongType, Found: true}
		}
		return applyHash(op, prior)
	case prior.Exists && prior.Type != wire.TypeString && op.Kind != wire.OpPut && op.Kind != wire.OpDelete && op.Kind != wire.OpExpire:
		// A string's operation on a hash (SET and DEL take any type,
		// EXPIRE any key): Redis's WRONGTYPE.
		return prior, false, wire.Result{Status: wire.StatusWrongType, Found: true}
	}
	switch op.Kind {
	case wire.OpPut:
		next = Object{Value: bytes.Clone(op.Value), Exists: true, Expires: deadline(op, prior)}
		return next, true, wire.Result{Status: wire.StatusOK, Found: true}
	case wire.OpDelete:
		return Object{}, prior.Exists, wire.Result{Status: wire.StatusOK, Found: prior.Exists}
	case wire.OpCompareAndSet:
		match := (op.ExpectAbsent && !prior.Exists) ||
			(!op.ExpectAbsent && prior.Exists && bytes.Equal(prior.Value, op.Expected))
		if !match {
			return prior, false, wire.Result{Status: wire.StatusCompareFailed, Found: prior.Exists, Value: bytes.Clone(prior.Value)}
		}
		next = Object{Value: bytes.Clone(op.Value), Exists: true, Expires: deadline(op, prior)}
		return next, true, wire.Result{Status: wire.StatusOK, Found: prior.Exists}
	case wire.OpSwap:
		next = Object{Value: bytes.Clone(op.Value), Exists: true, Expires: deadline(op, prior)}
		return next, true, wire.Result{Status: wire.StatusOK, Found: prior.Exists, Value: bytes.Clone(prior.Value)}
	case wire.OpReplace:
		if !prior.Exists {
			return prior, false, wire.Result{Status: wire.StatusOK, Found: false}
		}
		next = Object{Value: bytes.Clone(op.Value), Exists: true, Expires: deadline(op, prior)}
		return next, true, wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(prior.Value)}
	case wire.OpIncrement:
		var n int64
		if prior.Exists {
			v, err := strconv.ParseInt(string(prior.Value), 10, 64)
			if errors.Is(err, strconv.ErrRange) && isDecimal(prior.Value) {
				// ParseInt reports a range error as soon as the digits
				// exceed int64, before it has seen the rest.
				return prior, false, wire.Result{Status: wire.StatusOverflow, Found: true}
			}
			if err != nil {
				return prior, false, wire.Result{Status: wire.StatusNotInteger, Found: true}
			}
			n = v
		}
		sum := n + op.Delta
		if (op.Delta > 0 && sum < n) || (op.Delta < 0 && sum > n) {
			return prior, false, wire.Result{Status: wire.StatusOverflow, Found: prior.Exists}
		}
		value := []byte(strconv.FormatInt(sum, 10))
		return Object{Value: value, Exists: true, Expires: prior.Expires}, true, wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(value)}
	case wire.OpAppend:
		if len(prior.Value)+len(op.Value) > ValueSizeMax {
			return prior, false, wire.Result{Status: wire.StatusValueTooLarge, Found: prior.Exists}
		}
		value := append(bytes.Clone(prior.Value), op.Value...)
		return Object{Value: value, Exists: true, Expires: prior.Expires}, true, wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(value)}
	case wire.OpExpire:
		return expire(op, prior, now)
	}
	panic(fmt.Sprintf("kv.Apply: %v is not an update", op.Kind))
}

// expire is OpExpire: Redis's EXPIRE with its conditions, PERSIST, and
// GETEX (the answer carries the value). A key without a deadline counts
// as one infinitely late (Redis's GT and LT).
func expire(op wire.Op, prior Object, now wire.Time) (Object, bool, wire.Result) {
	failed := wire.Result{Status: wire.StatusCompareFailed, Found: prior.Exists, Value: bytes.Clone(prior.Value)}
	if !prior.Exists {
		return prior, false, failed
	}
	cur, want := prior.Expires, op.Expires
	f := op.Expiry
	ok := true
	switch {
	case f&wire.ExpiryPersist != 0:
		ok = cur != 0
	case f&wire.ExpiryNX != 0:
		ok = cur == 0
	case f&wire.ExpiryXX != 0 && cur == 0:
		ok = false
	}
	if f&wire.ExpiryGT != 0 && (cur == 0 || want <= cur) || f&wire.ExpiryLT != 0 && cur != 0 && want >= cur {
		ok = false
	}
	if !ok {
		return prior, false, failed
	}
	next := prior
	next.Value = bytes.Clone(prior.Value)
	next.Expires = want // (0 with ExpiryPersist)
	ok2 := wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(prior.Value)}
	return next, next.Expires != cur || want != 0 && want <= now, ok2
}

// isDecimal reports whether b is an optional sign followed by one or more
// decimal digits: the syntax strconv.ParseInt accepts in base 10.
func isDecimal(b []byte) bool {
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Read executes a query. The result carries the version's Stamp (geo
// keyspaces), a tombstone's too, and its deadline.
// REQUIRES: object is live at the reader's clock (Live).
func Read(op wire.Op, object Object) wire.Result {
	if op.Kind == wire.OpHashGet {
		return readHash(op, object)
	}
	return wire.Result{Status: wire.StatusOK, Found: object.Exists, Value: bytes.Clone(object.Value), Stamp: object.Stamp, Expires: object.Expires, Type: object.Type}
}
