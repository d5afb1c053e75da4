package raftlog

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/catena-kv/catena/internal/faults"
)

func entry(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: pb.EntryType_EntryNormal.Enum(), Data: []byte(data)}
}

func indexes(entries []*pb.Entry) []uint64 {
	var out []uint64
	for _, e := range entries {
		out = append(out, e.GetIndex())
	}
	return out
}

// The contract, on both implementations: entries replace from their first
// index, compaction drops a prefix, a snapshot compacts up to its index,
// and Load returns what was committed.
func testLog(t *testing.T, open func() Log) {
	l := open()
	l.Save(&pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(3)}, nil,
		[]*pb.Entry{entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 2, "c"), entry(4, 2, "d")})
	// A new leader overwrites the uncommitted tail.
	l.Save(nil, nil, []*pb.Entry{entry(4, 3, "D"), entry(5, 3, "e")})
	l.Compact(1)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	l = reopen(t, l, open)
	hs, snap, entries, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != 2 || hs.GetCommit() != 3 || snap != nil {
		t.Fatalf("hard state %v snapshot %v", hs, snap)
	}
	if got := indexes(entries); len(got) != 4 || got[0] != 2 || got[3] != 5 || string(entries[2].GetData()) != "D" {
		t.Fatalf("entries %v (%q), want 2..5 with the overwritten 4", got, entries[2].GetData())
	}
	l.Save(nil, &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(4), Term: proto.Uint64(3)}}, nil)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	l = reopen(t, l, open)
	_, snap, entries, _ = l.Load()
	if string(snap.GetData()) != "state" || len(entries) != 1 || entries[0].GetIndex() != 5 {
		t.Fatalf("after a snapshot at 4: snapshot %q, entries %v", snap.GetData(), indexes(entries))
	}
	l.Close()
}

func reopen(t *testing.T, l Log, open func() Log) Log {
	if _, ok := l.(*Memory); ok {
		return l // a memory log survives as itself
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return open()
}

func TestMemory(t *testing.T) {
	m := NewMemory()
	testLog(t, func() Log { return m })
}

func TestPebble(t *testing.T) {
	dir := t.TempDir()
	testLog(t, func() Log {
		p, err := OpenPebble(dir, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

// What was saved but not committed is gone after a reopen.
func TestPebbleUncommittedIsLost(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPebble(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Save(nil, nil, []*pb.Entry{entry(1, 1, "a")})
	p.Commit()
	p.Save(nil, nil, []*pb.Entry{entry(2, 1, "b")})
	p.Close()
	p, _ = OpenPebble(dir, nil, nil)
	defer p.Close()
	if _, _, entries, _ := p.Load(); len(entries) != 1 {
		t.Fatalf("entries %v after reopen, want only the committed one", indexes(entries))
	}
}

// A commit that fails under a disk fault returns an error, and so does
// every later one (the member stops before it sends what the failed
// batch promised); once the disk works the log opens with every entry
// committed before the fault, and a torn entry (a full disk writes half a
// record) is not among them.
func TestPebbleCommitFailsUnderDiskFault(t *testing.T) {
	for _, disk := range []faults.Disk{faults.DiskSyncError, faults.DiskFull} {
		t.Run(string(disk), func(t *testing.T) {
			ctl := filepath.Join(t.TempDir(), "faults")
			in, err := faults.Open(ctl, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			p, err := OpenPebble(dir, in.FS(vfs.Default), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.Save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(1)}, nil, []*pb.Entry{entry(1, 1, "a")})
			if err := p.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := faults.WriteFile(ctl, faults.Faults{Disk: disk}); err != nil {
				t.Fatal(err)
			}
			if err := in.Reload(); err != nil {
				t.Fatal(err)
			}
			p.Save(&pb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(2)}, nil, []*pb.Entry{entry(2, 2, "b")})
			if err := p.Commit(); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("commit under %s: err = %v, want the injected error", disk, err)
			}
			if err := faults.WriteFile(ctl, faults.Faults{}); err != nil {
				t.Fatal(err)
			}
			if err := in.Reload(); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(); err == nil {
				t.Fatal("a commit after a failed one succeeded")
			}
			p.Close()

			p, err = OpenPebble(dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			hs, _, entries, err := p.Load()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case len(entries) == 1 && hs.GetTerm() == 1:
			case len(entries) == 2 && hs.GetTerm() == 2 && disk == faults.DiskSyncError: // written whole, not synced
			default:
				t.Fatalf("reopened: hard state %v, entries %v", hs, indexes(entries))
			}
		})
	}
}
