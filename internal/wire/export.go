package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ExportPage is the answer to an OpExport, carried in Result.Value: some
// of a volume's objects in key order, all read from the one state of the
// volume the export froze (the state after update SN), and whether more
// follow the last. Began says this request froze it: a caller that asked
// for a later page learns that the tail lost the export it was reading
// (a new tail, an idle export dropped) and must read the volume again
// from its first key to keep one state.
type ExportPage struct {
	SN      SN
	Objects []ExportObject
	More    bool
	Began   bool
}

// ExportObject is one object of an export.
type ExportObject struct {
	Key     string
	Value   []byte
	Expires Time
	Type    ObjectType
}

// Limits of an export page: the tail stops a page at ExportPageObjects
// objects or ExportPageBytes of keys and values (a page holds one object
// at least, and an object is at most a key and a value).
const (
	ExportPageObjects = 1024
	ExportPageBytes   = 256 << 10
)

// ErrBadExportPage is wrapped by every error DecodeExportPage returns.
var ErrBadExportPage = errors.New("malformed export page")

// EncodeExportPage encodes p: SN, the count of objects, each object's key
// and value with their lengths first, its deadline and type, then a byte
// with More (bit 0) and Began (bit 1); the integers are uvarints.
func EncodeExportPage(p ExportPage) []byte {
	n := 3*binary.MaxVarintLen64 + 1
	for _, o := range p.Objects {
		n += 3*binary.MaxVarintLen64 + 1 + len(o.Key) + len(o.Value)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(p.SN))
	b = binary.AppendUvarint(b, uint64(len(p.Objects)))
	for _, o := range p.Objects {
		b = binary.AppendUvarint(b, uint64(len(o.Key)))
		b = append(b, o.Key...)
		b = binary.AppendUvarint(b, uint64(len(o.Value)))
		b = append(b, o.Value...)
		b = binary.AppendUvarint(b, uint64(o.Expires))
		b = append(b, byte(o.Type))
	}
	var flags byte
	if p.More {
		flags |= 1
	}
	if p.Began {
		flags |= 2
	}
	return append(b, flags)
}

// DecodeExportPage decodes what EncodeExportPage encoded, refusing
// anything else: truncated or trailing bytes, more than
// ExportPageObjects objects, a negative deadline, unknown flags.
func DecodeExportPage(b []byte) (ExportPage, error) {
	var p ExportPage
	uint := func(what string) (uint64, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, fmt.Errorf("%w: %s truncated", ErrBadExportPage, what)
		}
		b = b[k:]
		return n, nil
	}
	bytes := func(what string) ([]byte, error) {
		n, err := uint(what)
		if err != nil {
			return nil, err
		}
		if n > uint64(len(b)) {
			return nil, fmt.Errorf("%w: %s truncated", ErrBadExportPage, what)
		}
		s := b[:n:n]
		b = b[n:]
		return s, nil
	}
	sn, err := uint("sn")
	if err != nil {
		return p, err
	}
	p.SN = SN(sn)
	count, err := uint("object count")
	if err != nil {
		return p, err
	}
	if count > ExportPageObjects {
		return p, fmt.Errorf("%w: %d objects", ErrBadExportPage, count)
	}
	p.Objects = make([]ExportObject, 0, count)
	for range count {
		key, err := bytes("key")
		if err != nil {
			return ExportPage{}, err
		}
		value, err := bytes("value")
		if err != nil {
			return ExportPage{}, err
		}
		expires, err := uint("deadline")
		if err != nil {
			return ExportPage{}, err
		}
		if expires > 1<<63-1 || len(b) == 0 {
			return ExportPage{}, fmt.Errorf("%w: bad deadline or type", ErrBadExportPage)
		}
		t := ObjectType(b[0])
		b = b[1:]
		p.Objects = append(p.Objects, ExportObject{Key: string(key), Value: append([]byte{}, value...), Expires: Time(expires), Type: t})
	}
	if len(b) != 1 || b[0] > 3 {
		return ExportPage{}, fmt.Errorf("%w: bad end", ErrBadExportPage)
	}
	p.More, p.Began = b[0]&1 != 0, b[0]&2 != 0
	return p, nil
}
