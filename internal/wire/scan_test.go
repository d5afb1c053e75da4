package wire

import (
	"errors"
	"reflect"
	"testing"
)

// A scan page survives encoding, and every prefix or extension of an
// encoding is refused.
func TestScanPageRoundTrip(t *testing.T) {
	for _, p := range []ScanPage{
		{Keys: []string{}},
		{Keys: []string{"a", "", "ключ"}, Next: "ключ", More: true},
		{Keys: []string{}, Next: "last examined", More: true},
		{Keys: []string{"k"}, Next: "k", SplitModulus: 4, SplitInto: 7},
		{Keys: []string{"k"}, Next: "k", More: true, SplitModulus: 2}, // (its latest split not passed yet)
	} {
		b := EncodeScanPage(p)
		got, err := DecodeScanPage(b)
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Fatalf("DecodeScanPage(EncodeScanPage(%+v)) = %+v, %v", p, got, err)
		}
		base := len(EncodeScanPage(ScanPage{Keys: p.Keys, Next: p.Next, More: p.More}))
		for i := range b {
			if i == base {
				continue // a page without the splits: as release 0.1.0 wrote it
			}
			if _, err := DecodeScanPage(b[:i]); !errors.Is(err, ErrBadScanPage) {
				t.Errorf("prefix of %d of %d bytes: %v, want ErrBadScanPage", i, len(b), err)
			}
		}
		if _, err := DecodeScanPage(append(b, 0)); !errors.Is(err, ErrBadScanPage) {
			t.Errorf("a trailing byte: %v, want ErrBadScanPage", err)
		}
	}
}

func FuzzDecodeScanPage(f *testing.F) {
	f.Add(EncodeScanPage(ScanPage{Keys: []string{"a", "b"}, Next: "b", More: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeScanPage(b)
		if err != nil {
			return
		}
		if q, err := DecodeScanPage(EncodeScanPage(p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoding %+v: %+v, %v", p, q, err)
		}
	})
}

// An export page survives encoding, and every prefix or extension of an
// encoding is refused.
func TestExportPageRoundTrip(t *testing.T) {
	for _, p := range []ExportPage{
		{Objects: []ExportObject{}},
		{SN: 77, Objects: []ExportObject{{Key: "a", Value: []byte{}}, {Key: "ключ", Value: []byte("v"), Expires: 1 << 61, Type: TypeHash}}, More: true, Began: true},
		{SN: 1, Objects: []ExportObject{}, Began: true},
	} {
		b := EncodeExportPage(p)
		got, err := DecodeExportPage(b)
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Fatalf("DecodeExportPage(EncodeExportPage(%+v)) = %+v, %v", p, got, err)
		}
		for i := range b {
			if _, err := DecodeExportPage(b[:i]); !errors.Is(err, ErrBadExportPage) {
				t.Errorf("prefix of %d of %d bytes: %v, want ErrBadExportPage", i, len(b), err)
			}
		}
		if _, err := DecodeExportPage(append(b, 0)); !errors.Is(err, ErrBadExportPage) {
			t.Errorf("a trailing byte: %v, want ErrBadExportPage", err)
		}
	}
	if _, err := DecodeExportPage([]byte{1, 0, 4}); !errors.Is(err, ErrBadExportPage) {
		t.Errorf("unknown flags: %v, want ErrBadExportPage", err)
	}
}

func FuzzDecodeExportPage(f *testing.F) {
	f.Add(EncodeExportPage(ExportPage{SN: 3, Objects: []ExportObject{{Key: "a", Value: []byte("b"), Expires: 9, Type: TypeHash}}, More: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeExportPage(b)
		if err != nil {
			return
		}
		if q, err := DecodeExportPage(EncodeExportPage(p)); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoding %+v: %+v, %v", p, q, err)
		}
	})
}
