package storage

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

func TestEngineContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testEngineContract(t, func(t *testing.T) Engine { return NewMemoryEngine() })
	})
	t.Run("crashable memory", func(t *testing.T) {
		testEngineContract(t, func(t *testing.T) Engine { return NewCrashableMemoryEngine() })
	})
	for name, cacheBytes := range map[string]int64{"pebble": 0, "pebble with a small object cache": 400} {
		t.Run(name, func(t *testing.T) {
			testEngineContract(t, func(t *testing.T) Engine {
				e, err := OpenPebble(PebbleOptions{Dir: "db", Sync: true, FS: vfs.NewMem(), ObjectCacheBytes: cacheBytes})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := e.Close(); err != nil {
						t.Error(err)
					}
				})
				return e
			})
		})
	}
}

// testEngineContract checks the behaviour the Store and Engine comments
// promise. open returns a new, empty engine, closed by the test's cleanup.
// Some steps Commit on purpose, so that changes apply both to committed
// data and to data still pending.
func testEngineContract(t *testing.T, open func(t *testing.T) Engine) {
	t.Run("objects", func(t *testing.T) { testContractObjects(t, open) })
	t.Run("snapshot", func(t *testing.T) { testContractSnapshot(t, open) })
	t.Run("keys", func(t *testing.T) { testContractKeys(t, open) })
	t.Run("export", func(t *testing.T) { testContractExport(t, open) })
	t.Run("meta", func(t *testing.T) { testContractMeta(t, open) })
	t.Run("geo", func(t *testing.T) { testContractGeo(t, open) })
	t.Run("sessions", func(t *testing.T) { testContractSessions(t, open) })
	t.Run("delete one outcome", func(t *testing.T) { testContractDeleteOneOutcome(t, open) })
	t.Run("reset", func(t *testing.T) { testContractReset(t, open) })
	t.Run("volumes", func(t *testing.T) { testContractVolumes(t, open) })
	t.Run("commit", func(t *testing.T) { testContractCommit(t, open) })
	t.Run("deadlines", func(t *testing.T) { testContractDeadlines(t, open) })
	t.Run("types", func(t *testing.T) { testContractTypes(t, open) })
}

// testContractDeadlines: an object's deadline is kept with it, in
// snapshots too, and Deadlines lists the existing objects that have one
// in time order, following every rewrite and deletion.
func testContractDeadlines(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(2)
	if got := s.Deadlines(10); len(got) != 0 {
		t.Fatalf("Deadlines of an empty volume: %v", got)
	}
	s.Set("plain", obj("p"))
	s.Set("a", kv.Object{Value: []byte("1"), Exists: true, Expires: 300})
	s.Set("b", kv.Object{Value: []byte("2"), Exists: true, Expires: 100})
	commit(t, e)
	s.Set("c", kv.Object{Value: []byte("3"), Exists: true, Expires: 200})
	wantObject(t, s, "a", kv.Object{Value: []byte("1"), Exists: true, Expires: 300})
	wantObject(t, s, "plain", obj("p"))
	want := func(w ...KeyDeadline) {
		t.Helper()
		if got := s.Deadlines(10); !slices.Equal(got, w) {
			t.Fatalf("Deadlines = %v, want %v", got, w)
		}
	}
	want(KeyDeadline{"b", 100}, KeyDeadline{"c", 200}, KeyDeadline{"a", 300})
	if got := s.Deadlines(1); !slices.Equal(got, []KeyDeadline{{"b", 100}}) {
		t.Fatalf("Deadlines(1) = %v", got)
	}
	s.Set("b", kv.Object{Value: []byte("2"), Exists: true, Expires: 400}) // a later deadline
	s.Set("c", obj("3"))                                                  // persisted
	s.Set("a", kv.Object{})                                               // deleted
	commit(t, e)
	want(KeyDeadline{"b", 400})
	wantObject(t, s, "c", obj("3"))
	wantObject(t, s, "a", kv.Object{})
	wantSnapshot(t, s.Snapshot(), []KeyObject{
		{Key: "b", Object: kv.Object{Value: []byte("2"), Exists: true, Expires: 400}},
		{Key: "c", Object: obj("3")},
		{Key: "plain", Object: obj("p")},
	})
	s.Reset()
	want()
}

// testContractTypes: an object's type is kept with it, in snapshots
// too, and a rewrite as a string or a delete drops it.
func testContractTypes(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(3)
	h := kv.Object{Value: []byte("\x00"), Exists: true, Type: wire.TypeHash}
	s.Set("h", h)
	s.Set("h2", h)
	s.Set("plain", obj("p"))
	commit(t, e)
	wantObject(t, s, "h", h)
	wantObject(t, s, "plain", obj("p"))
	wantSnapshot(t, s.Snapshot(), []KeyObject{{Key: "h", Object: h}, {Key: "h2", Object: h}, {Key: "plain", Object: obj("p")}})
	s.Set("h", obj("now a string"))
	s.Set("h2", kv.Object{})
	s.Set("h2", obj("x"))
	wantObject(t, s, "h", obj("now a string"))
	wantObject(t, s, "h2", obj("x"))
}

func testContractObjects(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(1)
	if got := s.Get("a"); got.Exists || got.Value != nil {
		t.Fatalf("Get of a missing key = %+v, want the zero Object", got)
	}
	s.Set("a", obj("1"))
	wantObject(t, s, "a", obj("1"))
	s.Set("a", obj("2")) // overwrite, pending
	wantObject(t, s, "a", obj("2"))
	commit(t, e)
	wantObject(t, s, "a", obj("2"))
	s.Set("a", obj("3")) // overwrite committed
	wantObject(t, s, "a", obj("3"))

	// Exists false deletes, whatever the Value; deleting twice is fine.
	s.Set("a", kv.Object{Value: []byte("ignored")})
	wantObject(t, s, "a", kv.Object{})
	s.Set("a", kv.Object{})
	wantObject(t, s, "a", kv.Object{})
	s.Set("never", kv.Object{})
	wantObject(t, s, "never", kv.Object{})

	// An empty value exists.
	s.Set("empty", kv.Object{Value: []byte{}, Exists: true})
	wantObject(t, s, "empty", kv.Object{Value: []byte{}, Exists: true})

	// Binary keys and values survive as they are.
	bin := "\x00k\xff\x00"
	s.Set(bin, kv.Object{Value: []byte{0, 1, 0xff}, Exists: true})
	wantObject(t, s, bin, kv.Object{Value: []byte{0, 1, 0xff}, Exists: true})

	// The returned slice is the caller's.
	s.Set("b", obj("bee"))
	got := s.Get("b")
	got.Value[0] = 'X'
	wantObject(t, s, "b", obj("bee"))

	// The same volume id gives the same data.
	wantObject(t, e.Volume(1), "b", obj("bee"))
	// Another volume does not see it.
	wantObject(t, e.Volume(2), "b", kv.Object{})
}

func testContractSnapshot(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(3)
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Fatalf("Snapshot of an empty store = %v", snap)
	}
	for _, k := range []string{"m", "b\x00", "\xff", "a", "b", "zz", "gone"} {
		s.Set(k, obj("v-"+k))
	}
	commit(t, e)
	s.Set("c", obj("v-c")) // pending
	s.Set("gone", kv.Object{})
	s.Set("m", obj("v-m2"))
	e.Volume(2).Set("x", obj("other volume"))
	e.Volume(4).Set("x", obj("other volume"))

	want := []KeyObject{
		{"a", obj("v-a")}, {"b", obj("v-b")}, {"b\x00", obj("v-b\x00")}, {"c", obj("v-c")},
		{"m", obj("v-m2")}, {"zz", obj("v-zz")}, {"\xff", obj("v-\xff")},
	}
	snap := s.Snapshot()
	wantSnapshot(t, snap, want)

	// Later writes do not change a snapshot taken earlier...
	s.Set("a", obj("changed"))
	s.Set("b", kv.Object{})
	s.Set("0", obj("new"))
	commit(t, e)
	wantSnapshot(t, snap, want)
	// ...and changing the snapshot does not change the store.
	snap[0].Object.Value[0] = 'X'
	wantObject(t, s, "a", obj("changed"))
	wantSnapshot(t, s.Snapshot(), []KeyObject{
		{"0", obj("new")}, {"a", obj("changed")}, {"b\x00", obj("v-b\x00")}, {"c", obj("v-c")},
		{"m", obj("v-m2")}, {"zz", obj("v-zz")}, {"\xff", obj("v-\xff")},
	})
}

// testContractExport: an export is frozen at the last commit (or later),
// pages through the volume's existing objects in key order with their
// deadlines and types, stays frozen while the store changes, and leaves
// tombstones and other volumes out.
func testContractExport(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(3)
	empty := s.Export()
	if objs, more := empty.Page("", 10, 1<<20); len(objs) != 0 || more || empty.Applied() != 0 {
		t.Fatalf("export of an empty store: %v, %v, applied %d", objs, more, empty.Applied())
	}
	empty.Close()
	hash := kv.Object{Value: kv.EncodeFields([]kv.Field{{Name: "f", Value: []byte("v")}}), Exists: true, Type: wire.TypeHash}
	expiring := kv.Object{Value: []byte("soon"), Exists: true, Expires: 12345}
	s.Set("a", obj("v-a"))
	s.Set("b", expiring)
	s.Set("c", hash)
	s.Set("d", obj("v-d"))
	s.Set("tomb", kv.Object{Stamp: wire.Stamp{Origin: 1, N: 1, TS: 5}})
	e.Volume(2).Set("a0", obj("other volume"))
	e.Volume(4).Set("a0", obj("other volume"))
	s.SetMeta(Meta{Applied: 7})
	commit(t, e)

	x := s.Export()
	defer x.Close()
	s.Set("a", obj("changed"))
	s.Set("b", kv.Object{})
	s.Set("bb", obj("new"))
	s.SetMeta(Meta{Applied: 9})
	commit(t, e)

	if x.Applied() != 7 {
		t.Fatalf("Applied = %d, want 7", x.Applied())
	}
	want := []KeyObject{{"a", obj("v-a")}, {"b", expiring}, {"c", hash}, {"d", obj("v-d")}}
	var got []KeyObject
	from := ""
	for pages := 0; ; pages++ {
		page, more := x.Page(from, 2, 1<<20)
		if len(page) == 0 || len(page) > 2 || pages > 4 {
			t.Fatalf("page from %q: %v, more %v", from, page, more)
		}
		got = append(got, page...)
		if !more {
			break
		}
		from = page[len(page)-1].Key + "\x00"
	}
	wantSnapshot(t, got, want)
	// A byte limit ends a page early, but a page holds one object at least.
	if page, more := x.Page("", 10, 1); len(page) != 1 || !more {
		t.Fatalf("Page with a 1-byte limit = %v, %v; want one object and more", page, more)
	}
	if page, more := x.Page("c", 10, len("cd")+len("v-d")+len(hash.Value)+1); len(page) != 2 || more {
		t.Fatalf("Page from c = %v, %v; want c and d, no more", page, more)
	}
	// The pages are the caller's.
	page, _ := x.Page("a", 1, 1<<20)
	page[0].Object.Value[0] = 'X'
	again, _ := x.Page("a", 1, 1<<20)
	wantSnapshot(t, again, []KeyObject{{"a", obj("v-a")}})
	// A new export sees the new state.
	y := s.Export()
	defer y.Close()
	if page, _ := y.Page("", 10, 1<<20); y.Applied() != 9 || len(page) != 4 || page[1].Key != "bb" {
		t.Fatalf("new export: applied %d, %v", y.Applied(), page)
	}
}

// Keys pages through a volume's existing keys in order from a key on,
// committed or pending, without tombstones or other volumes' keys.
func testContractKeys(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(1)
	if keys, more := s.Keys("", 10); len(keys) != 0 || more {
		t.Fatalf("Keys of an empty store = %q, %v", keys, more)
	}
	for _, k := range []string{"b", "a", "c", "ab", "d"} {
		s.Set(k, kv.Object{Value: []byte("v"), Exists: true})
	}
	e.Volume(0).Set("aa", kv.Object{Value: []byte("v"), Exists: true})
	e.Volume(2).Set("aa", kv.Object{Value: []byte("v"), Exists: true})
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Set("c", kv.Object{}) // deleted, pending
	s.Set("e", kv.Object{Value: []byte("v"), Exists: true})
	s.Set("g", kv.Object{Stamp: wire.Stamp{Origin: 1, N: 3, TS: 5}}) // a tombstone
	for _, tc := range []struct {
		from string
		max  int
		want []string
		more bool
	}{
		{"", 10, []string{"a", "ab", "b", "d", "e"}, false},
		{"", 2, []string{"a", "ab"}, true},
		{"ab\x00", 2, []string{"b", "d"}, true},
		{"b", 2, []string{"b", "d"}, true},
		{"c", 2, []string{"d", "e"}, false},
		{"a\x00", 1, []string{"ab"}, true},
		{"e\x00", 5, nil, false},
		{"zzz", 5, nil, false},
	} {
		keys, more := s.Keys(tc.from, tc.max)
		if !slices.Equal(keys, tc.want) || more != tc.more {
			t.Errorf("Keys(%q, %d) = %q, %v; want %q, %v", tc.from, tc.max, keys, more, tc.want, tc.more)
		}
	}
}

func testContractMeta(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(5)
	if m, ok := s.Meta(); ok {
		t.Fatalf("Meta of an empty store = %+v, true", m)
	}
	m := Meta{
		Config:  wire.Config{Volume: 5, Epoch: 9, Chain: []wire.NodeID{"n1:7000", "n2:7000", "n3:7000"}, Joining: "n4:7000"},
		Applied: 1234567,
	}
	s.SetMeta(m)
	wantMeta(t, s, m)
	commit(t, e)
	wantMeta(t, s, m)

	// The returned chain is the caller's.
	got, _ := s.Meta()
	got.Config.Chain[0] = "changed"
	wantMeta(t, s, m)

	// Overwrite with a chain of one, no joining server, large numbers.
	m2 := Meta{Config: wire.Config{Volume: 5, Epoch: 1 << 60, Chain: []wire.NodeID{"solo"}}, Applied: 1<<64 - 1}
	s.SetMeta(m2)
	wantMeta(t, s, m2)
	// Empty and nil chains are kept apart.
	m3 := Meta{Config: wire.Config{Volume: 5, Epoch: 2, Chain: []wire.NodeID{}}}
	s.SetMeta(m3)
	wantMeta(t, s, m3)
	s.SetMeta(Meta{})
	wantMeta(t, s, Meta{})

	if _, ok := e.Volume(6).Meta(); ok {
		t.Fatal("another volume has the meta")
	}
}

func testContractGeo(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(8)
	st := func(n uint64) wire.Stamp { return wire.Stamp{Origin: 2, N: n, TS: 100 + n} }
	s.Set("plain", obj("p"))
	s.Set("a", kv.Object{Value: []byte("1"), Exists: true, Stamp: st(1)})
	wantObject(t, s, "a", kv.Object{Value: []byte("1"), Exists: true, Stamp: st(1)})
	commit(t, e)
	// A delete with a stamp leaves a tombstone; one without removes it.
	s.Set("a", kv.Object{Value: []byte("ignored"), Stamp: st(2)})
	wantObject(t, s, "a", kv.Object{Stamp: st(2)})
	s.Set("b", kv.Object{Value: []byte("2"), Exists: true, Stamp: st(3)})
	s.Set("c", kv.Object{Stamp: st(4)})
	s.Set("c", kv.Object{})
	wantObject(t, s, "c", kv.Object{})
	wantObject(t, s, "plain", obj("p"))
	wantSnapshot(t, s.Snapshot(), []KeyObject{
		{"a", kv.Object{Stamp: st(2)}}, {"b", kv.Object{Value: []byte("2"), Exists: true, Stamp: st(3)}}, {"plain", obj("p")},
	})

	// The shipping log keeps each origin's updates by Stamp.N until
	// trimmed; the origins' logs are apart.
	if got := s.ShipLog(2, 1, 10); len(got) != 0 {
		t.Fatalf("ShipLog of an empty log = %+v", got)
	}
	s.TrimShipLog(2, 3) // trimming a log never appended to changes nothing
	for n := uint64(1); n <= 5; n++ {
		s.AppendShipLog(wire.Update{SN: wire.SN(10 + n), Key: "k", Changed: true, Value: []byte{byte(n)}, Stamp: st(n),
			Deps: []wire.Dep{{Key: "d", Origin: 1, N: n}}})
	}
	for n := uint64(1); n <= 3; n++ {
		s.AppendShipLog(wire.Update{Key: "r", Changed: true, Value: []byte{byte(n)}, Stamp: wire.Stamp{Origin: 3, N: n, TS: n}})
	}
	commit(t, e)
	got := s.ShipLog(2, 2, 2)
	if len(got) != 2 || got[0].Stamp.N != 2 || got[1].Stamp.N != 3 || got[1].Value[0] != 3 || got[1].Deps[0].N != 3 {
		t.Fatalf("ShipLog(2, 2, 2) = %+v", got)
	}
	s.TrimShipLog(2, 3)
	if got := s.ShipLog(2, 1, 10); len(got) != 2 || got[0].Stamp.N != 4 {
		t.Fatalf("ShipLog(2, 1) after trimming through 3 = %+v, want 4 and 5", got)
	}
	if got := s.ShipLog(2, 4, 10); len(got) != 2 || got[1].Stamp.N != 5 {
		t.Fatalf("ShipLog(2, 4) after trimming through 3 = %+v", got)
	}
	if got := s.ShipLog(3, 1, 10); len(got) != 3 || got[2].Stamp != (wire.Stamp{Origin: 3, N: 3, TS: 3}) {
		t.Fatalf("ShipLog(3, 1) after trimming site 2's log = %+v, want site 3's 1..3", got)
	}
	s.TrimShipLog(3, 1)
	if got := s.ShipLog(3, 1, 10); len(got) != 2 || got[0].Stamp.N != 2 {
		t.Fatalf("ShipLog(3, 1) after trimming through 1 = %+v, want 2 and 3", got)
	}

	// The vector, the mode, k and the sites are part of the meta;
	// outcomes keep their stamps.
	m := Meta{Config: wire.Config{Volume: 8, Epoch: 2, Chain: []wire.NodeID{"a"}, Mode: wire.ModeCausal, K: 2, Sites: []wire.SiteID{1, 3}}, Applied: 9,
		Vector: wire.Vector{{Site: 1, N: 4}, {Site: 2, N: 5}}}
	s.SetMeta(m)
	wantMeta(t, s, m)
	s.SetSession(3, 1, 9)
	s.SetOutcome(3, 1, wire.Result{SN: 9, Stamp: st(5)})
	commit(t, e)
	wantMeta(t, s, m)
	wantSessions(t, s, []wire.SessionRecord{{Client: 3, AckedBelow: 1, LastSN: 9,
		Outcomes: []wire.Outcome{oc(1, wire.Result{SN: 9, Stamp: st(5)})}}})

	s.Reset()
	wantEmpty(t, s)
	wantObject(t, s, "a", kv.Object{})
	if got := s.ShipLog(2, 1, 10); len(got) != 0 || len(s.ShipLog(3, 1, 10)) != 0 {
		t.Fatalf("ShipLog after Reset = %+v", got)
	}
}

func testContractSessions(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(7)
	if got := s.Sessions(); len(got) != 0 {
		t.Fatalf("Sessions of an empty store = %+v", got)
	}
	// Clients and request numbers chosen so that byte-wise little-endian
	// order would differ from numeric order.
	const c1, c2, c3 = wire.ClientID(1), wire.ClientID(256), wire.ClientID(1<<64 - 1)
	r1 := wire.Result{Status: wire.StatusOK, Found: true, SN: 10}
	r2 := wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("current"), SN: 11}
	r3 := wire.Result{Status: wire.StatusOK, Value: []byte{}, SN: 12}
	r4 := wire.Result{Status: wire.StatusNotInteger, Found: true, SN: 1<<64 - 1}

	s.SetSession(c3, 0, 12)
	s.SetSession(c2, 5, 11)
	s.SetOutcome(c2, 256, r2)
	s.SetOutcome(c2, 5, r1)
	s.SetOutcome(c2, 1<<40, r3)
	commit(t, e)
	s.SetOutcome(c3, 1, r4)
	s.SetSession(c1, 0, 0)
	want := []wire.SessionRecord{
		{Client: c1},
		{Client: c2, AckedBelow: 5, LastSN: 11, Outcomes: []wire.Outcome{oc(5, r1), oc(256, r2), oc(1<<40, r3)}},
		{Client: c3, LastSN: 12, Outcomes: []wire.Outcome{oc(1, r4)}},
	}
	wantSessions(t, s, want)

	// The returned values are the caller's.
	t.Run("no aliasing", func(t *testing.T) {
		s.Sessions()[1].Outcomes[1].Result.Value[0] = 'X'
		if got := s.Sessions()[1].Outcomes[1].Result.Value; string(got) != "current" {
			t.Fatalf("after changing a returned outcome value, the stored one is %q", got)
		}
	})

	// A header update keeps the outcomes.
	s.SetSession(c2, 6, 13)
	want[1].AckedBelow, want[1].LastSN = 6, 13
	wantSessions(t, s, want)

	// SetOutcome without a header creates the session with a zero header.
	const c4 = wire.ClientID(1 << 32)
	s.SetOutcome(c4, 3, r1)
	want = append(want[:2], wire.SessionRecord{Client: c4, Outcomes: []wire.Outcome{oc(3, r1)}}, want[2])
	wantSessions(t, s, want)

	// DeleteSession forgets the header and the outcomes of one client.
	s.DeleteSession(c3)
	s.DeleteSession(wire.ClientID(12345)) // unknown: no-op
	want = want[:3]
	wantSessions(t, s, want)
	// A deleted session comes back empty, without its old outcomes.
	s.SetOutcome(c3, 2, r2)
	want = append(want, wire.SessionRecord{Client: c3, Outcomes: []wire.Outcome{oc(2, r2)}})
	wantSessions(t, s, want)
	// An outcome overwritten.
	s.SetOutcome(c3, 2, r3)
	want[3].Outcomes[0].Result = r3
	wantSessions(t, s, want)

	if got := e.Volume(8).Sessions(); len(got) != 0 {
		t.Fatalf("another volume has sessions %+v", got)
	}
}

func testContractDeleteOneOutcome(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	s := e.Volume(1)
	r := wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("v"), SN: 3}
	s.SetSession(7, 1, 3)
	s.SetOutcome(7, 1, r)
	s.SetOutcome(7, 2, r)
	s.DeleteOutcome(7, 1)
	s.DeleteOutcome(7, 99) // absent: nothing happens
	got := s.Sessions()
	if len(got) != 1 || len(got[0].Outcomes) != 1 || got[0].Outcomes[0].ReqNo != 2 {
		t.Fatalf("sessions after deleting outcome 1: %+v", got)
	}
}

func testContractReset(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	// Volume 0 and the largest volume id test the edges of the ranges.
	vols := []wire.VolumeID{0, 1, 2, 1<<32 - 2, 1<<32 - 1}
	for _, v := range vols {
		fill(e.Volume(v), v)
	}
	commit(t, e)
	e.Volume(1).Set("pending", obj("p")) // pending data is reset too
	e.Volume(1).SetOutcome(9, 9, wire.Result{})
	e.Volume(1).Reset()
	e.Volume(1<<32 - 1).Reset()
	for _, v := range []wire.VolumeID{1, 1<<32 - 1} {
		wantEmpty(t, e.Volume(v))
	}
	for _, v := range []wire.VolumeID{0, 2, 1<<32 - 2} {
		wantFilled(t, e.Volume(v), v)
	}
	wantVolumes(t, e, []wire.VolumeID{0, 2, 1<<32 - 2})
	commit(t, e)
	wantEmpty(t, e.Volume(1))

	// A reset volume is usable again.
	fill(e.Volume(1), 1)
	wantFilled(t, e.Volume(1), 1)
	wantVolumes(t, e, []wire.VolumeID{0, 1, 2, 1<<32 - 2})
	// Resetting an empty volume is fine.
	e.Volume(77).Reset()
	wantEmpty(t, e.Volume(77))
}

func testContractVolumes(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	wantVolumes(t, e, nil)
	// Volumes without meta are not listed, whatever else they hold.
	e.Volume(3).Set("k", obj("v"))
	e.Volume(3).SetSession(1, 0, 0)
	wantVolumes(t, e, nil)
	for _, v := range []wire.VolumeID{1 << 31, 7, 256, 2, 0} {
		e.Volume(v).SetMeta(Meta{Config: wire.Config{Volume: v}})
	}
	wantVolumes(t, e, []wire.VolumeID{0, 2, 7, 256, 1 << 31})
	commit(t, e)
	wantVolumes(t, e, []wire.VolumeID{0, 2, 7, 256, 1 << 31})
	e.Volume(7).Reset()
	wantVolumes(t, e, []wire.VolumeID{0, 2, 256, 1 << 31})
}

func testContractCommit(t *testing.T, open func(t *testing.T) Engine) {
	e := open(t)
	commit(t, e) // nothing to commit
	commit(t, e)
	fill(e.Volume(1), 1)
	commit(t, e)
	commit(t, e)
	wantFilled(t, e.Volume(1), 1)
}

func oc(reqNo uint64, r wire.Result) wire.Outcome { return wire.Outcome{ReqNo: reqNo, Result: r} }

func obj(v string) kv.Object { return kv.Object{Value: []byte(v), Exists: true} }

func commit(t *testing.T, e Engine) {
	t.Helper()
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
}

// sameObject compares objects; Memory keeps a nil Value of an existing
// object as nil, Pebble returns it as empty, so nil and empty are the same.
func sameObject(a, b kv.Object) bool {
	return a.Exists == b.Exists && bytes.Equal(a.Value, b.Value) && a.Stamp == b.Stamp && a.Expires == b.Expires && a.Type == b.Type
}

func wantObject(t *testing.T, s Store, key string, want kv.Object) {
	t.Helper()
	if got := s.Get(key); !sameObject(got, want) {
		t.Fatalf("Get(%q) = %+v, want %+v", key, got, want)
	}
}

func wantSnapshot(t *testing.T, got, want []KeyObject) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Key == want[i].Key && sameObject(got[i].Object, want[i].Object)
	}
	if !ok {
		t.Fatalf("Snapshot =\n%+v\nwant\n%+v", got, want)
	}
}

func wantMeta(t *testing.T, s Store, want Meta) {
	t.Helper()
	if got, ok := s.Meta(); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Meta = %#v, %v; want %#v, true", got, ok, want)
	}
}

func wantSessions(t *testing.T, s Store, want []wire.SessionRecord) {
	t.Helper()
	if got := s.Sessions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Sessions =\n%+v\nwant\n%+v", got, want)
	}
}

func wantVolumes(t *testing.T, e Engine, want []wire.VolumeID) {
	t.Helper()
	if got := e.Volumes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Volumes = %v, want %v", got, want)
	}
}

// fill stores objects, meta and sessions that depend on v.
func fill(s Store, v wire.VolumeID) {
	s.Set("k", kv.Object{Value: []byte{byte(v)}, Exists: true})
	s.Set("k2", obj("two"))
	s.SetMeta(filledMeta(v))
	s.SetSession(wire.ClientID(v)+1, 3, wire.SN(v))
	s.SetOutcome(wire.ClientID(v)+1, 3, wire.Result{SN: wire.SN(v), Value: []byte{byte(v)}})
	s.SetOutcome(wire.ClientID(v)+1, 4, wire.Result{SN: wire.SN(v) + 1})
}

func filledMeta(v wire.VolumeID) Meta {
	return Meta{Config: wire.Config{Volume: v, Epoch: 3, Chain: []wire.NodeID{"a", "b", "c"}}, Applied: wire.SN(v) + 1}
}

func wantFilled(t *testing.T, s Store, v wire.VolumeID) {
	t.Helper()
	wantSnapshot(t, s.Snapshot(), []KeyObject{{"k", kv.Object{Value: []byte{byte(v)}, Exists: true}}, {"k2", obj("two")}})
	wantMeta(t, s, filledMeta(v))
	wantSessions(t, s, []wire.SessionRecord{{
		Client: wire.ClientID(v) + 1, AckedBelow: 3, LastSN: wire.SN(v),
		Outcomes: []wire.Outcome{
			oc(3, wire.Result{SN: wire.SN(v), Value: []byte{byte(v)}}),
			oc(4, wire.Result{SN: wire.SN(v) + 1}),
		},
	}})
}

func wantEmpty(t *testing.T, s Store) {
	t.Helper()
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Fatalf("Snapshot = %+v, want empty", snap)
	}
	wantObject(t, s, "k", kv.Object{})
	if m, ok := s.Meta(); ok {
		t.Fatalf("Meta = %+v, true; want none", m)
	}
	if got := s.Sessions(); len(got) != 0 {
		t.Fatalf("Sessions = %+v, want none", got)
	}
}
