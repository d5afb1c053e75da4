package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// Hashes (docs/adr/0029-hashes.md): a hash's value is its fields,
// encoded canonically (EncodeFields of the fields sorted by name, each
// once), so equal hashes have equal bytes and every replica stores what
// the head computed. Operations name fields in the same encoding.

// Field is one field of a hash and its value.
type Field struct {
	Name  string
	Value []byte
}

// EncodeNames encodes field names with empty values: how operations name
// the fields they delete, increment or read.
func EncodeNames(names []string) []byte {
	fields := make([]Field, len(names))
	for i, n := range names {
		fields[i].Name = n
	}
	return EncodeFields(fields)
}

// ErrBadFields is wrapped by DecodeFields' errors.
var ErrBadFields = errors.New("malformed hash fields")

// EncodeFields encodes fields in order: their count, then each name and
// value with its length (unsigned varints).
func EncodeFields(fields []Field) []byte {
	n := binary.MaxVarintLen64
	for _, f := range fields {
		n += 2*binary.MaxVarintLen32 + len(f.Name) + len(f.Value)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.AppendUvarint(b, uint64(len(f.Value)))
		b = append(b, f.Value...)
	}
	return b
}

// DecodeFields decodes what EncodeFields encoded. The values returned
// do not alias b.
func DecodeFields(b []byte) ([]Field, error) { return decodeFields(b, true) }

// PickFields returns the fields of the hash encoding b (what
// EncodeFields encoded, fields sorted) that names names, in the order
// named, leaving out the names it lacks; every field, sorted, when names
// is empty. The values alias b: a reader that owns b answers HGET, HMGET
// and HGETALL from it without copying a value.
func PickFields(b []byte, names []string) ([]Field, error) {
	fields, err := decodeFields(b, false)
	if err != nil || len(names) == 0 {
		return fields, err
	}
	picked := make([]Field, 0, len(names))
	for _, n := range names {
		if i, ok := fieldIndex(fields, n); ok {
			picked = append(picked, fields[i])
		}
	}
	return picked, nil
}

// decodeFields decodes b's fields, their values copied (clone) or
// aliasing b.
func decodeFields(b []byte, clone bool) ([]Field, error) {
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: bad count", ErrBadFields)
	}
	b = b[k:]
	fields := make([]Field, 0, count)
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	for range count {
		name, ok1 := next()
		value, ok2 := next()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: truncated", ErrBadFields)
		}
		if clone {
			value = bytes.Clone(value)
		}
		fields = append(fields, Field{Name: string(name), Value: value})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the fields", ErrBadFields, len(b))
	}
	return fields, nil
}

// validateHash checks a hash operation's fields: they decode, name at
// least one field (but OpHashGet, which may name none: every field),
// and each name is within the key limit; one field for OpHashSetNX and
// OpHashIncrement.
func validateHash(op wire.Op) error {
	fields, err := DecodeFields(op.Value)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadOp, err)
	}
	switch {
	case len(fields) == 0 && op.Kind != wire.OpHashGet:
		return fmt.Errorf("%w: %s names no field", ErrBadOp, op.Kind)
	case len(fields) != 1 && (op.Kind == wire.OpHashSetNX || op.Kind == wire.OpHashIncrement):
		return fmt.Errorf("%w: %s names one field, not %d", ErrBadOp, op.Kind, len(fields))
	case len(op.Expected) > 0 || op.ExpectAbsent || op.Delta != 0 && op.Kind != wire.OpHashIncrement:
		return fmt.Errorf("%w: %s takes no expected value or delta", ErrBadOp, op.Kind)
	}
	for _, f := range fields {
		if len(f.Name) > KeySizeMax {
			return fmt.Errorf("%w: field of %d bytes exceeds the limit of %d", ErrBadOp, len(f.Name), KeySizeMax)
		}
	}
	return nil
}

// hashOf returns the fields of a hash object (none if absent), sorted,
// their values aliasing o.Value.
// A stored hash that does not decode is a corrupt replica: fatal.
func hashOf(o Object) []Field {
	if !o.Exists {
		return nil
	}
	fields, err := decodeFields(o.Value, false)
	if err != nil {
		panic(fmt.Sprintf("kv: a stored hash does not decode: %v", err))
	}
	return fields
}

// fieldIndex finds name among sorted fields.
func fieldIndex(fields []Field, name string) (int, bool) {
	return slices.BinarySearchFunc(fields, name, func(f Field, n string) int { return strings.Compare(f.Name, n) })
}

// applyHash executes a hash update on a prior object of type hash, or
// absent. REQUIRES: op is a valid hash update.
func applyHash(op wire.Op, prior Object) (Object, bool, wire.Result) {
	// Nothing is copied until EncodeFields: the fields alias op's value
	// and the prior object's, neither of which changes.
	args, _ := decodeFields(op.Value, false) // (valid)
	fields := hashOf(prior)
	count := int64(0)
	found := prior.Exists
	switch op.Kind {
	case wire.OpHashSet, wire.OpHashSetNX:
		for _, a := range args {
			i, ok := fieldIndex(fields, a.Name)
			switch {
			case ok && op.Kind == wire.OpHashSetNX:
				return prior, false, wire.Result{Status: wire.StatusOK, Found: found, Value: []byte("0")}
			case ok:
				fields[i].Value = a.Value
			default:
				fields = slices.Insert(fields, i, Field{Name: a.Name, Value: a.Value})
				count++
			}
		}
	case wire.OpHashDelete:
		for _, a := range args {
			if i, ok := fieldIndex(fields, a.Name); ok {
				fields = slices.Delete(fields, i, i+1)
				count++
			}
		}
		if count == 0 {
			return prior, false, wire.Result{Status: wire.StatusOK, Found: found, Value: []byte("0")}
		}
		if len(fields) == 0 { // the last field gone: the key goes too
			return Object{}, true, wire.Result{Status: wire.StatusOK, Found: found, Value: []byte(strconv.FormatInt(count, 10))}
		}
	case wire.OpHashIncrement:
		i, ok := fieldIndex(fields, args[0].Name)
		var n int64
		if ok {
			v, err := strconv.ParseInt(string(fields[i].Value), 10, 64)
			if err != nil {
				return prior, false, wire.Result{Status: wire.StatusNotInteger, Found: found}
			}
			n = v
		}
		sum := n + op.Delta
		if (op.Delta > 0 && sum < n) || (op.Delta < 0 && sum > n) {
			return prior, false, wire.Result{Status: wire.StatusOverflow, Found: found}
		}
		value := []byte(strconv.FormatInt(sum, 10))
		if ok {
			fields[i].Value = value
		} else {
			fields = slices.Insert(fields, i, Field{Name: args[0].Name, Value: value})
		}
		count = sum
	}
	encoded := EncodeFields(fields)
	if len(encoded) > ValueSizeMax {
		return prior, false, wire.Result{Status: wire.StatusValueTooLarge, Found: found}
	}
	next := Object{Value: encoded, Exists: true, Type: wire.TypeHash, Expires: prior.Expires}
	return next, true, wire.Result{Status: wire.StatusOK, Found: found, Value: []byte(strconv.FormatInt(count, 10))}
}

// readHash answers OpHashGet: the fields named that the hash holds
// (every field if none is named), encoded.
func readHash(op wire.Op, object Object) wire.Result {
	if object.Exists && object.Type != wire.TypeHash {
		return wire.Result{Status: wire.StatusWrongType, Found: true}
	}
	want, _ := decodeFields(op.Value, false)
	if len(want) == 0 {
		// Every field: the stored encoding is the answer's (canonical).
		value := EncodeFields(nil)
		if object.Exists {
			value = bytes.Clone(object.Value)
		}
		return wire.Result{Status: wire.StatusOK, Found: object.Exists, Value: value, Expires: object.Expires, Type: object.Type}
	}
	fields := hashOf(object)
	var picked []Field
	for _, w := range want {
		if i, ok := fieldIndex(fields, w.Name); ok {
			picked = append(picked, fields[i])
		}
	}
	return wire.Result{Status: wire.StatusOK, Found: object.Exists, Value: EncodeFields(picked), Expires: object.Expires, Type: object.Type}
}
