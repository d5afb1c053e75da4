package storage

import (
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// shipLogUpdate is an update with every field set, as a geo volume's ship
// log holds them.
func shipLogUpdate() wire.Update {
	return wire.Update{
		SN: 41, Key: "k", Changed: true, Value: []byte("value"), Client: 7, ReqNo: 9, AckedBelow: 8, ReplyTo: "client/c1",
		Result: wire.Result{Status: 1, Found: true, SN: 41, Stamp: wire.Stamp{Origin: 2, N: 17, TS: 12345}},
		Stamp:  wire.Stamp{Origin: 2, N: 17, TS: 12345},
		Deps:   []wire.Dep{{Key: "a", Origin: 1, N: 3}, {Key: "b", Origin: 2, N: 16}},
		Epoch:  5,
	}
}

// The ship log's records have an encoding of their own (v2), so a change
// of the wire codec leaves a stored log readable (issue 33); every field
// round-trips, and a record of another update, a truncated one or an
// unknown version is corruption.
func TestShipLogRecordV2(t *testing.T) {
	for _, u := range []wire.Update{shipLogUpdate(), {Stamp: wire.Stamp{Origin: 2, N: 17}}, func() wire.Update {
		u := shipLogUpdate()
		u.Value, u.Changed, u.Deleted, u.Deps = nil, true, true, nil
		return u
	}()} {
		b, err := encodeShipLogRecord(u)
		if err != nil || b[0] != shipLogV2 {
			t.Fatalf("encode: %x, %v; want a v2 record", b, err)
		}
		got, err := decodeShipLogRecord(b, 2, 17)
		if err != nil || !reflect.DeepEqual(got, u) {
			t.Fatalf("decode: %+v, %v\nwant %+v", got, err, u)
		}
		if _, err := decodeShipLogRecord(b, 2, 18); err == nil || !strings.Contains(err.Error(), "holds update 17 of site 2") {
			t.Errorf("a record read as update 18: %v; want corruption naming what it holds", err)
		}
		for n := range len(b) {
			if _, err := decodeShipLogRecord(b[:n], 2, 17); err == nil {
				t.Fatalf("a record cut to %d of %d bytes decoded", n, len(b))
			}
		}
	}
	if _, err := decodeShipLogRecord([]byte{9, 0}, 2, 17); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("version 9: %v; want unknown format", err)
	}
}

// A v1 ship log record (a wire Forward, written before release 0.1.0)
// is refused, naming the release, rather than misread.
func TestShipLogRecordV1Refused(t *testing.T) {
	b, err := hex.DecodeString("010300000129016b01000576616c756507090809636c69656e742f6331010100290211b9600211b96002016101030162021005")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeShipLogRecord(b, 2, 17); err == nil || !strings.Contains(err.Error(), "before release 0.1.0") {
		t.Fatalf("v1 record: %v", err)
	}
}
