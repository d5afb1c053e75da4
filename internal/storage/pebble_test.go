package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

func openPebble(t testing.TB, o PebbleOptions) *PebbleEngine {
	t.Helper()
	e, err := OpenPebble(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func closePebble(t testing.TB, e *PebbleEngine) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// engineState is everything an engine holds, for comparisons.
type engineState map[wire.VolumeID]volumeState

type volumeState struct {
	Objects  []KeyObject
	Meta     Meta
	Sessions []wire.SessionRecord
}

// stateOf reads the volumes with metadata.
func stateOf(e Engine) engineState {
	st := engineState{}
	for _, v := range e.Volumes() {
		s := e.Volume(v)
		m, _ := s.Meta()
		st[v] = volumeState{Objects: s.Snapshot(), Meta: m, Sessions: s.Sessions()}
	}
	return st
}

func wantState(t *testing.T, got, want engineState) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("state after reopen =\n%+v\nwant\n%+v", got, want)
	}
}

// committedWrites applies the same changes to every engine given: two
// volumes with objects, meta and sessions, some overwritten, deleted or
// pruned.
func committedWrites(engines ...Engine) {
	for _, e := range engines {
		for _, v := range []wire.VolumeID{1, 2} {
			s := e.Volume(v)
			for i := range 20 {
				s.Set(fmt.Sprintf("key%02d", i), kv.Object{Value: []byte(fmt.Sprintf("v%d-%d", v, i)), Exists: true})
			}
			s.Set("key05", kv.Object{})
			s.SetMeta(Meta{Config: wire.Config{Volume: v, Epoch: 4, Chain: []wire.NodeID{"a", "b", "c"}, Joining: "d"}, Applied: wire.SN(100 * v), SnapshotInstalled: v%2 == 1, CatchUpTo: wire.SN(v - 1), AppliedEpoch: wire.Epoch(3 * (v - 1))})
			for c := range wire.ClientID(3) {
				s.SetSession(c, 2, wire.SN(c))
				for r := range uint64(4) {
					s.SetOutcome(c, r, wire.Result{Status: wire.StatusOK, Found: r%2 == 0, Value: []byte(fmt.Sprint(r)), SN: wire.SN(r)})
				}
			}
			s.DeleteOutcome(1, 0)
			s.DeleteOutcome(1, 1)
			s.DeleteSession(2)
		}
		// A volume without meta is not listed, but its objects are kept.
		e.Volume(3).Set("orphan", kv.Object{Value: []byte("x"), Exists: true})
	}
}

// uncommittedWrites changes everything committedWrites wrote.
func uncommittedWrites(e Engine) {
	s := e.Volume(1)
	s.Set("key00", kv.Object{Value: []byte("overwritten"), Exists: true})
	s.Set("key01", kv.Object{})
	s.Set("new", kv.Object{Value: []byte("new"), Exists: true})
	s.SetMeta(Meta{Config: wire.Config{Volume: 1, Epoch: 5}, Applied: 999})
	s.SetSession(0, 9, 9)
	s.SetOutcome(7, 1, wire.Result{})
	for r := range uint64(4) {
		s.DeleteOutcome(0, r)
	}
	s.DeleteSession(1)
	e.Volume(2).Reset()
	e.Volume(4).SetMeta(Meta{Config: wire.Config{Volume: 4}})
}

func TestPebbleDurableAcrossReopen(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			o := PebbleOptions{Dir: t.TempDir(), Sync: sync}
			e := openPebble(t, o)
			want := NewMemoryEngine()
			committedWrites(e, want)
			if err := e.Commit(); err != nil {
				t.Fatal(err)
			}
			before := stateOf(e)
			wantState(t, before, stateOf(want))
			if len(before) != 2 || len(before[1].Objects) != 19 || len(before[2].Sessions) != 2 {
				t.Fatalf("unexpected test data: %+v", before)
			}
			uncommittedWrites(e)
			closePebble(t, e)

			e = openPebble(t, o)
			wantState(t, stateOf(e), before)
			if got := e.Volume(3).Get("orphan"); string(got.Value) != "x" {
				t.Fatalf("object of a volume without meta = %+v", got)
			}

			// Uncommitted changes of a second run are lost, committed ones kept.
			uncommittedWrites(e)
			closePebble(t, e)
			e = openPebble(t, o)
			wantState(t, stateOf(e), before)
			uncommittedWrites(e)
			if err := e.Commit(); err != nil {
				t.Fatal(err)
			}
			after := stateOf(e)
			closePebble(t, e)
			e = openPebble(t, o)
			defer closePebble(t, e)
			wantState(t, stateOf(e), after)
			if _, ok := after[2]; ok || len(after) != 2 { // volumes 1 and 4
				t.Fatalf("volume 2 survived its reset: %+v", after)
			}
		})
	}
}

func TestPebbleVolumesSeparate(t *testing.T) {
	o := PebbleOptions{Dir: t.TempDir(), Sync: true}
	e := openPebble(t, o)
	a, b := e.Volume(1), e.Volume(2)
	for _, s := range []Store{a, b} {
		s.Set("shared", kv.Object{Value: []byte(fmt.Sprint(s == a)), Exists: true})
		s.SetSession(1, 1, 1)
		s.SetOutcome(1, 1, wire.Result{SN: 1})
	}
	a.SetMeta(Meta{Config: wire.Config{Volume: 1}})
	b.SetMeta(Meta{Config: wire.Config{Volume: 2}})
	a.Set("only-a", kv.Object{Value: []byte("a"), Exists: true})
	b.DeleteSession(1)
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	closePebble(t, e)

	e = openPebble(t, o)
	defer closePebble(t, e)
	a, b = e.Volume(1), e.Volume(2)
	wantSnapshot(t, a.Snapshot(), []KeyObject{{"only-a", obj("a")}, {"shared", obj("true")}})
	wantSnapshot(t, b.Snapshot(), []KeyObject{{"shared", obj("false")}})
	if got := a.Sessions(); len(got) != 1 || len(got[0].Outcomes) != 1 {
		t.Fatalf("sessions of volume 1 = %+v", got)
	}
	if got := b.Sessions(); len(got) != 0 {
		t.Fatalf("sessions of volume 2 = %+v", got)
	}
	for v, s := range map[wire.VolumeID]Store{1: a, 2: b} {
		if m, _ := s.Meta(); m.Config.Volume != v {
			t.Fatalf("meta of volume %d = %+v", v, m)
		}
	}
}

func TestPebbleClosed(t *testing.T) {
	e := openPebble(t, PebbleOptions{Dir: "db", FS: vfs.NewMem()})
	s := e.Volume(1)
	closePebble(t, e)
	if err := e.Commit(); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if err := e.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	wantPanic(t, "engine is closed", func() { s.Get("k") })
}

// OnCommit sees each commit that wrote something, with its batch's size;
// an empty commit is not reported.
func TestPebbleOnCommit(t *testing.T) {
	type commit struct {
		elapsed time.Duration
		bytes   int
	}
	var commits []commit
	e := openPebble(t, PebbleOptions{Dir: "db", FS: vfs.NewMem(), Sync: true,
		OnCommit: func(elapsed time.Duration, bytes int) { commits = append(commits, commit{elapsed, bytes}) }})
	defer closePebble(t, e)
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(commits) != 0 {
		t.Fatalf("an empty commit was reported: %+v", commits)
	}
	e.Volume(1).Set("key", kv.Object{Value: make([]byte, 1000), Exists: true})
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(commits) != 1 || commits[0].bytes < 1000 || commits[0].elapsed <= 0 {
		t.Fatalf("after one commit of a 1000-byte value: %+v", commits)
	}
}

func TestPebbleOpenErrors(t *testing.T) {
	if _, err := OpenPebble(PebbleOptions{}); err == nil {
		t.Error("OpenPebble without a directory succeeded")
	}
	fs := vfs.NewMem()
	e := openPebble(t, PebbleOptions{Dir: "db", FS: fs})
	defer closePebble(t, e)
	if _, err := OpenPebble(PebbleOptions{Dir: "db", FS: fs}); err == nil {
		t.Error("a second OpenPebble of an open database succeeded")
	}
}

func TestPebbleCorruptionPanics(t *testing.T) {
	e := openPebble(t, PebbleOptions{Dir: "db", FS: vfs.NewMem()})
	defer closePebble(t, e)
	s := e.Volume(1)
	set := func(key, value []byte) {
		if err := e.batch.Set(key, value, nil); err != nil {
			t.Fatal(err)
		}
	}
	set(volumePrefix(kindMeta, 1), []byte{2, 0})
	wantPanic(t, "corrupt meta record: unknown format version 2", func() { s.Meta() })
	set(sessionKey(1, 5), []byte{1, 0x80})
	wantPanic(t, "corrupt session header record: bad varint", func() { s.Sessions() })
	s.SetSession(5, 0, 0)
	set(outcomeKey(1, 5, 1), []byte{1, 0, 0, 0, 0, 9})
	wantPanic(t, "corrupt outcome record: 1 trailing bytes", func() { s.Sessions() })
	s.DeleteSession(5)
	set(outcomeKey(1, 6, 1), encodeResult(wire.Result{}))
	wantPanic(t, "has no session header", func() { s.Sessions() })
}

func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("panic = %v, want one containing %q", r, want)
		}
	}()
	f()
}

// The key layout and the record encodings are on disk: changing them needs
// a format version and a migration, not just new code.
func TestPebbleFormatIsStable(t *testing.T) {
	for _, c := range []struct{ got, want []byte }{
		{objectKey(0x01020304, "k\x00"), []byte("o\x01\x02\x03\x04k\x00")},
		{volumePrefix(kindMeta, 7), []byte("m\x00\x00\x00\x07")},
		{sessionKey(7, 0x0102), []byte("s\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x01\x02")},
		{outcomeKey(7, 1, 3), []byte("r\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03")},
		{prefixEnd([]byte("o\xff\xff\xff\xff")), []byte("p")},
		{prefixEnd([]byte("o\x00\x00\x01\xff")), []byte("o\x00\x00\x02")},
		{
			encodeMeta(Meta{Config: wire.Config{Volume: 7, Epoch: 300, Chain: []wire.NodeID{"a", "bc"}, Joining: "d"}, Applied: 5}),
			[]byte{1, 1, 7, 0xac, 0x02, 5, 2, 1, 'a', 2, 'b', 'c', 1, 'd'},
		},
		{encodeMeta(Meta{}), []byte{1, 0, 0, 0, 0, 0, 0}},
		// The epoch of the last applied update, flag bit 4, comes last.
		{encodeMeta(Meta{Config: wire.Config{Volume: 7, Epoch: 9}, Applied: 5, AppliedEpoch: 8}), []byte{1, 0x10, 7, 9, 5, 0, 0, 8}},
		// A causal or hierarchical volume's k and sites (bit 5), then its
		// mode (bit 6).
		{encodeMeta(Meta{Config: wire.Config{Volume: 7, Epoch: 9, Mode: wire.ModeHierarchical, Sites: []wire.SiteID{1, 2}}}),
			[]byte{1, 0x60, 7, 9, 0, 0, 0, 0, 2, 1, 2, 2}},
		{encodeSession(3, 300), []byte{1, 3, 0xac, 0x02}},
		{
			encodeResult(wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("v"), SN: 9}),
			[]byte{1, 1, 3, 9, 1, 'v'},
		},
		{encodeResult(wire.Result{}), []byte{1, 0, 0, 0, 0}},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("encoded %q, want %q", c.got, c.want)
		}
	}
}

// A meta written before configurations named their mode (no bit 6) takes
// the mode its k and sites imply (wire.ImpliedMode).
func TestMetaWithoutModeTakesTheImpliedMode(t *testing.T) {
	for _, c := range []struct {
		meta []byte
		want wire.Mode
	}{
		{[]byte{1, 0x20, 7, 9, 0, 0, 0, 2, 0}, wire.ModeCausal},             // k = 2, no sites
		{[]byte{1, 0x20, 7, 9, 0, 0, 0, 0, 2, 1, 2}, wire.ModeHierarchical}, // sites 1 and 2, no k
		{[]byte{1, 0, 7, 9, 0, 0, 0}, wire.ModeStrong},
	} {
		m, err := decodeMeta(c.meta)
		if err != nil || m.Config.Mode != c.want {
			t.Errorf("decodeMeta(%x) = %v, %v; want mode %s", c.meta, m.Config, err, c.want)
		}
	}
}

// An unknown mode is corruption.
func TestMetaOfUnknownModeIsRefused(t *testing.T) {
	if m, err := decodeMeta([]byte{1, 0x40, 7, 9, 0, 0, 0, 3}); err == nil {
		t.Fatalf("decodeMeta of mode 3 = %v, want an error", m)
	}
}

// An outcomes record (v2) reads back, and so does a Result v1 under
// its key; truncated, with trailing bytes or request numbers out of
// order it is corruption.
func TestOutcomesRecord(t *testing.T) {
	results := map[uint64]wire.Result{
		7:  {Status: wire.StatusOK, SN: 11},
		9:  {Status: wire.StatusCompareFailed, Found: true, Value: []byte("v"), SN: 1 << 40},
		12: {Status: wire.StatusOK, Value: []byte{}, Expires: 5, Stamp: wire.Stamp{Origin: 1, N: 2, TS: 3}},
		13: {Status: wire.StatusOK, Found: true, Value: bytes.Repeat([]byte("y"), 300), SN: 2}, // a length of two bytes
		20: {Status: wire.StatusOK, SN: 3},
	}
	b := appendOutcomes(nil, 5, []uint64{7, 9, 12, 13, 20}, func(r uint64) wire.Result { return results[r] })
	got, err := decodeOutcomes(nil, 5, b)
	var want []wire.Outcome
	for _, r := range []uint64{7, 9, 12, 13, 20} {
		want = append(want, wire.Outcome{ReqNo: r, Result: results[r]})
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeOutcomes = %+v, %v; want %+v", got, err, want)
	}
	if got, err := decodeOutcomes(nil, 4, encodeResult(results[9])); err != nil || !reflect.DeepEqual(got, []wire.Outcome{{ReqNo: 4, Result: results[9]}}) {
		t.Fatalf("decodeOutcomes of a Result v1 = %+v, %v", got, err)
	}
	for n := range len(b) {
		if _, err := decodeOutcomes(nil, 5, b[:n]); err == nil {
			t.Errorf("record truncated to %d bytes decoded", n)
		}
	}
	for _, bad := range [][]byte{
		append(bytes.Clone(b), 0),
		{outcomesV2, 0},             // no outcomes
		{outcomesV2, 2, 0, 0, 0, 0}, // the same request twice
		appendOutcomes(nil, 5, []uint64{7, 7}, func(r uint64) wire.Result { return results[r] }),
	} {
		if _, err := decodeOutcomes(nil, 5, bad); err == nil {
			t.Errorf("record %x decoded", bad)
		}
	}
}

// Once told the cluster runs at OutcomeGroupsVersion, an engine writes a
// client's outcomes of one commit as one record, writes it again only
// when some are forgotten, and deletes it once none is left; reopened, it
// reads the version back and goes on writing groups, and an old record
// (one outcome, written before) is read and forgotten alike.
func TestPebbleOutcomeGroups(t *testing.T) {
	var sizes []int
	o := PebbleOptions{Dir: "db", FS: vfs.NewMem(), OnCommit: func(_ time.Duration, n int) { sizes = append(sizes, n) }}
	e := openPebble(t, o)
	s := e.Volume(1)
	s.SetSession(3, 1, 1)
	s.SetOutcome(3, 1, wire.Result{SN: 1}) // old format
	commit(t, e)
	e.SetClusterVersion(OutcomeGroupsVersion)
	outcomeKeys := func() int {
		n := 0
		prefix := volumePrefix(kindOutcome, 1)
		e.scan("test", prefix, prefixEnd(prefix), func([]byte, []byte) { n++ })
		return n
	}
	for i := uint64(2); i <= 17; i++ {
		s.SetOutcome(3, i, wire.Result{SN: wire.SN(i)})
	}
	commit(t, e)
	if n := outcomeKeys(); n != 2 {
		t.Fatalf("%d outcome keys after 16 outcomes in one commit and an old one, want 2", n)
	}
	for i := uint64(1); i < 10; i++ {
		s.DeleteOutcome(3, i)
	}
	s.SetSession(3, 10, 17)
	commit(t, e)
	if n := outcomeKeys(); n != 1 {
		t.Fatalf("%d outcome keys after forgetting the old one and half the group, want 1", n)
	}
	closePebble(t, e)
	e = openPebble(t, o)
	defer closePebble(t, e)
	if !e.grouped {
		t.Fatal("reopened engine does not write groups")
	}
	s = e.Volume(1)
	got := s.Sessions()
	if len(got) != 1 || len(got[0].Outcomes) != 8 || got[0].Outcomes[0].ReqNo != 10 || got[0].Outcomes[7].ReqNo != 17 {
		t.Fatalf("sessions after reopening: %+v; want outcomes 10 to 17", got)
	}
	for i := uint64(10); i <= 17; i++ {
		s.DeleteOutcome(3, i)
	}
	commit(t, e)
	if n := outcomeKeys(); n != 0 {
		t.Fatalf("%d outcome keys after forgetting every outcome, want 0", n)
	}
}

func TestPebbleDecodeRejectsCorruption(t *testing.T) {
	meta := encodeMeta(Meta{Config: wire.Config{Volume: 7, Epoch: 300, Chain: []wire.NodeID{"a", "bc"}, Joining: "d"}, Applied: 5})
	result := encodeResult(wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("value"), SN: 1 << 40})
	session := encodeSession(1<<50, 1<<60)
	decoders := map[string]struct {
		valid  []byte
		decode func([]byte) error
	}{
		"meta":    {meta, func(b []byte) error { _, err := decodeMeta(b); return err }},
		"result":  {result, func(b []byte) error { _, err := decodeResult(b); return err }},
		"session": {session, func(b []byte) error { _, _, err := decodeSession(b); return err }},
	}
	for name, d := range decoders {
		if err := d.decode(d.valid); err != nil {
			t.Errorf("%s: valid record: %v", name, err)
		}
		for n := range len(d.valid) {
			if err := d.decode(d.valid[:n]); err == nil {
				t.Errorf("%s: record truncated to %d bytes decoded", name, n)
			}
		}
		if err := d.decode(append(bytes.Clone(d.valid), 0)); err == nil {
			t.Errorf("%s: record with a trailing byte decoded", name)
		}
		bad := bytes.Clone(d.valid)
		bad[0] = 2
		if err := d.decode(bad); err == nil || !strings.Contains(err.Error(), "version") {
			t.Errorf("%s: version 2: err = %v", name, err)
		}
	}
	for _, b := range [][]byte{
		{1, 0x80, 0, 0, 0, 0, 0},                         // unknown meta flag
		{1, 0, 0, 0, 0, 1, 1, 'a', 0},                    // nil chain with a member
		{1, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0}, // volume beyond 32 bits
		{1, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}, // huge chain
	} {
		if _, err := decodeMeta(b); err == nil {
			t.Errorf("meta %v decoded", b)
		}
	}
	for _, b := range [][]byte{
		{1, 0, 4, 0, 0},      // unknown result flag
		{1, 0, 0, 0, 1, 'v'}, // nil value with bytes
	} {
		if _, err := decodeResult(b); err == nil {
			t.Errorf("result %v decoded", b)
		}
	}
}

// BenchmarkPebbleApply measures what a replica writes per update, with a
// group commit every 64 updates.
func BenchmarkPebbleApply(b *testing.B) {
	benchmarkApply(b, false)
}

// BenchmarkPebbleApplyPrune adds what a replica also does per update of a
// client that sends requests one after the other: read the object, and
// forget the outcome the client acknowledged (one blind DeleteOutcome each).
func BenchmarkPebbleApplyPrune(b *testing.B) {
	benchmarkApply(b, true)
}

func benchmarkApply(b *testing.B, prune bool) {
	for _, sync := range []bool{true, false} {
		// Opened outside b.Run, so that Pebble's log line at opening does
		// not split the benchmark's result line. The runs of one
		// sub-benchmark (growing b.N) share the database.
		e := openPebble(b, PebbleOptions{Dir: b.TempDir(), Sync: sync})
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			s := e.Volume(1)
			value := bytes.Repeat([]byte("x"), 100)
			meta := Meta{Config: wire.Config{Volume: 1, Epoch: 3, Chain: []wire.NodeID{"n1:7000", "n2:7000", "n3:7000"}}}
			const clients = 16
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("key%08d", i%100000)
				client := wire.ClientID(i % clients)
				reqNo := uint64(i/clients + 1)
				sn := wire.SN(i + 1)
				if prune {
					_ = s.Get(key)
					s.DeleteOutcome(client, reqNo-1)
				}
				s.Set(key, kv.Object{Value: value, Exists: true})
				meta.Applied = sn
				s.SetMeta(meta)
				s.SetSession(client, reqNo, sn)
				s.SetOutcome(client, reqNo, wire.Result{Status: wire.StatusOK, Found: true, SN: sn})
				if (i+1)%64 == 0 {
					if err := e.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := e.Commit(); err != nil {
				b.Fatal(err)
			}
		})
		closePebble(b, e)
	}
}

// TestPebbleMatchesMemory applies random operations to a Memory and a
// Pebble engine and compares everything they hold as it goes, across
// commits and reopens.
func TestPebbleMatchesMemory(t *testing.T) {
	seeds, steps := uint64(8), 2000
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			fs := vfs.NewMem()
			o := PebbleOptions{Dir: "db", FS: fs}
			if seed%2 == 1 {
				o.ObjectCacheBytes = 300 // a few entries: evictions all along
			}
			pe := openPebble(t, o)
			defer func() { closePebble(t, pe) }()
			// Outcomes in groups (pebble_outcomes.go): never, from the
			// start, or from a step on, the engine reopened in between
			// reading the version back.
			groupAt := []int{steps, 0, rng.IntN(steps)}[seed%3]
			me := NewMemoryEngine()
			vols := []wire.VolumeID{0, 1, 1<<32 - 1}
			value := func() []byte {
				switch rng.IntN(4) {
				case 0:
					return nil
				case 1:
					return []byte{}
				}
				return []byte(fmt.Sprint(rng.IntN(1000)))
			}
			for step := range steps {
				if step == groupAt {
					pe.SetClusterVersion(OutcomeGroupsVersion)
				}
				if pe.grouped != (step >= groupAt) {
					t.Fatalf("step %d: engine writes groups: %v, want %v", step, pe.grouped, step >= groupAt)
				}
				v := vols[rng.IntN(len(vols))]
				client := wire.ClientID(rng.IntN(4))
				reqNo := uint64(rng.IntN(12))
				key := fmt.Sprint("k", rng.IntN(6))
				var op string
				var apply func(Store)
				switch r := rng.IntN(100); {
				case r < 20:
					obj := kv.Object{Value: value(), Exists: rng.IntN(4) > 0}
					op, apply = fmt.Sprintf("Set(%q, %+v)", key, obj), func(s Store) { s.Set(key, obj) }
				case r < 25:
					m := Meta{Config: wire.Config{Volume: v, Epoch: wire.Epoch(step), Joining: "j"}, Applied: wire.SN(step)}
					if rng.IntN(2) == 0 {
						m.Config.Chain = []wire.NodeID{"a", "b", "c"}[:rng.IntN(4)]
					}
					op, apply = fmt.Sprintf("SetMeta(%+v)", m), func(s Store) { s.SetMeta(m) }
				case r < 40:
					acked, sn := uint64(rng.IntN(12)), wire.SN(step)
					op, apply = fmt.Sprintf("SetSession(%d, %d, %d)", client, acked, sn), func(s Store) { s.SetSession(client, acked, sn) }
				case r < 70:
					res := wire.Result{Status: wire.Status(rng.IntN(4)), Found: rng.IntN(2) == 0, Value: value(), SN: wire.SN(step)}
					op, apply = fmt.Sprintf("SetOutcome(%d, %d, %+v)", client, reqNo, res), func(s Store) { s.SetOutcome(client, reqNo, res) }
				case r < 77:
					op, apply = fmt.Sprintf("DeleteSession(%d)", client), func(s Store) { s.DeleteSession(client) }
				case r < 79:
					op, apply = "Reset()", func(s Store) { s.Reset() }
				case r < 83:
					op, apply = "Commit()", func(Store) { commit(t, pe) }
				case r < 98:
					op, apply = fmt.Sprintf("DeleteOutcome(%d, %d)", client, reqNo), func(s Store) { s.DeleteOutcome(client, reqNo) }
				default:
					op, apply = "Commit(), Close(), OpenPebble()", func(Store) {
						commit(t, pe)
						closePebble(t, pe)
						pe = openPebble(t, o)
					}
				}
				apply(me.Volume(v))
				apply(pe.Volume(v))
				// Sessions and Volumes write what the stores hold back
				// (writePending): compared after some steps only, so that
				// groups of several outcomes form in between.
				full := rng.IntN(6) == 0
				for _, v := range vols {
					ms, ps := me.Volume(v), pe.Volume(v)
					mm, mok := ms.Meta()
					pm, pok := ps.Meta()
					switch {
					case full && !reflect.DeepEqual(ms.Sessions(), ps.Sessions()):
						t.Fatalf("step %d, volume %d after %s: sessions differ:\nmemory %+v\npebble %+v", step, v, op, ms.Sessions(), ps.Sessions())
					case mok != pok || !reflect.DeepEqual(mm, pm):
						t.Fatalf("step %d, volume %d after %s: meta differs:\nmemory %+v %v\npebble %+v %v", step, v, op, mm, mok, pm, pok)
					case !sameObject(ms.Get(key), ps.Get(key)):
						t.Fatalf("step %d, volume %d after %s: Get(%q) differs: memory %+v, pebble %+v", step, v, op, key, ms.Get(key), ps.Get(key))
					}
					wantSnapshot(t, ps.Snapshot(), ms.Snapshot())
				}
				if full {
					wantVolumes(t, pe, me.Volumes())
				}
			}
		})
	}
}

// TestPebbleStampsAcrossReopen: a reopened engine finds a geo volume's
// stamps and tombstones (it reads stamps only in volumes that hold one).
func TestPebbleStampsAcrossReopen(t *testing.T) {
	o := PebbleOptions{Dir: t.TempDir(), Sync: true}
	e := openPebble(t, o)
	st := wire.Stamp{Origin: 3, N: 7, TS: 99}
	e.Volume(1).Set("live", kv.Object{Value: []byte("v"), Exists: true, Stamp: st})
	e.Volume(1).Set("dead", kv.Object{Stamp: st})
	e.Volume(2).Set("plain", kv.Object{Value: []byte("p"), Exists: true})
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	closePebble(t, e)
	e = openPebble(t, o)
	defer closePebble(t, e)
	if got := e.Volume(1).Get("live"); !sameObject(got, kv.Object{Value: []byte("v"), Exists: true, Stamp: st}) {
		t.Fatalf("live = %+v", got)
	}
	if got := e.Volume(1).Get("dead"); !sameObject(got, kv.Object{Stamp: st}) {
		t.Fatalf("tombstone = %+v", got)
	}
	if got := e.Volume(2).Get("plain"); !sameObject(got, kv.Object{Value: []byte("p"), Exists: true}) {
		t.Fatalf("plain = %+v", got)
	}
}

// A replica sets its meta with every update it applies and its client's
// session header with every update of that client; the store writes each
// once per commit, the last one set (issue 36: fewer memtable inserts per
// update). Reads before the commit see what was set: Meta, Sessions and
// Volumes.
func TestPebbleWritesMetaAndSessionOncePerCommit(t *testing.T) {
	var committed []int
	commit := func(e *PebbleEngine) {
		t.Helper()
		if err := e.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	e := openPebble(t, PebbleOptions{Dir: dir, FS: vfs.NewMem(), OnCommit: func(_ time.Duration, n int) { committed = append(committed, n) }})
	defer closePebble(t, e)
	s := e.Volume(3)
	for _, updates := range []int{1, 50} {
		for i := 1; i <= updates; i++ {
			s.SetMeta(Meta{Config: wire.Config{Volume: 3, Epoch: 2, Chain: []wire.NodeID{"a", "b"}}, Applied: wire.SN(i)})
			s.SetSession(7, uint64(i), wire.SN(i))
		}
		if m, ok := s.Meta(); !ok || m.Applied != wire.SN(updates) {
			t.Fatalf("meta before the commit: %+v, %v; want applied %d", m, ok, updates)
		}
		if v := e.Volumes(); len(v) != 1 || v[0] != 3 {
			t.Fatalf("volumes before the commit: %v; want [3]", v)
		}
		if got := s.Sessions(); len(got) != 1 || got[0].AckedBelow != uint64(updates) {
			t.Fatalf("sessions before the commit: %+v; want client 7 acked below %d", got, updates)
		}
		commit(e)
	}
	if len(committed) != 2 || committed[0] != committed[1] {
		t.Fatalf("batch sizes %v; want one meta and one header per commit, 1 update or 50 alike", committed)
	}
	s.SetOutcome(8, 1, wire.Result{SN: 51})
	s.DeleteSession(7)
	commit(e)
	if got := s.Sessions(); len(got) != 1 || got[0].Client != 8 || len(got[0].Outcomes) != 1 {
		t.Fatalf("sessions after an outcome of a new client and a deletion: %+v; want client 8 with its outcome only", got)
	}
}
