package storage

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/faults"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// walRecycling records whether the WAL file Pebble opened last is a
// recycled one (ReuseForWrite) or a new one.
type walRecycling struct {
	vfs.FS
	lastReused bool
}

func (fs *walRecycling) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.lastReused = true
	return fs.FS.ReuseForWrite(oldname, newname, category)
}

func (fs *walRecycling) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".log") {
		fs.lastReused = false
	}
	return fs.FS.Create(name, category)
}

// setFaults writes the control file and has the injector read it.
func setFaults(t *testing.T, in *faults.Injector, path string, f faults.Faults) {
	t.Helper()
	if err := faults.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	if err := in.Reload(); err != nil {
		t.Fatal(err)
	}
}

// A commit whose WAL write or fsync fails returns an error (Pebble's
// fatal commit error, which it raises through its logger, comes back as
// an error), and so does every later commit, even once the disk works
// again: nothing the failed batch held is ever reported durable, and the
// server's loop stops before it sends what the batch produced. The
// database then opens again with everything committed before the fault;
// the failed batch is there only if its WAL record was written whole
// (an fsync error: the bytes reached the OS), never a torn part of it
// (a full disk writes half a record). Enough is written first for Pebble
// to flush memtables and recycle WAL files, so the failed record lies in
// a recycled file, after which older records of another log remain.
func TestPebbleCommitFailsUnderDiskFault(t *testing.T) {
	for _, tc := range []struct {
		disk      faults.Disk
		errno     string
		maybeKept bool
	}{
		{faults.DiskSyncError, "input/output error", true},
		{faults.DiskFull, "no space left on device", false},
	} {
		t.Run(string(tc.disk), func(t *testing.T) {
			ctl := filepath.Join(t.TempDir(), "faults")
			in, err := faults.Open(ctl, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			wal := &walRecycling{FS: vfs.Default}
			// No compactions, and every flush done before the fault: a
			// failed write in Pebble's background work ends the process
			// (as it should), here the test.
			e := openPebble(t, PebbleOptions{Dir: dir, Sync: true, FS: in.FS(wal),
				tune: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }})
			s := e.Volume(1)
			big := []byte(strings.Repeat("x", 1<<20))
			var applied wire.SN
			for i := range 24 {
				applied++
				s.Set(fmt.Sprintf("big%d", i%4), kv.Object{Value: big, Exists: true})
				s.SetMeta(Meta{Config: wire.Config{Volume: 1, Epoch: 1}, Applied: applied})
				if err := e.Commit(); err != nil {
					t.Fatal(err)
				}
			}

			if err := e.db.Flush(); err != nil {
				t.Fatal(err)
			}
			if !wal.lastReused {
				t.Fatal("the WAL in use is not a recycled file: write more before the fault")
			}
			sibling := e.Sibling() // another event loop's engine on the same database
			setFaults(t, in, ctl, faults.Faults{Disk: tc.disk})
			s.Set("failed", kv.Object{Value: []byte("never acknowledged"), Exists: true})
			s.SetMeta(Meta{Config: wire.Config{Volume: 1, Epoch: 1}, Applied: applied + 1})
			err = e.Commit()
			if err == nil || !strings.Contains(err.Error(), tc.errno) || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("commit under %s: err = %v, want the injected %q", tc.disk, err, tc.errno)
			}
			setFaults(t, in, ctl, faults.Faults{})
			if err := e.Commit(); err == nil {
				t.Fatal("a commit after a failed one succeeded")
			}
			sibling.Volume(2).Set("later", kv.Object{Value: []byte("after the fault"), Exists: true})
			if err := sibling.Commit(); err == nil {
				t.Fatal("a sibling's commit after its engine's failed one succeeded")
			}
			sibling.Close()
			e.Close() // may report the fault too; it must return

			e = openPebble(t, PebbleOptions{Dir: dir, Sync: true})
			defer closePebble(t, e)
			s = e.Volume(1)
			m, _ := s.Meta()
			failed := s.Get("failed")
			switch {
			case m.Applied == applied && !failed.Exists:
			case m.Applied == applied+1 && failed.Exists && tc.maybeKept:
			default:
				t.Fatalf("reopened: applied %d, the failed batch's object %+v; want applied %d without it", m.Applied, failed, applied)
			}
			if got := s.Get("big3"); string(got.Value) != string(big) {
				t.Fatalf("reopened: a committed object lost (%d bytes)", len(got.Value))
			}
			s.SetMeta(Meta{Config: wire.Config{Volume: 1, Epoch: 2}, Applied: m.Applied + 1})
			if err := e.Commit(); err != nil {
				t.Fatalf("commit after reopening: %v", err)
			}
		})
	}
}
