package chain

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// A scan is answered at the tail only, a page at a time in key order
// from its start key on: Next is the last key the page examined (matched
// or not; the next page starts at wire.ScanAfter(Next)), More says keys
// follow, a pattern filters what the page examined, and keys with
// the reserved prefix are never listed.
func TestScanPagesAtTheTail(t *testing.T) {
	store := storage.NewMemory()
	for _, k := range []string{"a1", "a2", "b1", "a3", wire.ReservedKeyPrefix + "internal"} {
		store.Set(k, kv.Object{Value: []byte("v"), Exists: true})
	}
	r := testReplica("t", store, true, ReadsAtTail)
	r.Adopt(1, wiretest.Config(1, "", "h", "t"))
	r.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	scan := func(at wire.NodeID, from, match string, count int64) (wire.ErrCode, wire.ScanPage) {
		t.Helper()
		out := r.Step(3, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: 1,
			Op: wire.Op{Kind: wire.OpScan, Key: from, Value: []byte(match), Delta: count}})
		rep := out.Messages[0].Msg.(*wire.ClientReply)
		if rep.Err != wire.ErrNone {
			return rep.Err, wire.ScanPage{}
		}
		page, err := wire.DecodeScanPage(rep.Result.Value)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Err, page
	}
	after := wire.ScanAfter
	for _, tc := range []struct {
		from, match string
		count       int64
		want        wire.ScanPage
	}{
		{"", "", 10, wire.ScanPage{Keys: []string{"a1", "a2", "a3", "b1"}, Next: "b1"}},
		{"", "", 2, wire.ScanPage{Keys: []string{"a1", "a2"}, Next: "a2", More: true}},
		{after("a2"), "", 2, wire.ScanPage{Keys: []string{"a3", "b1"}, Next: "b1"}},
		{"a2", "", 2, wire.ScanPage{Keys: []string{"a2", "a3"}, Next: "a3", More: true}},
		{"", "b*", 2, wire.ScanPage{Keys: []string{}, Next: "a2", More: true}},
		{after("a2"), "b*", 2, wire.ScanPage{Keys: []string{"b1"}, Next: "b1"}},
		{after("b1"), "", 5, wire.ScanPage{Keys: []string{}, Next: after("b1")}},
	} {
		code, page := scan("t", tc.from, tc.match, tc.count)
		if code != wire.ErrNone || !slices.Equal(page.Keys, tc.want.Keys) || page.Next != tc.want.Next || page.More != tc.want.More {
			t.Errorf("scan from %q match %q count %d: %v %+v, want %+v", tc.from, tc.match, tc.count, code, page, tc.want)
		}
	}
	if wire.ReservedKeyPrefix != "\x00" || firstUserKey <= wire.ReservedKeyPrefix+"\xff" {
		t.Errorf("firstUserKey %q does not follow every key with the reserved prefix %q", firstUserKey, wire.ReservedKeyPrefix)
	}
	for _, bad := range []struct {
		from  string
		count int64
	}{{"", 0}, {"", wire.ScanCountMax + 1}, {wire.ReservedKeyPrefix + "internal", 5}} {
		if code, _ := scan("t", bad.from, "", bad.count); code != wire.ErrBadRequest {
			t.Errorf("a scan from %q of count %d: %v, want ErrBadRequest", bad.from, bad.count, code)
		}
	}

	h := testReplica("h", storage.NewMemory(), true, ReadsCleanAtAnyMember)
	h.Adopt(1, wiretest.Config(1, "", "h", "t"))
	out := h.Step(3, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: 1, Op: wire.Op{Kind: wire.OpScan, Delta: 5}})
	if got := out.Messages[0].Msg.(*wire.ClientReply).Err; got != wire.ErrNotTail {
		t.Errorf("a scan at the head: %v, want ErrNotTail", got)
	}
}
