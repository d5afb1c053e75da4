package chain

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
	"github.com/catena-kv/catena/internal/wire/wiretest"
)

// A backup's read of a volume: the tail freezes the volume at its first
// page and every later page of that export reads the frozen state,
// whatever changes meanwhile; the last page ends the export; a page of
// an export the tail does not hold starts a new one and says so.
func TestExportReadsOneFrozenStateAtTheTail(t *testing.T) {
	store := storage.NewMemory()
	n := wire.ExportPageObjects + 10
	for i := range n {
		store.Set(fmt.Sprintf("k%05d", i), kv.Object{Value: []byte("old"), Exists: true})
	}
	store.Set(wire.ReservedKeyPrefix+"internal", kv.Object{Value: []byte("v"), Exists: true})
	store.Set("k00001", kv.Object{Value: []byte("soon"), Exists: true, Expires: 99})
	r := testReplica("t", store, true, ReadsAtTail)
	r.Adopt(1, wiretest.Config(1, "", "h", "t"))
	r.Step(2, "h", &wire.SyncReply{Volume: 0, Epoch: 1})
	store.SetMeta(storage.Meta{Applied: 40}) // (as if it had applied 40 updates)
	reqNo := uint64(0)
	export := func(at wire.Time, id int64, from string) (wire.ErrCode, wire.ExportPage) {
		t.Helper()
		reqNo++
		out := r.Step(at, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: reqNo,
			Op: wire.Op{Kind: wire.OpExport, Key: from, Delta: id}})
		rep := out.Messages[0].Msg.(*wire.ClientReply)
		if rep.Err != wire.ErrNone {
			return rep.Err, wire.ExportPage{}
		}
		page, err := wire.DecodeExportPage(rep.Result.Value)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Err, page
	}

	code, first := export(3, 7, "")
	if code != wire.ErrNone || !first.Began || !first.More || first.SN != 40 || len(first.Objects) != wire.ExportPageObjects {
		t.Fatalf("first page: %v, began %v more %v sn %d, %d objects", code, first.Began, first.More, first.SN, len(first.Objects))
	}
	if o := first.Objects[1]; o.Key != "k00001" || string(o.Value) != "soon" || o.Expires != 99 {
		t.Errorf("object with a deadline exported as %+v", o)
	}
	// The volume changes after the export froze it.
	store.Set(fmt.Sprintf("k%05d", n-1), kv.Object{Value: []byte("new"), Exists: true})
	store.Set("k99999", kv.Object{Value: []byte("new"), Exists: true})
	store.SetMeta(storage.Meta{Applied: 41})

	last := first.Objects[len(first.Objects)-1].Key
	code, second := export(4, 7, last+"\x00")
	if code != wire.ErrNone || second.Began || second.More || second.SN != 40 || len(second.Objects) != n-wire.ExportPageObjects {
		t.Fatalf("second page: %v, began %v more %v sn %d, %d objects", code, second.Began, second.More, second.SN, len(second.Objects))
	}
	for _, o := range second.Objects {
		if string(o.Value) != "old" {
			t.Errorf("second page holds %s = %q, written after the export began", o.Key, o.Value)
		}
	}
	if r.Exports() != 0 {
		t.Errorf("the last page left %d exports held", r.Exports())
	}
	// Asked again, the last page finds no export: a new one, at the new state.
	if code, again := export(5, 7, last+"\x00"); code != wire.ErrNone || !again.Began || again.SN != 41 || len(again.Objects) != n-wire.ExportPageObjects+1 {
		t.Errorf("a page of an export the tail does not hold: %v, began %v sn %d, %d objects", code, again.Began, again.SN, len(again.Objects))
	}

	// At most exportsMax exports at once; an idle one is dropped on a tick.
	for id := range int64(exportsMax) {
		if code, _ := export(6, 100+id, ""); code != wire.ErrNone {
			t.Fatalf("export %d: %v", id, code)
		}
	}
	if code, _ := export(6, 200, ""); code != wire.ErrUnavailable {
		t.Errorf("one export beyond the bound: %v, want ErrUnavailable", code)
	}
	r.Tick(6 + exportIdle)
	if r.Exports() != 0 {
		t.Errorf("%d idle exports held after %v", r.Exports(), exportIdle)
	}
	// A tail that stops being the tail drops its exports.
	export(7, 300, "")
	r.Adopt(8, wiretest.Config(2, "", "t", "x"))
	if r.Exports() != 0 {
		t.Errorf("%d exports held by a former tail", r.Exports())
	}
	if code, _ := export(9, 300, ""); code != wire.ErrWrongEpoch {
		t.Errorf("export at the old epoch: %v", code)
	}

	h := testReplica("h", storage.NewMemory(), true, ReadsCleanAtAnyMember)
	h.Adopt(1, wiretest.Config(1, "", "h", "t"))
	out := h.Step(3, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: 1, Op: wire.Op{Kind: wire.OpExport, Delta: 1}})
	if got := out.Messages[0].Msg.(*wire.ClientReply).Err; got != wire.ErrNotTail {
		t.Errorf("an export at the head: %v, want ErrNotTail", got)
	}
	out = h.Step(3, "client", &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: 2, Op: wire.Op{Kind: wire.OpExport}})
	if got := out.Messages[0].Msg.(*wire.ClientReply).Err; got != wire.ErrBadRequest {
		t.Errorf("an export without an id: %v, want ErrBadRequest", got)
	}
}
