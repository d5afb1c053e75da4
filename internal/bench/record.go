package bench

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
)

// A YCSB record is a set of fields (field0..field9, 100 random bytes each
// by default). Catena and etcd store one record as one value, encoded by
// encodeRecord; Redis stores it as a hash, one field per hash field, as
// go-ycsb's Redis binding does.
//
// Encoding: uvarint field count, then per field in name order a uvarint
// length and the name, a uvarint length and the value.

var errCorruptRecord = errors.New("bench: corrupt record")

// encodeRecord returns a fresh encoding of fields. It copies every value,
// so the caller may reuse the buffers afterwards (go-ycsb does: it returns
// value buffers to a pool once Insert or Update returns).
func encodeRecord(fields map[string][]byte) []byte {
	size := binary.MaxVarintLen64
	for name, value := range fields {
		size += 2*binary.MaxVarintLen64 + len(name) + len(value)
	}
	out := make([]byte, 0, size)
	out = binary.AppendUvarint(out, uint64(len(fields)))
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		value := fields[name]
		out = binary.AppendUvarint(out, uint64(len(name)))
		out = append(out, name...)
		out = binary.AppendUvarint(out, uint64(len(value)))
		out = append(out, value...)
	}
	return out
}

// decodeRecord decodes a record. With a non-empty want it keeps only those
// fields. The values alias data.
func decodeRecord(data []byte, want []string) (map[string][]byte, error) {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)) {
		return nil, errCorruptRecord
	}
	data = data[k:]
	out := make(map[string][]byte, n)
	for range n {
		name, rest, ok := cutBytes(data)
		if !ok {
			return nil, errCorruptRecord
		}
		value, rest, ok := cutBytes(rest)
		if !ok {
			return nil, errCorruptRecord
		}
		data = rest
		if len(want) == 0 || slices.Contains(want, string(name)) {
			out[string(name)] = value
		}
	}
	if len(data) != 0 {
		return nil, errCorruptRecord
	}
	return out, nil
}

func cutBytes(data []byte) (field, rest []byte, ok bool) {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return nil, nil, false
	}
	return data[k : k+int(n)], data[k+int(n):], true
}

// mergeRecord returns the encoding of old's fields overwritten by update's.
func mergeRecord(old []byte, update map[string][]byte) ([]byte, error) {
	fields, err := decodeRecord(old, nil)
	if err != nil {
		return nil, err
	}
	maps.Copy(fields, update)
	return encodeRecord(fields), nil
}
