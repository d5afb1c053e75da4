package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// testWatchEvents are events of every kind: a put of a string with a
// deadline, a put of a hash, a put of an empty value to the empty key, a
// delete, an expiry, at SNs small and large.
func testWatchEvents() []WatchEvent {
	return []WatchEvent{
		{SN: 1, Kind: WatchPut, Key: "cfg/a", Value: []byte("v1"), Expires: 1_800_000_000_123_456_789},
		{SN: 300, Kind: WatchPut, Key: "user:1", Value: []byte("\x01\x04name\x03ada"), Type: TypeHash},
		{SN: 301, Kind: WatchPut, Key: ""},
		{SN: 1 << 40, Kind: WatchDelete, Key: "ключ"},
		{SN: math.MaxUint64, Kind: WatchExpire, Key: "session"},
	}
}

// A watch page survives encoding, whatever it holds; every prefix of an
// encoding and every extension of it is refused. (Decoding yields nil
// for an empty event list and an empty value: the pages here say so.)
func TestWatchPageRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		page WatchPage
	}{
		{"empty", WatchPage{}},
		{"nothing to send", WatchPage{Through: 77}},
		{"events of every kind", WatchPage{Events: testWatchEvents(), Through: math.MaxUint64}},
		{"past deadline, negative", WatchPage{Events: []WatchEvent{{SN: 2, Kind: WatchPut, Key: "k", Value: []byte("v"), Expires: -1}}, Through: 2}},
		{"compacted", WatchPage{Through: 5, Compacted: true, Oldest: 1 << 33}},
		{"compacted at zero", WatchPage{Compacted: true}},
		{"split", WatchPage{Events: testWatchEvents()[:1], Through: 31, Split: SplitPoint{Into: 9, SN: 31, Epoch: 3}, SplitModulus: 8}},
		{"extremes", WatchPage{Through: math.MaxUint64, Compacted: true, Oldest: math.MaxUint64,
			Split: SplitPoint{Into: math.MaxUint32, SN: math.MaxUint64, Epoch: math.MaxUint64}, SplitModulus: math.MaxUint32}},
		{"full", WatchPage{Events: slices.Repeat(testWatchEvents()[:1], WatchPageEvents), Through: 1}},
	} {
		b := EncodeWatchPage(tc.page)
		got, err := DecodeWatchPage(b)
		if err != nil || !reflect.DeepEqual(got, tc.page) {
			t.Errorf("%s: DecodeWatchPage(EncodeWatchPage(%+v)) = %+v, %v", tc.name, tc.page, got, err)
			continue
		}
		if tc.name == "full" {
			continue // (its prefixes are the others' many times over)
		}
		for i := range b {
			if p, err := DecodeWatchPage(b[:i:i]); !errors.Is(err, ErrBadWatchPage) {
				t.Errorf("%s: prefix of %d of %d bytes: %+v, %v; want ErrBadWatchPage", tc.name, i, len(b), p, err)
			}
		}
		for _, extra := range []string{"\x00", "garbage"} {
			if p, err := DecodeWatchPage(append(slices.Clone(b), extra...)); !errors.Is(err, ErrBadWatchPage) {
				t.Errorf("%s: %q appended: %+v, %v; want ErrBadWatchPage", tc.name, extra, p, err)
			}
		}
	}
}

// The decoded page owns its bytes: the buffer it came from may be
// reused.
func TestWatchPageDecodeDoesNotAlias(t *testing.T) {
	p := WatchPage{Events: testWatchEvents(), Through: 9}
	b := EncodeWatchPage(p)
	got, err := DecodeWatchPage(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xa5
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("the decoded page changed with its input: %+v", got)
	}
}

// Pages this release never writes are refused, each at the field that
// is wrong.
func TestWatchPageMalformed(t *testing.T) {
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	// event encodes one event's fields as EncodeWatchPage does.
	event := func(sn uint64, kind byte, key, value string, expires int64, typ byte) []byte {
		b := slices.Concat(uv(sn), []byte{kind}, uv(uint64(len(key))), []byte(key), uv(uint64(len(value))), []byte(value))
		return append(binary.AppendVarint(b, expires), typ)
	}
	// end is Through, the flags byte, Oldest and the split's four fields.
	end := func(flags byte, split ...uint64) []byte {
		b := slices.Concat(uv(7), []byte{flags}, uv(0))
		for _, v := range split {
			b = append(b, uv(v)...)
		}
		return b
	}
	zeroSplit := []uint64{0, 0, 0, 0}
	good := slices.Concat(uv(1), event(3, byte(WatchPut), "k", "v", 5, byte(TypeHash)), end(0, zeroSplit...))
	if p, err := DecodeWatchPage(good); err != nil || len(p.Events) != 1 || p.Events[0].Type != TypeHash {
		t.Fatalf("the well-formed page the cases below spoil: %+v, %v", p, err)
	}
	tooMany := EncodeWatchPage(WatchPage{Events: slices.Repeat([]WatchEvent{{SN: 1, Kind: WatchDelete, Key: "k"}}, WatchPageEvents+1)})
	for _, tc := range []struct {
		name, what string
		b          []byte
	}{
		{"empty", "event count", nil},
		{"too many events", "event count", tooMany},
		{"a huge event count", "event count", slices.Concat(uv(math.MaxUint64), end(0, zeroSplit...))},
		{"fewer events than counted", "event", slices.Concat(uv(2), event(3, byte(WatchPut), "k", "v", 5, 0))},
		{"kind 0", "event kind", slices.Concat(uv(1), event(3, 0, "k", "", 0, 0), end(0, zeroSplit...))},
		{"kind after expire", "event kind", slices.Concat(uv(1), event(3, byte(WatchExpire)+1, "k", "", 0, 0), end(0, zeroSplit...))},
		{"key longer than the page", "event key", slices.Concat(uv(1), uv(3), []byte{byte(WatchPut)}, uv(1000), []byte("k"))},
		{"value longer than the page", "event value", slices.Concat(uv(1), uv(3), []byte{byte(WatchPut)}, uv(1), []byte("k"), uv(1<<62), []byte("v"))},
		{"type after hash", "event type", slices.Concat(uv(1), event(3, byte(WatchPut), "k", "v", 0, byte(TypeHash)+1), end(0, zeroSplit...))},
		{"deadline overflows", "event deadline", slices.Concat(uv(1), uv(3), []byte{byte(WatchPut)}, uv(0), uv(0),
			bytes.Repeat([]byte{0xff}, 10), []byte{1, 0}, end(0, zeroSplit...))},
		{"flags 2", "end", slices.Concat(uv(0), end(2, zeroSplit...))},
		{"flags 0xff", "end", slices.Concat(uv(0), end(0xff, zeroSplit...))},
		{"split volume over 32 bits", "split", slices.Concat(uv(0), end(0, 1<<32, 5, 2, 4))},
		{"split modulus over 32 bits", "split", slices.Concat(uv(0), end(0, 1, 5, 2, 1<<32))},
		{"split cut short", "split", slices.Concat(uv(0), end(0, 1, 5, 2))},
		{"through overflows", "end", slices.Concat(uv(0), bytes.Repeat([]byte{0xff}, 10), []byte{1})},
	} {
		p, err := DecodeWatchPage(tc.b)
		if !errors.Is(err, ErrBadWatchPage) || !reflect.DeepEqual(p, WatchPage{}) {
			t.Errorf("%s: DecodeWatchPage(%x) = %+v, %v; want ErrBadWatchPage", tc.name, tc.b, p, err)
			continue
		}
		if !strings.Contains(err.Error(), "bad "+tc.what) {
			t.Errorf("%s: %q does not name the %s", tc.name, err, tc.what)
		}
	}
}

// A watch of a prefix matches the keys it prefixes, the empty prefix
// every key; a watch of one key (WatchExactKey) that key alone.
func TestWatchMatches(t *testing.T) {
	exact := []byte{WatchExactKey}
	for _, tc := range []struct {
		key   string
		flags []byte
		match []string
		miss  []string
	}{
		{"cfg/", nil, []string{"cfg/", "cfg/a", "cfg/a/b"}, []string{"cfg", "cfh/", "", "xcfg/a"}},
		{"", nil, []string{"", "a", "\xff"}, nil},
		{"cfg/a", []byte{0}, []string{"cfg/a", "cfg/ab"}, []string{"cfg/", "cfg/b"}},
		{"cfg/a", exact, []string{"cfg/a"}, []string{"cfg/ab", "cfg/", "cfg/A", ""}},
	} {
		op := Op{Kind: OpWatch, Key: tc.key, Value: tc.flags}
		for _, k := range tc.match {
			if !WatchMatches(op, k) {
				t.Errorf("a watch of %q (flags %x) misses %q", tc.key, tc.flags, k)
			}
		}
		for _, k := range tc.miss {
			if WatchMatches(op, k) {
				t.Errorf("a watch of %q (flags %x) matches %q", tc.key, tc.flags, k)
			}
		}
	}
}

func TestWatchEventKindNames(t *testing.T) {
	for k, want := range map[WatchEventKind]string{WatchPut: "put", WatchDelete: "delete", WatchExpire: "expire", 0: "watch-event(0)", 9: "watch-event(9)"} {
		if got := k.String(); got != want {
			t.Errorf("WatchEventKind(%d) = %q, want %q", uint8(k), got, want)
		}
	}
	if got := OpWatch.String(); got != "watch" || !OpWatch.Valid() || !OpWatch.IsQuery() || !OpWatch.NamesVolume() {
		t.Errorf("OpWatch: %q, valid %v, query %v, names a volume %v", got, OpWatch.Valid(), OpWatch.IsQuery(), OpWatch.NamesVolume())
	}
	// A watch's TTL is how long it may be held, not a deadline that needs
	// the expiry protocol.
	if (Op{Kind: OpWatch, TTL: WatchHoldMax}).SetsExpiry() {
		t.Error("a watch with a hold time counts as setting a deadline")
	}
}

func FuzzDecodeWatchPage(f *testing.F) {
	f.Add(EncodeWatchPage(WatchPage{Events: testWatchEvents(), Through: 9, Compacted: true, Oldest: 3,
		Split: SplitPoint{Into: 2, SN: 4, Epoch: 5}, SplitModulus: 4}))
	f.Add(EncodeWatchPage(WatchPage{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeWatchPage(b)
		if err != nil {
			if !errors.Is(err, ErrBadWatchPage) || !reflect.DeepEqual(p, WatchPage{}) {
				t.Fatalf("DecodeWatchPage = %+v, %v", p, err)
			}
			return
		}
		again := EncodeWatchPage(p)
		if len(again) > len(b) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(b), len(again))
		}
		if q, err := DecodeWatchPage(again); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("re-encoding %+v: %+v, %v", p, q, err)
		}
	})
}
