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
	case op.Key == "":
		return fmt.Errorf("%w: empty key", ErrBadOp)
	case len(op.Key) > KeySizeMax:
		return fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix):
		return fmt.Errorf("%w: key %q starts with the reserved byte 0x00", ErrBadOp, op.Key)
	case len(op.Value) > ValueSizeMax:
		return fmt.Errorf("%w: value of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Value), ValueSizeMax)
	case len(op.Expected) > ValueSizeMax:
		return fmt.Errorf("%w: expected value of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Expected), ValueSizeMax)
	}
	return nil
}

// validateScan checks an OpScan: its key is where the scan resumes
// (empty: the start), its value a pattern, its delta a count.
func validateScan(op wire.Op) error {
	switch {
	case len(op.Key) > KeySizeMax+1: // a key, or where a scan resumes after one (wire.ScanAfter)
		return fmt.Errorf("%w: scan start of %d bytes exceeds the limit of %d", ErrBadOp, len(op.Key), KeySizeMax+1)
	case strings.HasPrefix(op.Key, wire.ReservedKeyPrefix):
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

// ReadsPrior reports whether Apply's outcome for an operation of this
// kind depends on the prior object: every kind but a blind Put, whose
// caller may pass the zero Object and skip the read.
func ReadsPrior(k wire.OpKind) bool { return k != wire.OpPut }

// Apply executes an update on the prior object and returns the new object,
// whether it changed, and the result for the client. It is deterministic.
// REQUIRES: op is valid and not a query.
func Apply(op wire.Op, prior Object) (next Object, changed bool, result wire.Result) {
	switch op.Kind {
	case wire.OpPut:
		next = Object{Value: bytes.Clone(op.Value), Exists: true}
		return next, true, wire.Result{Status: wire.StatusOK, Found: true}
	case wire.OpDelete:
		return Object{}, prior.Exists, wire.Result{Status: wire.StatusOK, Found: prior.Exists}
	case wire.OpCompareAndSet:
		match := (op.ExpectAbsent && !prior.Exists) ||
			(!op.ExpectAbsent && prior.Exists && bytes.Equal(prior.Value, op.Expected))
		if !match {
			return prior, false, wire.Result{Status: wire.StatusCompareFailed, Found: prior.Exists, Value: bytes.Clone(prior.Value)}
		}
		next = Object{Value: bytes.Clone(op.Value), Exists: true}
		return next, true, wire.Result{Status: wire.StatusOK, Found: prior.Exists}
	case wire.OpSwap:
		next = Object{Value: bytes.Clone(op.Value), Exists: true}
		return next, true, wire.Result{Status: wire.StatusOK, Found: prior.Exists, Value: bytes.Clone(prior.Value)}
	case wire.OpReplace:
		if !prior.Exists {
			return prior, false, wire.Result{Status: wire.StatusOK, Found: false}
		}
		next = Object{Value: bytes.Clone(op.Value), Exists: true}
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
		return Object{Value: value, Exists: true}, true, wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(value)}
	case wire.OpAppend:
		if len(prior.Value)+len(op.Value) > ValueSizeMax {
			return prior, false, wire.Result{Status: wire.StatusValueTooLarge, Found: prior.Exists}
		}
		value := append(bytes.Clone(prior.Value), op.Value...)
		return Object{Value: value, Exists: true}, true, wire.Result{Status: wire.StatusOK, Found: true, Value: bytes.Clone(value)}
	}
	panic(fmt.Sprintf("kv.Apply: %v is not an update", op.Kind))
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
// keyspaces), a tombstone's too.
func Read(op wire.Op, object Object) wire.Result {
	return wire.Result{Status: wire.StatusOK, Found: object.Exists, Value: bytes.Clone(object.Value), Stamp: object.Stamp}
}
