package storage

import (
	"cmp"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// A data directory written by an earlier release must open with this
// one (issue 33): testdata/datadir holds one per release, written by
// that release's build with -write-datadir from datadirContents, and
// every later release opens a copy and reads it all back. A release's
// directory is written once and never changed.

var writeDataDir = flag.Bool("write-datadir", false, "write this release's data directory fixture (testdata/datadir/RELEASE) if it is missing")

// datadirVolume is one volume of the fixture and what it holds.
type datadirVolume struct {
	meta     Meta
	objects  map[string]kv.Object
	sessions []wire.SessionRecord
	shipLog  []wire.Update
}

// datadirContents is what every release's fixture holds: a strong
// volume with objects and a client's session, and a geo causal volume
// with stamped objects, a tombstone and a ship log; from release 0.2.0
// on, also keys with deadlines, an outcome that carries one, and a hash. Frozen:
// the fixtures of earlier releases were written from it, so what a
// release adds is added for that release and later ones only.
func datadirContents(version string) map[wire.VolumeID]datadirVolume {
	c := map[wire.VolumeID]datadirVolume{
		0: {
			meta: Meta{Config: wire.Config{Volume: 0, Epoch: 3, Chain: []wire.NodeID{"10.0.0.1:7101", "10.0.0.2:7101", "10.0.0.3:7101"}},
				Applied: 12, AppliedEpoch: 3},
			objects: map[string]kv.Object{"user:1": {Value: []byte("alice"), Exists: true}, "user:2": {Value: []byte{}, Exists: true}},
			sessions: []wire.SessionRecord{{Client: 1 << 40, AckedBelow: 5, LastSN: 12, Outcomes: []wire.Outcome{
				{ReqNo: 5, Result: wire.Result{Status: wire.StatusOK, SN: 11}},
				{ReqNo: 6, Result: wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("alice"), SN: 12}}}}},
		},
		5: {
			meta: Meta{Config: wire.Config{Volume: 5, Epoch: 2, Chain: []wire.NodeID{"10.0.0.2:7101", "10.0.0.3:7101"}, Mode: wire.ModeCausal, K: 1, Sites: []wire.SiteID{1, 2}},
				Applied: 4, AppliedEpoch: 2, Vector: wire.Vector{{Site: 1, N: 3}, {Site: 2, N: 1}}, CatchUpTo: 2, SnapshotInstalled: true},
			objects: map[string]kv.Object{
				"s/a": {Value: []byte("x"), Exists: true, Stamp: wire.Stamp{Origin: 1, N: 3, TS: 1 << 42}},
				"s/b": {Stamp: wire.Stamp{Origin: 2, N: 1, TS: 1<<42 + 1}}, // a tombstone
			},
			shipLog: []wire.Update{
				{SN: 3, Key: "s/a", Changed: true, Value: []byte("x"), Client: 7, ReqNo: 2, AckedBelow: 1, ReplyTo: "client/7",
					Result: wire.Result{Status: wire.StatusOK, SN: 3}, Stamp: wire.Stamp{Origin: 1, N: 3, TS: 1 << 42},
					Deps: []wire.Dep{{Key: "s/b", Origin: 2, N: 1}}, Epoch: 2},
			},
		},
	}
	if version != "0.1.0" {
		v := c[0]
		v.objects["session:1"] = kv.Object{Value: []byte("token"), Exists: true, Expires: 1_800_000_000_000_000_000}
		v.objects["session:2"] = kv.Object{Value: []byte("t2"), Exists: true, Expires: 1_700_000_000_000_000_000}
		v.objects["user:3"] = kv.Object{Value: kv.EncodeFields([]kv.Field{{Name: "age", Value: []byte("36")}, {Name: "name", Value: []byte("ada")}}),
			Exists: true, Type: wire.TypeHash}
		v.sessions[0].Outcomes = append(v.sessions[0].Outcomes,
			wire.Outcome{ReqNo: 7, Result: wire.Result{Status: wire.StatusOK, Found: true, SN: 12, Expires: 1_800_000_000_000_000_000}})
	}
	return c
}

func TestDataDirOfEveryReleaseOpens(t *testing.T) {
	current := filepath.Join("testdata", "datadir", release.Version, "pebble")
	if _, err := os.Stat(current); err != nil {
		if !*writeDataDir {
			t.Errorf("%s is missing: this release has no data directory fixture (go test ./internal/storage -run TestDataDirOfEveryReleaseOpens -write-datadir writes it)", current)
		} else {
			writeDatadir(t, current)
		}
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "datadir", "*", "pebble"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no data directory fixtures: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			copied := filepath.Join(t.TempDir(), "pebble")
			if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			e, err := OpenPebble(PebbleOptions{Dir: copied, Sync: true})
			if err != nil {
				t.Fatalf("opening the data directory of release %s: %v", filepath.Base(filepath.Dir(dir)), err)
			}
			defer e.Close()
			checkDatadir(t, e, filepath.Base(filepath.Dir(dir)))
		})
	}
}

// writeDatadir writes datadirContents into a new Pebble directory:
// volume 0 flushed to a table, as most of a real directory's data is,
// volume 5 left in the log.
func writeDatadir(t *testing.T, dir string) {
	e, err := OpenPebble(PebbleOptions{Dir: dir, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	contents := datadirContents(release.Version)
	if release.Version != "0.1.0" {
		// Written as a finalized cluster writes: outcome groups and the
		// recorded cluster version (issue 36) as well.
		e.SetClusterVersion(release.ProtocolMax)
	}
	for _, v := range []wire.VolumeID{0, 5} {
		want := contents[v]
		if v == 5 {
			if err := e.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := e.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		s := e.Volume(v)
		s.SetMeta(want.meta)
		for k, o := range want.objects {
			s.Set(k, o)
		}
		for _, r := range want.sessions {
			s.SetSession(r.Client, r.AckedBelow, r.LastSN)
			for _, o := range r.Outcomes {
				s.SetOutcome(r.Client, o.ReqNo, o.Result)
			}
		}
		for _, u := range want.shipLog {
			s.AppendShipLog(u)
		}
	}
	if err := e.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkDatadir reads every volume of the fixture back.
func checkDatadir(t *testing.T, e Engine, version string) {
	want := datadirContents(version)
	if got := e.Volumes(); len(got) != len(want) {
		t.Fatalf("volumes %v, want %d", got, len(want))
	}
	for v, w := range want {
		s := e.Volume(v)
		if m, ok := s.Meta(); !ok || !reflect.DeepEqual(m, w.meta) {
			t.Errorf("volume %d: meta %+v (%v), want %+v", v, m, ok, w.meta)
		}
		for k, o := range w.objects {
			if got := s.Get(k); !reflect.DeepEqual(got, o) {
				t.Errorf("volume %d: %q is %+v, want %+v", v, k, got, o)
			}
		}
		if got := s.Sessions(); !reflect.DeepEqual(got, w.sessions) {
			t.Errorf("volume %d: sessions %+v, want %+v", v, got, w.sessions)
		}
		var deadlines []KeyDeadline
		for k, o := range w.objects {
			if o.Expires != 0 {
				deadlines = append(deadlines, KeyDeadline{Key: k, Expires: o.Expires})
			}
		}
		slices.SortFunc(deadlines, func(a, b KeyDeadline) int { return cmp.Compare(a.Expires, b.Expires) })
		if got := s.Deadlines(100); !slices.Equal(got, deadlines) {
			t.Errorf("volume %d: deadlines %v, want %v", v, got, deadlines)
		}
		if len(w.shipLog) > 0 {
			origin := w.shipLog[0].Stamp.Origin
			if got := s.ShipLog(origin, 0, 100); !reflect.DeepEqual(got, w.shipLog) {
				t.Errorf("volume %d: ship log %+v, want %+v", v, got, w.shipLog)
			}
		}
	}
}
