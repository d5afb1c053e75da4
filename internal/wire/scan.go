package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ScanPage is the answer to an OpScan, carried in Result.Value: the keys
// of one page of a volume that matched, the last key the page examined
// (the next page starts right after it, at ScanAfter(Next), whether or
// not it matched) and whether the volume holds keys after it.
type ScanPage struct {
	Keys []string
	Next string
	More bool
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
// length first (uvarints), then 1 if More else 0.
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
	if p.More {
		return append(b, 1)
	}
	return append(b, 0)
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
	if len(b) != 1 || b[0] > 1 {
		return ScanPage{}, fmt.Errorf("%w: bad end", ErrBadScanPage)
	}
	p.More = b[0] == 1
	return p, nil
}
