package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/catena-kv/catena/internal/storage"
)

// Keys: 'h' the hard state, 's' the snapshot, 'e' + index (8 bytes,
// big-endian) each entry; values are protobuf encodings.
var (
	keyHardState = []byte("h")
	keySnapshot  = []byte("s")
)

func entryKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{'e'}, index)
}

// Pebble is a Log in a Pebble database; Commit syncs it.
type Pebble struct {
	db    *pebble.DB
	batch *pebble.Batch
	// failed is the error of a commit that failed: every later Commit
	// returns it (see storage.CommitBatch).
	failed error
}

// OpenPebble opens (or creates) the log in dir, on the file system fs
// (nil: the operating system's).
func OpenPebble(dir string, fs vfs.FS, log *slog.Logger) (*Pebble, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: storage.PebbleLogger(log), FS: fs})
	if err != nil {
		return nil, fmt.Errorf("raft log in %s: %w", dir, err)
	}
	return &Pebble{db: db, batch: db.NewBatch()}, nil
}

// Load implements Log.
func (p *Pebble) Load() (*pb.HardState, *pb.Snapshot, []*pb.Entry, error) {
	var hs *pb.HardState
	var snap *pb.Snapshot
	if v, closer, err := p.db.Get(keyHardState); err == nil {
		hs = &pb.HardState{}
		err = proto.Unmarshal(v, hs)
		closer.Close()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("raft log: hard state: %w", err)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, nil, err
	}
	if v, closer, err := p.db.Get(keySnapshot); err == nil {
		snap = &pb.Snapshot{}
		err = proto.Unmarshal(v, snap)
		closer.Close()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("raft log: snapshot: %w", err)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, nil, err
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(0), UpperBound: entryKey(math.MaxUint64)})
	if err != nil {
		return nil, nil, nil, err
	}
	defer it.Close()
	var entries []*pb.Entry
	for it.First(); it.Valid(); it.Next() {
		e := &pb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, nil, nil, fmt.Errorf("raft log: entry: %w", err)
		}
		entries = append(entries, e)
	}
	return hs, snap, entries, it.Error()
}

func (p *Pebble) put(key []byte, m proto.Message) {
	data, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("raft log: encoding: %v", err))
	}
	if err := p.batch.Set(key, data, nil); err != nil {
		panic(fmt.Sprintf("raft log: %v", err))
	}
}

// Save implements Log.
func (p *Pebble) Save(hs *pb.HardState, snap *pb.Snapshot, entries []*pb.Entry) {
	if hs != nil {
		p.put(keyHardState, hs)
	}
	if snap != nil {
		p.put(keySnapshot, snap)
		p.Compact(snap.GetMetadata().GetIndex())
	}
	if len(entries) > 0 {
		if err := p.batch.DeleteRange(entryKey(entries[0].GetIndex()), entryKey(math.MaxUint64), nil); err != nil {
			panic(fmt.Sprintf("raft log: %v", err))
		}
		for _, e := range entries {
			p.put(entryKey(e.GetIndex()), e)
		}
	}
}

// Compact implements Log.
func (p *Pebble) Compact(index uint64) {
	if err := p.batch.DeleteRange(entryKey(0), entryKey(index+1), nil); err != nil {
		panic(fmt.Sprintf("raft log: %v", err))
	}
}

// Commit implements Log. After a failed commit (a full disk, an fsync
// error) every later one fails too: the member must stop, and recover
// from what the log holds when it starts again.
func (p *Pebble) Commit() error {
	if p.failed != nil {
		return p.failed
	}
	if p.batch.Empty() {
		return nil
	}
	if err := storage.CommitBatch(p.batch, pebble.Sync); err != nil {
		p.failed = fmt.Errorf("raft log: commit: %w", err)
		return p.failed
	}
	p.batch = p.db.NewBatch()
	return nil
}

// Close implements Log.
func (p *Pebble) Close() error { return p.db.Close() }
