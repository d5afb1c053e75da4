package bench

import (
	"bytes"
	"maps"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	fields := map[string][]byte{"field0": []byte("a"), "field1": {}, "field2": bytes.Repeat([]byte{0xff}, 300)}
	enc := encodeRecord(fields)
	got, err := decodeRecord(enc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, fields, bytes.Equal) {
		t.Fatalf("decoded %v, want %v", got, fields)
	}
	got, err = decodeRecord(enc, []string{"field2", "nosuch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !bytes.Equal(got["field2"], fields["field2"]) {
		t.Fatalf("decoded only field2: %v", got)
	}
	if !bytes.Equal(encodeRecord(fields), enc) {
		t.Fatal("encoding is not deterministic")
	}
}

// go-ycsb reuses value buffers once Insert or Update returns: the encoding
// must not alias them.
func TestRecordCopiesValues(t *testing.T) {
	buf := []byte("value")
	enc := encodeRecord(map[string][]byte{"f": buf})
	copy(buf, "XXXXX")
	got, _ := decodeRecord(enc, nil)
	if string(got["f"]) != "value" {
		t.Fatalf("encoded record changed with the caller's buffer: %q", got["f"])
	}
}

func TestRecordCorrupt(t *testing.T) {
	enc := encodeRecord(map[string][]byte{"field0": []byte("abc")})
	for i := range len(enc) {
		if _, err := decodeRecord(enc[:i], nil); err == nil {
			t.Errorf("truncated to %d bytes: decoded", i)
		}
	}
	if _, err := decodeRecord(append(enc, 0), nil); err == nil {
		t.Error("trailing byte: decoded")
	}
	if _, err := decodeRecord([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, nil); err == nil {
		t.Error("huge count: decoded")
	}
}

func TestMergeRecord(t *testing.T) {
	old := encodeRecord(map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	merged, err := mergeRecord(old, map[string][]byte{"b": []byte("3"), "c": []byte("4")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := decodeRecord(merged, nil)
	want := map[string][]byte{"a": []byte("1"), "b": []byte("3"), "c": []byte("4")}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("merged %v, want %v", got, want)
	}
}
