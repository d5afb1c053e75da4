package faults

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Faults
	}{
		{"", Faults{}},
		{"# nothing\n\n", Faults{}},
		{"clock-offset=-2.5s\n", Faults{ClockOffset: -2500 * time.Millisecond}},
		{" clock-rate = 0.25 \ndisk=enospc", Faults{ClockRate: 0.25, Disk: DiskFull}},
		{"clock-rate=1\n", Faults{}},
		{"disk=fsync-error\ndisk=none\n", Faults{}},
		{"disk=fsync-error\nclock-offset=1h\n", Faults{ClockOffset: time.Hour, Disk: DiskSyncError}},
	} {
		got, err := Parse(tc.text)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.text, got, err, tc.want)
		}
		if again, err := Parse(got.String()); err != nil || again != got {
			t.Errorf("Parse(%q) = %+v, %v: String does not round-trip %+v", got.String(), again, err, got)
		}
	}
	for _, text := range []string{
		"clock-offset",
		"clock-offset=2",
		"clock-rate=0",
		"clock-rate=-1",
		"clock-rate=fast",
		"clock-rate=NaN",
		"clock-rate=1e9",
		"disk=full",
		"skew=1s",
		"disk=enospc\nclock=1",
	} {
		if f, err := Parse(text); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("Parse(%q) = %+v, %v; want an error naming the line", text, f, err)
		}
	}
}

// The injector reads the file at start and on Reload; a missing file
// asks for nothing; a bad one is an error at start and, later, changes
// nothing.
func TestInjectorReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults")
	in, err := Open(path, nil)
	if err != nil || in.Faults() != (Faults{}) {
		t.Fatalf("missing file: %+v, %v", in.Faults(), err)
	}
	want := Faults{ClockOffset: 3 * time.Second, Disk: DiskFull}
	if err := WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	if err := in.Reload(); err != nil || in.Faults() != want {
		t.Fatalf("after writing %+v: %+v, %v", want, in.Faults(), err)
	}
	if err := os.WriteFile(path, []byte("disk=melted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := in.Reload(); err == nil || in.Faults() != want {
		t.Fatalf("a bad file: %+v, %v; want an error and the faults kept", in.Faults(), err)
	}
	if _, err := Open(path, nil); err == nil {
		t.Fatal("Open accepted a bad file")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := in.Reload(); err != nil || in.Faults() != (Faults{}) {
		t.Fatalf("file removed: %+v, %v", in.Faults(), err)
	}
	var none *Injector
	if none.Faults() != (Faults{}) || none.Warp() != nil || none.FS(vfs.Default) != vfs.Default {
		t.Fatal("a nil injector injects something")
	}
	none.Poll(t.Context()) // returns at once
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	if in, err := FromEnv(nil); in != nil || err != nil {
		t.Fatalf("unset: %v, %v", in, err)
	}
	path := filepath.Join(t.TempDir(), "faults")
	os.WriteFile(path, []byte("clock-rate=2\n"), 0o644)
	t.Setenv(EnvVar, path)
	in, err := FromEnv(nil)
	if err != nil || in.Faults().ClockRate != 2 {
		t.Fatalf("set: %+v, %v", in.Faults(), err)
	}
	os.WriteFile(path, []byte("clock-rate=2x\n"), 0o644)
	if _, err := FromEnv(nil); err == nil || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("a bad file: %v", err)
	}
}

// The warped clock is real time until a fault; an offset makes it jump
// (back too), a rate makes it run faster or slower from when it is read,
// without a jump.
func TestWarp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults")
	in, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	warp := in.Warp()
	set := func(f Faults) {
		t.Helper()
		if err := WriteFile(path, f); err != nil {
			t.Fatal(err)
		}
		if err := in.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	s := time.Second
	steps := []struct {
		set     *Faults
		elapsed time.Duration
		want    time.Duration
	}{
		{nil, 0, 0},
		{nil, 5 * s, 5 * s},
		{&Faults{ClockOffset: 2 * s}, 6 * s, 8 * s},                // a jump forward
		{&Faults{ClockOffset: 2 * s, ClockRate: 3}, 6 * s, 8 * s},  // a rate: no jump
		{nil, 8 * s, 14 * s},                                       // 2 s at 3×
		{&Faults{ClockOffset: -s, ClockRate: 3}, 8 * s, 11 * s},    // a jump back
		{&Faults{ClockOffset: -s, ClockRate: 0.5}, 10 * s, 17 * s}, // read at 10 s: 2 s more at 3×
		{nil, 14 * s, 19 * s},                                      // 4 s at ½×
		{&Faults{}, 14 * s, 20 * s},                                // healed: the offset's jump undone
		{nil, 15 * s, 21 * s},                                      // real time again
	}
	for i, st := range steps {
		if st.set != nil {
			set(*st.set)
		}
		if got := warp(st.elapsed); got != st.want {
			t.Fatalf("step %d: warp(%s) = %s, want %s", i, st.elapsed, got, st.want)
		}
	}
}

// The file system fails writes (short) and creations under DiskFull and
// syncs under DiskSyncError, and works again once the fault is cleared.
func TestFS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults")
	in, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := func(d Disk) {
		t.Helper()
		if err := WriteFile(path, Faults{Disk: d}); err != nil {
			t.Fatal(err)
		}
		if err := in.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	mem := vfs.NewMem()
	fs := in.FS(mem)
	f, err := fs.Create("a", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("0123")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	set(DiskFull)
	if n, err := f.Write([]byte("4567")); n != 2 || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("write on a full disk: %d, %v; want 2 bytes and ENOSPC", n, err)
	}
	if _, err := fs.Create("b", vfs.WriteCategoryUnspecified); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create on a full disk: %v", err)
	}
	if err := fs.MkdirAll("d", 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("mkdir on a full disk: %v", err)
	}
	if err := f.Preallocate(0, 1<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("preallocate on a full disk: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync on a full disk: %v", err)
	}

	set(DiskSyncError)
	if _, err := f.Write([]byte("89")); err != nil {
		t.Fatalf("write under fsync errors: %v", err)
	}
	for name, sync := range map[string]func() error{
		"sync":      f.Sync,
		"sync data": f.SyncData,
		"sync to":   func() error { _, err := f.SyncTo(4); return err },
	} {
		if err := sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s under fsync errors: %v", name, err)
		}
	}
	dir, err := fs.OpenDir("")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("directory sync under fsync errors: %v", err)
	}

	set(DiskOK)
	if _, err := f.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create("b", vfs.WriteCategoryUnspecified); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := fs.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	if string(got) != "01234589ab" {
		t.Fatalf("file holds %q: want the half write's 45 between", got)
	}
}
