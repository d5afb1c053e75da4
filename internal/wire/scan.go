package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ScanPage is the answer to an OpScan, carried in Result.Value: the keys
// of one page of a volume that matched, the last key the page examined
// (the next page starts right after it, at ScanAfter(Next), whether or
// not it matched) and whether the volume holds keys after it.
type ScanPage struct {
	Keys []string
	Next string
	More bool
	// SplitModulus is the keyspace's volume count right after the
	// latest split the volume's history has passed (docs/adr/0031; 0:
	// none), and SplitInto, if it passed its keyspace's latest split,
	// the volume that split's moved keys went to (0 otherwise). A walk
	// that sees the count grow while it reads the volume reads
	// SplitInto next, from where this page began (clientcore.ScanCursor).
	SplitModulus uint32
	SplitInto    VolumeID
}

// ScanCountMax bounds the keys one OpScan may examine (Op.Delta);
// ScanPatternMax bounds its pattern (Op.Value).
const (
	ScanCountMax   = 10_000
	ScanPatternMax = 4096
)

// ScanAfter returns where a scan resumes after key: the first key that
// sorts after it (key and a 0x00 byte).
func ScanAfter(key string) string { return key + "\x00" }

// ErrBadScanPage is wrapped by every error DecodeScanPage returns.
var ErrBadScanPage = errors.New("malformed scan page")

// EncodeScanPage encodes p: the count of keys, each key and Next with its
// length first (uvarints), then 1 if More else 0, then, if SplitModulus
// is set, SplitModulus and SplitInto (uvarints).
func EncodeScanPage(p ScanPage) []byte {
	n := binary.MaxVarintLen64 * (len(p.Keys) + 2)
	for _, k := range p.Keys {
		n += len(k)
	}
	b := make([]byte, 0, n+len(p.Next)+1)
	b = binary.AppendUvarint(b, uint64(len(p.Keys)))
	for _, k := range p.Keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Next)))
	b = append(b, p.Next...)
	more := byte(0)
	if p.More {
		more = 1
	}
	b = append(b, more)
	if p.SplitModulus != 0 { // appended after 0.1.0, left out when none
		b = binary.AppendUvarint(b, uint64(p.SplitModulus))
		b = binary.AppendUvarint(b, uint64(p.SplitInto))
	}
	return b
}

// DecodeScanPage decodes what EncodeScanPage encoded, refusing anything
// else: truncated or trailing bytes, a count beyond ScanCountMax.
func DecodeScanPage(b []byte) (ScanPage, error) {
	var p ScanPage
	str := func(what string) (string, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", fmt.Errorf("%w: %s truncated", ErrBadScanPage, what)
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, nil
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > ScanCountMax {
		return p, fmt.Errorf("%w: bad key count", ErrBadScanPage)
	}
	b = b[k:]
	p.Keys = make([]string, 0, count)
	for range count {
		s, err := str("key")
		if err != nil {
			return ScanPage{}, err
		}
		p.Keys = append(p.Keys, s)
	}
	next, err := str("next key")
	if err != nil {
		return ScanPage{}, err
	}
	p.Next = next
	if len(b) < 1 || b[0] > 1 {
		return ScanPage{}, fmt.Errorf("%w: bad end", ErrBadScanPage)
	}
	p.More, b = b[0] == 1, b[1:]
	if len(b) > 0 {
		modulus, k := binary.Uvarint(b)
		if k <= 0 || modulus == 0 || modulus > math.MaxUint32 {
			return ScanPage{}, fmt.Errorf("%w: bad split count", ErrBadScanPage)
		}
		into, j := binary.Uvarint(b[k:])
		if j <= 0 || k+j != len(b) || into > math.MaxUint32 {
			return ScanPage{}, fmt.Errorf("%w: bad split volume", ErrBadScanPage)
		}
		p.SplitModulus, p.SplitInto = uint32(modulus), VolumeID(into)
	}
	return p, nil
}
