package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Key layout of the Pebble engine.
//
// Every key starts with a one-byte kind and the volume id as 4 big-endian
// bytes, so each kind of each volume is one contiguous key range, volumes
// sort in numeric order, and Reset is one range deletion per kind:
//
//	'o' vol(4) key             → the object's value bytes (raw)
//	'm' vol(4)                 → Meta, encoded (see encodeMeta)
//	's' vol(4) client(8)       → session header: ackedBelow, lastSN
//	'r' vol(4) client(8) req(8) → outcome: wire.Result, encoded
//	'g' vol(4) key             → the object's Stamp (geo volumes); with no
//	                             'o' key beside it, a tombstone
//	'l' vol(4) n(8)            → shipping log: the update this site
//	                             originated with Stamp.N n (geo volumes)
//
// client and req are big-endian, so a volume's sessions iterate in client
// order and a client's outcomes in request-number order. The key of an
// object is stored as is after the prefix; an absent object has no key.
// Only Reset writes range deletions; pruning outcomes and deleting
// sessions, which happen on every update, delete each key (see deleteEach).
//
// Every encoded value except an object's starts with a format version byte
// (currently 1) followed by fields in encoding/binary unsigned varints;
// byte strings are a varint length and the bytes. Decoding rejects unknown
// versions, unknown flag bits, truncated and trailing data as corruption.
//
//	Meta v1:    1, flags, volume, epoch, applied, len(chain), chain..., joining
//	            [, len(vector), (site, n)...]
//	            [, catchUpTo] [, appliedEpoch]
//	            flags bit 0: Chain is non-nil; bit 1: SnapshotInstalled;
//	            bit 2: a vector follows; bit 3: a catchUpTo follows
//	            (absent: 0); bit 4: an appliedEpoch follows (absent: 0)
//	Stamp v1:   1, origin, n, ts
//	ship log v1: 1, then the wire encoding of a Forward holding the update
//	session v1: 1, ackedBelow, lastSN
//	Result v1:  1, status (1 byte), flags, SN, value [, origin, n, ts]
//	            flags bit 0: Found; bit 1: Value is non-nil; bit 2: a
//	            Stamp follows
const (
	kindObject  byte = 'o'
	kindMeta    byte = 'm'
	kindSession byte = 's'
	kindOutcome byte = 'r'
	kindStamp   byte = 'g'
	kindShipLog byte = 'l'
)

// formatV1 is the version byte of every encoded record this code writes.
const formatV1 byte = 1

// pebbleFormat pins Pebble's on-disk format version, so that upgrading the
// library does not ratchet existing stores to a newer (one-way) format
// unnoticed. Raise it deliberately.
const pebbleFormat = pebble.FormatValueSeparation

// PebbleOptions configures OpenPebble.
type PebbleOptions struct {
	// Dir is the directory of the database; it is created if missing.
	Dir string
	// Sync makes Commit wait for fsync (pebble.Sync). Without it Commit
	// only writes the WAL to the operating system (pebble.NoSync): a process
	// crash loses nothing that Commit acknowledged, but a machine crash or
	// power loss may lose the last acknowledged commits.
	Sync bool
	// FS is the file system; nil means the operating system's. Tests use
	// vfs.NewMem().
	FS vfs.FS
	// Logger receives Pebble's messages (informational ones at debug
	// level); nil discards them.
	Logger *slog.Logger
	// CacheBytes sizes Pebble's block cache; 0 keeps Pebble's default
	// (8 MiB). Reads at the tail miss it once the data outgrows it.
	CacheBytes int64
	// MemTableBytes sizes each of Pebble's memtables; 0 keeps Pebble's
	// default (4 MiB). Up to two are held at once. A memtable larger than
	// the keys rewritten between flushes turns their rewrites into one
	// flushed version each, which saves the compactions of the others.
	MemTableBytes uint64
	// ObjectCacheBytes bounds the objects each engine (and each Sibling)
	// keeps in memory for reads beside Pebble's block cache, written
	// through on every change (objectcache.go); 0: none.
	ObjectCacheBytes int64
	// OnCacheRead, if set, is called with every read through the object
	// cache: whether the cache held the object (metrics).
	OnCacheRead func(hit bool)
	// OnCommit, if set, is called after each Commit that wrote something,
	// with how long the write (and fsync, with Sync) took and the batch's
	// size in bytes: group-commit latency, for metrics.
	OnCommit func(elapsed time.Duration, batchBytes int)
	// tune, if set, adjusts Pebble's options before the database opens
	// (tests).
	tune func(*pebble.Options)
}

// PebbleLogger adapts slog to Pebble's logger: its informational
// messages at debug level, errors at error level. Fatalf logs at error
// level and panics with a value CommitBatch turns back into an error.
// Every Pebble database of the process (the servers' stores, the master's
// Raft log) logs through it.
func PebbleLogger(log *slog.Logger) pebble.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return pebbleLogger{log}
}

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(msg, "pebble") {
		msg = "pebble: " + msg
	}
	l.log.Error(msg)
	panic(pebbleFatal(msg))
}

// pebbleFatal is the panic of PebbleLogger's Fatalf: Pebble calls it
// when it cannot go on, among others when a commit's WAL write or fsync
// failed ("fatal commit error"). Raised in Pebble's own goroutines
// (a failed MANIFEST write) it ends the process.
type pebbleFatal string

// CommitBatch commits b with o and returns every failure as an error,
// including the one Pebble reports by calling its logger's Fatalf (a WAL
// write or fsync that failed: a full disk, an I/O error), which
// PebbleLogger raises as a panic. After such an error the database must
// not be written again: Pebble's commit pipeline is broken, and the batch
// may be in the memtable, visible to reads, without being durable. The
// database must have been opened with PebbleLogger.
func CommitBatch(b *pebble.Batch, o *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fatal, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = errors.New(string(fatal))
		}
	}()
	return b.Commit(o)
}

// PebbleEngine is a durable Engine on one Pebble database. All its stores
// write into one pending indexed batch, which reads see; Commit writes that
// batch atomically (group commit) and starts a new one. Siblings share the
// database, each with its own batch and stores, for the event loops of one
// process: Pebble's commit pipeline merges their concurrent commits into
// one WAL write and fsync.
//
// Errors of Pebble inside Store methods, which return none, are fatal: the
// methods panic with an error naming the operation. So does decoding
// corrupt stored data.
type PebbleEngine struct {
	db       *pebble.DB
	batch    *pebble.Batch // pending changes; nil once closed
	write    *pebble.WriteOptions
	stores   map[wire.VolumeID]*pebbleStore
	onCommit func(time.Duration, int)
	// failed is shared by an engine and its siblings.
	failed *commitFailure
	// sibling is set on an engine Sibling returned: its Close leaves the
	// database open.
	sibling bool
	// objects caches the stores' objects (nil: no cache).
	objects *objectCache
}

// commitFailure holds the error of a commit that failed: every later
// Commit of the engine or a sibling returns it, so nothing the failed
// batch held is ever reported durable, and nothing is written to a
// database whose commit pipeline broke (see CommitBatch).
type commitFailure struct {
	mu  sync.Mutex
	err error
}

func (f *commitFailure) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *commitFailure) set(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	return f.err
}

var _ Engine = (*PebbleEngine)(nil)

// OpenPebble opens (or creates) the database in o.Dir.
func OpenPebble(o PebbleOptions) (*PebbleEngine, error) {
	if o.Dir == "" {
		return nil, errors.New("storage: open pebble: no directory given")
	}
	var cache *pebble.Cache
	if o.CacheBytes > 0 {
		cache = pebble.NewCache(o.CacheBytes)
		defer cache.Unref() // the database holds its own reference
	}
	opts := &pebble.Options{
		Cache:              cache,
		Logger:             PebbleLogger(o.Logger),
		FS:                 o.FS,
		FormatMajorVersion: pebbleFormat,
		MemTableSize:       o.MemTableBytes,
	}
	if o.tune != nil {
		o.tune(opts)
	}
	db, err := pebble.Open(o.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open pebble in %s: %w", o.Dir, err)
	}
	write := pebble.NoSync
	if o.Sync {
		write = pebble.Sync
	}
	return &PebbleEngine{
		db:       db,
		batch:    db.NewIndexedBatch(),
		write:    write,
		stores:   map[wire.VolumeID]*pebbleStore{},
		onCommit: o.OnCommit,
		failed:   &commitFailure{},
		objects:  newObjectCache(o.ObjectCacheBytes, o.OnCacheRead),
	}, nil
}

// Sibling returns an engine on the same database with its own pending
// batch and stores, for use from another goroutine: the engines of one
// process must use disjoint volumes. Close the siblings before e.
func (e *PebbleEngine) Sibling() *PebbleEngine {
	return &PebbleEngine{
		db: e.db, batch: e.db.NewIndexedBatch(), write: e.write,
		stores: map[wire.VolumeID]*pebbleStore{}, onCommit: e.onCommit,
		failed: e.failed, sibling: true, objects: e.objects.sibling(),
	}
}

// Volume implements Engine. A volume exists as soon as something is
// stored in it; the returned store stays valid across Commits. The same
// volume always gives the same store, which keeps per-client state.
func (e *PebbleEngine) Volume(v wire.VolumeID) Store {
	s := e.stores[v]
	if s == nil {
		prefix := volumePrefix(kindStamp, v)
		s = &pebbleStore{e: e, vol: v, stamped: e.holdsAny("open volume", prefix, prefixEnd(prefix))}
		e.stores[v] = s
	}
	return s
}

// Volumes implements Engine.
func (e *PebbleEngine) Volumes() []wire.VolumeID {
	var out []wire.VolumeID
	e.scan("list volumes", []byte{kindMeta}, []byte{kindMeta + 1}, func(key, _ []byte) {
		if len(key) != 5 {
			panic(fmt.Errorf("storage: pebble list volumes: corrupt meta key %x", key))
		}
		out = append(out, wire.VolumeID(binary.BigEndian.Uint32(key[1:])))
	})
	return out
}

// Commit implements Engine. It does nothing when there is nothing to
// commit.
func (e *PebbleEngine) Commit() error {
	if e.batch == nil {
		return errors.New("storage: pebble commit: engine is closed")
	}
	if e.batch.Empty() {
		return nil
	}
	if err := e.failed.get(); err != nil {
		return err
	}
	began := time.Now()
	if err := CommitBatch(e.batch, e.write); err != nil {
		return e.failed.set(fmt.Errorf("storage: pebble commit: %w", err))
	}
	if e.onCommit != nil {
		e.onCommit(time.Since(began), e.batch.Len())
	}
	if err := e.batch.Close(); err != nil {
		return fmt.Errorf("storage: pebble commit: close batch: %w", err)
	}
	e.batch = e.db.NewIndexedBatch()
	return nil
}

// Close implements Engine. Changes not committed are discarded.
func (e *PebbleEngine) Close() error {
	if e.batch == nil {
		return errors.New("storage: pebble close: engine is closed")
	}
	batchErr := e.batch.Close()
	e.batch = nil
	if e.sibling {
		if batchErr != nil {
			return fmt.Errorf("storage: pebble close: discard batch: %w", batchErr)
		}
		return nil
	}
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("storage: pebble close: %w", err)
	}
	if batchErr != nil {
		return fmt.Errorf("storage: pebble close: discard batch: %w", batchErr)
	}
	return nil
}

// pending returns the pending batch; op names the caller for the panic
// when the engine is closed.
func (e *PebbleEngine) pending(op string) *pebble.Batch {
	if e.batch == nil {
		panic(fmt.Errorf("storage: pebble %s: engine is closed", op))
	}
	return e.batch
}

// holdsAny reports whether some key lies in [lower, upper), as the
// pending batch sees them.
func (e *PebbleEngine) holdsAny(op string, lower, upper []byte) bool {
	it, err := e.pending(op).NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		panic(fmt.Errorf("storage: pebble %s: %w", op, err))
	}
	found := it.First()
	if err := it.Close(); err != nil {
		panic(fmt.Errorf("storage: pebble %s: %w", op, err))
	}
	return found
}

// scan calls f with every key in [lower, upper) and its value, as the
// pending batch sees them, in key order. The slices are valid only during
// the call.
func (e *PebbleEngine) scan(op string, lower, upper []byte, f func(key, value []byte)) {
	it, err := e.pending(op).NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		panic(fmt.Errorf("storage: pebble %s: %w", op, err))
	}
	closed := false
	defer func() {
		if !closed { // f or ValueAndErr panicked
			_ = it.Close()
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			panic(fmt.Errorf("storage: pebble %s: %w", op, err))
		}
		f(it.Key(), value)
	}
	closed = true
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		panic(fmt.Errorf("storage: pebble %s: %w", op, err))
	}
}

// pebbleStore is one volume of a PebbleEngine.
type pebbleStore struct {
	e   *PebbleEngine
	vol wire.VolumeID
	// stamped is set once the volume holds a Stamp (a geo volume): only
	// then do reads look for one.
	stamped bool
}

var _ Store = (*pebbleStore)(nil)

func (s *pebbleStore) fail(op string, err error) {
	panic(fmt.Errorf("storage: pebble %s (volume %d): %w", op, s.vol, err))
}

// get returns a copy of key's value and whether it exists.
func (s *pebbleStore) get(op string, key []byte) ([]byte, bool) {
	value, closer, err := s.e.pending(op).Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		s.fail(op, err)
	}
	out := make([]byte, len(value))
	copy(out, value)
	if err := closer.Close(); err != nil {
		s.fail(op, err)
	}
	return out, true
}

func (s *pebbleStore) set(op string, key, value []byte) {
	if err := s.e.pending(op).Set(key, value, nil); err != nil {
		s.fail(op, err)
	}
}

func (s *pebbleStore) delete(op string, key []byte) {
	if err := s.e.pending(op).Delete(key, nil); err != nil {
		s.fail(op, err)
	}
}

func (s *pebbleStore) deleteRange(op string, start, end []byte) {
	if err := s.e.pending(op).DeleteRange(start, end, nil); err != nil {
		s.fail(op, err)
	}
}

// deleteEach deletes every key in [start, end) with a point deletion.
//
// Range deletions are avoided on the per-update path: the first read after
// a commit that adds one re-fragments every range deletion in Pebble's
// memtable, so the cost of an update grows with the number of range
// deletions since the last flush. BenchmarkPebbleApplyPrune, when it
// pruned a client's outcomes below a bound once per update (with
// DeleteOutcomesBelow, since removed), took 0.11 ms per update over 2000
// updates and 0.57 ms over 16000 with range deletions, 0.02-0.04 ms with
// point deletions.
func (s *pebbleStore) deleteEach(op string, start, end []byte) {
	var keys [][]byte
	s.e.scan(op, start, end, func(key, _ []byte) { keys = append(keys, bytes.Clone(key)) })
	for _, k := range keys {
		s.delete(op, k)
	}
}

// Get implements Store. An existing object's Value is never nil.
func (s *pebbleStore) Get(key string) kv.Object {
	if o, ok := s.e.objects.get(s.vol, key); ok {
		return o
	}
	value, ok := s.get("get", objectKey(s.vol, key))
	o := kv.Object{Value: value, Exists: ok}
	if s.stamped {
		if b, ok := s.get("get stamp", stampKey(s.vol, key)); ok {
			o.Stamp = s.decodeStamp(b)
		}
	}
	if s.e.objects != nil {
		s.e.objects.put(s.vol, key, kv.Object{Value: bytes.Clone(o.Value), Exists: o.Exists, Stamp: o.Stamp})
	}
	return o
}

func (s *pebbleStore) decodeStamp(b []byte) wire.Stamp {
	d := decoder{what: "stamp", buf: b}
	d.version()
	origin := d.uvarint()
	if origin > math.MaxUint32 {
		d.failf("site %d out of range", origin)
	}
	st := wire.Stamp{Origin: wire.SiteID(origin), N: d.uvarint(), TS: d.uvarint()}
	if err := d.finish(); err != nil {
		s.fail("get stamp", err)
	}
	return st
}

func encodeStamp(st wire.Stamp) []byte {
	b := []byte{formatV1}
	b = binary.AppendUvarint(b, uint64(st.Origin))
	b = binary.AppendUvarint(b, st.N)
	return binary.AppendUvarint(b, st.TS)
}

// Set implements Store.
func (s *pebbleStore) Set(key string, object kv.Object) {
	k := objectKey(s.vol, key)
	switch {
	case !object.Stamp.IsZero():
		s.stamped = true
		s.set("set stamp", stampKey(s.vol, key), encodeStamp(object.Stamp))
	case s.stamped:
		s.delete("delete stamp", stampKey(s.vol, key))
	}
	if !object.Exists {
		s.delete("delete", k)
		s.e.objects.put(s.vol, key, kv.Object{Stamp: object.Stamp})
		return
	}
	s.set("set", k, object.Value)
	value := object.Value
	if value == nil {
		value = []byte{} // as Get reads it back
	}
	s.e.objects.put(s.vol, key, kv.Object{Value: value, Exists: true, Stamp: object.Stamp})
}

// AppendShipLog implements Store.
func (s *pebbleStore) AppendShipLog(u wire.Update) {
	b, err := wire.AppendMessage([]byte{formatV1}, &wire.Forward{Updates: []wire.Update{u}})
	if err != nil {
		s.fail("append ship log", err)
	}
	s.set("append ship log", shipLogKey(s.vol, u.Stamp.Origin, u.Stamp.N), b)
}

// ShipLog implements Store.
func (s *pebbleStore) ShipLog(origin wire.SiteID, from uint64, max int) []wire.Update {
	const op = "ship log"
	it, err := s.e.pending(op).NewIter(&pebble.IterOptions{
		LowerBound: shipLogKey(s.vol, origin, from), UpperBound: prefixEnd(shipLogPrefix(s.vol, origin)),
	})
	if err != nil {
		s.fail(op, err)
	}
	defer func() {
		if err := it.Close(); err != nil {
			s.fail(op, err)
		}
	}()
	var out []wire.Update
	for valid := it.First(); valid && len(out) < max; valid = it.Next() {
		n := binary.BigEndian.Uint64(it.Key()[shipLogPrefixLen:])
		if len(out) > 0 && n != out[len(out)-1].Stamp.N+1 {
			break
		}
		value, err := it.ValueAndErr()
		if err != nil {
			s.fail(op, err)
		}
		if len(value) == 0 || value[0] != formatV1 {
			s.fail(op, fmt.Errorf("corrupt ship log record %d: unknown format", n))
		}
		m, err := wire.Unmarshal(value[1:])
		f, ok := m.(*wire.Forward)
		if err != nil || !ok || len(f.Updates) != 1 || f.Updates[0].Stamp.N != n || f.Updates[0].Stamp.Origin != origin {
			s.fail(op, fmt.Errorf("corrupt ship log record %d: %v", n, err))
		}
		out = append(out, f.Updates[0])
	}
	return out
}

// TrimShipLog implements Store.
func (s *pebbleStore) TrimShipLog(origin wire.SiteID, through uint64) {
	if through == math.MaxUint64 {
		through--
	}
	s.deleteEach("trim ship log", shipLogPrefix(s.vol, origin), shipLogKey(s.vol, origin, through+1))
}

// Snapshot implements Store.
func (s *pebbleStore) Snapshot() []KeyObject {
	var out []KeyObject
	prefix := volumePrefix(kindObject, s.vol)
	s.e.scan("snapshot", prefix, prefixEnd(prefix), func(key, value []byte) {
		v := make([]byte, len(value))
		copy(v, value)
		out = append(out, KeyObject{Key: string(key[len(prefix):]), Object: kv.Object{Value: v, Exists: true}})
	})
	if s.stamped {
		out = s.mergeStamps(out)
	}
	if out == nil {
		out = []KeyObject{}
	}
	return out
}

// mergeStamps adds the stamps to objects (ordered by key) and the
// tombstones among them.
func (s *pebbleStore) mergeStamps(objects []KeyObject) []KeyObject {
	var out []KeyObject
	i := 0
	prefix := volumePrefix(kindStamp, s.vol)
	s.e.scan("snapshot stamps", prefix, prefixEnd(prefix), func(key, value []byte) {
		k := string(key[len(prefix):])
		for i < len(objects) && objects[i].Key < k {
			out = append(out, objects[i])
			i++
		}
		st := s.decodeStamp(value)
		if i < len(objects) && objects[i].Key == k {
			objects[i].Object.Stamp = st
			out = append(out, objects[i])
			i++
			return
		}
		out = append(out, KeyObject{Key: k, Object: kv.Object{Stamp: st}})
	})
	return append(out, objects[i:]...)
}

// Reset implements Store.
func (s *pebbleStore) Reset() {
	s.e.objects.dropVolume(s.vol)
	for _, kind := range []byte{kindObject, kindMeta, kindSession, kindOutcome, kindStamp, kindShipLog} {
		prefix := volumePrefix(kind, s.vol)
		s.deleteRange("reset", prefix, prefixEnd(prefix))
	}
}

// SetMeta implements Store.
func (s *pebbleStore) SetMeta(meta Meta) {
	s.set("set meta", volumePrefix(kindMeta, s.vol), encodeMeta(meta))
}

// Meta implements Store.
func (s *pebbleStore) Meta() (Meta, bool) {
	value, ok := s.get("get meta", volumePrefix(kindMeta, s.vol))
	if !ok {
		return Meta{}, false
	}
	meta, err := decodeMeta(value)
	if err != nil {
		s.fail("get meta", err)
	}
	return meta, true
}

// SetSession implements Store.
func (s *pebbleStore) SetSession(client wire.ClientID, ackedBelow uint64, lastSN wire.SN) {
	s.set("set session", sessionKey(s.vol, client), encodeSession(ackedBelow, lastSN))
}

// SetOutcome implements Store. Like Memory, it creates the client's
// session (with a zero header) if there is none, so that Sessions lists
// every client that has outcomes.
func (s *pebbleStore) SetOutcome(client wire.ClientID, reqNo uint64, result wire.Result) {
	header := sessionKey(s.vol, client)
	if _, ok := s.get("set outcome", header); !ok {
		s.set("set outcome", header, encodeSession(0, 0))
	}
	s.set("set outcome", outcomeKey(s.vol, client, reqNo), encodeResult(result))
}

// DeleteOutcome implements Store.
func (s *pebbleStore) DeleteOutcome(client wire.ClientID, reqNo uint64) {
	s.delete("delete outcome", outcomeKey(s.vol, client, reqNo))
}

// DeleteSession implements Store.
func (s *pebbleStore) DeleteSession(client wire.ClientID) {
	s.delete("delete session", sessionKey(s.vol, client))
	prefix := outcomePrefix(s.vol, client)
	s.deleteEach("delete session", prefix, prefixEnd(prefix))
}

// Sessions implements Store.
func (s *pebbleStore) Sessions() []wire.SessionRecord {
	var out []wire.SessionRecord
	sp := volumePrefix(kindSession, s.vol)
	s.e.scan("list sessions", sp, prefixEnd(sp), func(key, value []byte) {
		if len(key) != len(sp)+8 {
			s.fail("list sessions", fmt.Errorf("corrupt session key %x", key))
		}
		rec := wire.SessionRecord{Client: wire.ClientID(binary.BigEndian.Uint64(key[len(sp):]))}
		var err error
		if rec.AckedBelow, rec.LastSN, err = decodeSession(value); err != nil {
			s.fail("list sessions", err)
		}
		out = append(out, rec)
	})
	// Attach the outcomes, which are in the same (client, reqNo) order.
	// Every outcome's client has a header: SetOutcome writes one, and only
	// DeleteSession and Reset remove headers, with the outcomes.
	i := 0
	op := volumePrefix(kindOutcome, s.vol)
	s.e.scan("list sessions", op, prefixEnd(op), func(key, value []byte) {
		if len(key) != len(op)+16 {
			s.fail("list sessions", fmt.Errorf("corrupt outcome key %x", key))
		}
		client := wire.ClientID(binary.BigEndian.Uint64(key[len(op):]))
		for i < len(out) && out[i].Client < client {
			i++
		}
		if i == len(out) || out[i].Client != client {
			s.fail("list sessions", fmt.Errorf("corrupt store: outcome %x has no session header", key))
		}
		result, err := decodeResult(value)
		if err != nil {
			s.fail("list sessions", err)
		}
		out[i].Outcomes = append(out[i].Outcomes, wire.Outcome{ReqNo: binary.BigEndian.Uint64(key[len(op)+8:]), Result: result})
	})
	return out
}

// Keys.

func volumePrefix(kind byte, v wire.VolumeID) []byte {
	return binary.BigEndian.AppendUint32([]byte{kind}, uint32(v))
}

func objectKey(v wire.VolumeID, key string) []byte {
	k := make([]byte, 0, 5+len(key))
	k = append(k, kindObject)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return append(k, key...)
}

func stampKey(v wire.VolumeID, key string) []byte {
	k := make([]byte, 0, 5+len(key))
	k = append(k, kindStamp)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return append(k, key...)
}

// shipLogPrefix is where origin's shipping log of volume v lies: its
// updates follow by Stamp.N, big-endian.
func shipLogPrefix(v wire.VolumeID, origin wire.SiteID) []byte {
	return binary.BigEndian.AppendUint32(volumePrefix(kindShipLog, v), uint32(origin))
}

// shipLogPrefixLen is the length of a shipLogPrefix.
const shipLogPrefixLen = 1 + 4 + 4

func shipLogKey(v wire.VolumeID, origin wire.SiteID, n uint64) []byte {
	return binary.BigEndian.AppendUint64(shipLogPrefix(v, origin), n)
}

func sessionKey(v wire.VolumeID, client wire.ClientID) []byte {
	k := make([]byte, 0, 13)
	k = append(k, kindSession)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return binary.BigEndian.AppendUint64(k, uint64(client))
}

func outcomePrefix(v wire.VolumeID, client wire.ClientID) []byte {
	k := make([]byte, 0, 21)
	k = append(k, kindOutcome)
	k = binary.BigEndian.AppendUint32(k, uint32(v))
	return binary.BigEndian.AppendUint64(k, uint64(client))
}

func outcomeKey(v wire.VolumeID, client wire.ClientID, reqNo uint64) []byte {
	return binary.BigEndian.AppendUint64(outcomePrefix(v, client), reqNo)
}

// prefixEnd returns the smallest key above every key starting with prefix.
// The prefixes used here start with a kind byte below 0xff, so it exists.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic(fmt.Sprintf("storage: no key follows the prefix %x", prefix))
}

// Encodings.

const (
	metaChainNonNil = 1 << 0
	// metaSnapshotInstalled: Meta.SnapshotInstalled.
	metaSnapshotInstalled = 1 << 1
	// metaVector: Meta.Vector follows the joining server.
	metaVector = 1 << 2
	// metaCatchUp: Meta.CatchUpTo follows the vector.
	metaCatchUp = 1 << 3
	// metaAppliedEpoch: Meta.AppliedEpoch follows CatchUpTo.
	metaAppliedEpoch = 1 << 4
	// metaSites: the configuration's K and Sites follow AppliedEpoch (a
	// causal or geo volume's: a restarted replica knows what it holds,
	// such as a hierarchical volume's control records, before the
	// master's next configuration).
	metaSites = 1 << 5
	// metaMode: the configuration's Mode follows the sites (a causal or
	// hierarchical volume's); without it, the meta was written before
	// configurations named their mode, which wire.ImpliedMode tells.
	metaMode = 1 << 6

	resultFound       = 1 << 0
	resultValueNonNil = 1 << 1
	// resultStamp: the result's Stamp follows the value.
	resultStamp = 1 << 2
)

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func encodeMeta(m Meta) []byte {
	var flags byte
	if m.Config.Chain != nil {
		flags |= metaChainNonNil
	}
	if m.SnapshotInstalled {
		flags |= metaSnapshotInstalled
	}
	if len(m.Vector) > 0 {
		flags |= metaVector
	}
	if m.CatchUpTo != 0 {
		flags |= metaCatchUp
	}
	if m.AppliedEpoch != 0 {
		flags |= metaAppliedEpoch
	}
	if m.Config.K != 0 || len(m.Config.Sites) > 0 {
		flags |= metaSites
	}
	if m.Config.Mode != wire.ModeStrong {
		flags |= metaMode
	}
	b := []byte{formatV1, flags}
	b = binary.AppendUvarint(b, uint64(m.Config.Volume))
	b = binary.AppendUvarint(b, uint64(m.Config.Epoch))
	b = binary.AppendUvarint(b, uint64(m.Applied))
	b = binary.AppendUvarint(b, uint64(len(m.Config.Chain)))
	for _, id := range m.Config.Chain {
		b = appendString(b, string(id))
	}
	b = appendString(b, string(m.Config.Joining))
	if len(m.Vector) > 0 {
		b = binary.AppendUvarint(b, uint64(len(m.Vector)))
		for _, e := range m.Vector {
			b = binary.AppendUvarint(b, uint64(e.Site))
			b = binary.AppendUvarint(b, e.N)
		}
	}
	if m.CatchUpTo != 0 {
		b = binary.AppendUvarint(b, uint64(m.CatchUpTo))
	}
	if m.AppliedEpoch != 0 {
		b = binary.AppendUvarint(b, uint64(m.AppliedEpoch))
	}
	if flags&metaSites != 0 {
		b = binary.AppendUvarint(b, uint64(m.Config.K))
		b = binary.AppendUvarint(b, uint64(len(m.Config.Sites)))
		for _, s := range m.Config.Sites {
			b = binary.AppendUvarint(b, uint64(s))
		}
	}
	if flags&metaMode != 0 {
		b = append(b, byte(m.Config.Mode))
	}
	return b
}

func decodeMeta(b []byte) (Meta, error) {
	d := decoder{what: "meta", buf: b}
	d.version()
	flags := d.byte()
	if flags&^(metaChainNonNil|metaSnapshotInstalled|metaVector|metaCatchUp|metaAppliedEpoch|metaSites|metaMode) != 0 {
		d.failf("unknown flags %#x", flags)
	}
	var m Meta
	m.SnapshotInstalled = flags&metaSnapshotInstalled != 0
	volume := d.uvarint()
	if volume > math.MaxUint32 {
		d.failf("volume %d out of range", volume)
	}
	m.Config.Volume = wire.VolumeID(volume)
	m.Config.Epoch = wire.Epoch(d.uvarint())
	m.Applied = wire.SN(d.uvarint())
	n := d.uvarint()
	if n > uint64(len(d.buf)) { // each member takes at least one byte
		d.failf("chain of %d members in %d bytes", n, len(d.buf))
	}
	if n != 0 && flags&metaChainNonNil == 0 {
		d.failf("nil chain of %d members", n)
	}
	if d.err != nil {
		return Meta{}, d.err
	}
	if flags&metaChainNonNil != 0 {
		m.Config.Chain = make([]wire.NodeID, 0, n)
	}
	for range n {
		m.Config.Chain = append(m.Config.Chain, wire.NodeID(d.bytes()))
	}
	m.Config.Joining = wire.NodeID(d.bytes())
	if flags&metaVector != 0 {
		for range d.count("vector") {
			if d.err != nil {
				break
			}
			m.Vector = append(m.Vector, wire.SiteCount{Site: d.site(), N: d.uvarint()})
		}
		if d.err == nil && !m.Vector.Valid() {
			d.failf("vector out of order or with a zero count")
		}
	}
	if flags&metaCatchUp != 0 {
		m.CatchUpTo = wire.SN(d.uvarint())
	}
	if flags&metaAppliedEpoch != 0 {
		m.AppliedEpoch = wire.Epoch(d.uvarint())
	}
	if flags&metaSites != 0 {
		k := d.uvarint()
		if k > math.MaxInt32 {
			d.failf("k %d out of range", k)
		}
		m.Config.K = int(k)
		for range d.count("sites") {
			if d.err != nil {
				break
			}
			m.Config.Sites = append(m.Config.Sites, d.site())
		}
	}
	if flags&metaMode != 0 {
		if m.Config.Mode = wire.Mode(d.byte()); m.Config.Mode > wire.ModeHierarchical {
			d.failf("unknown mode %d", m.Config.Mode)
		}
	} else {
		m.Config.Mode = wire.ImpliedMode(m.Config.K, m.Config.Sites)
	}
	if err := d.finish(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

func encodeSession(ackedBelow uint64, lastSN wire.SN) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64)
	b = append(b, formatV1)
	b = binary.AppendUvarint(b, ackedBelow)
	return binary.AppendUvarint(b, uint64(lastSN))
}

func decodeSession(b []byte) (ackedBelow uint64, lastSN wire.SN, err error) {
	d := decoder{what: "session header", buf: b}
	d.version()
	ackedBelow = d.uvarint()
	lastSN = wire.SN(d.uvarint())
	if err := d.finish(); err != nil {
		return 0, 0, err
	}
	return ackedBelow, lastSN, nil
}

func encodeResult(r wire.Result) []byte {
	var flags byte
	if r.Found {
		flags |= resultFound
	}
	if r.Value != nil {
		flags |= resultValueNonNil
	}
	if !r.Stamp.IsZero() {
		flags |= resultStamp
	}
	b := make([]byte, 0, 3+2*binary.MaxVarintLen64+len(r.Value))
	b = append(b, formatV1, byte(r.Status), flags)
	b = binary.AppendUvarint(b, uint64(r.SN))
	b = appendString(b, string(r.Value))
	if !r.Stamp.IsZero() {
		b = binary.AppendUvarint(b, uint64(r.Stamp.Origin))
		b = binary.AppendUvarint(b, r.Stamp.N)
		b = binary.AppendUvarint(b, r.Stamp.TS)
	}
	return b
}

func decodeResult(b []byte) (wire.Result, error) {
	d := decoder{what: "outcome", buf: b}
	d.version()
	var r wire.Result
	r.Status = wire.Status(d.byte())
	flags := d.byte()
	if flags&^(resultFound|resultValueNonNil|resultStamp) != 0 {
		d.failf("unknown flags %#x", flags)
	}
	r.Found = flags&resultFound != 0
	r.SN = wire.SN(d.uvarint())
	value := d.bytes()
	if flags&resultValueNonNil != 0 {
		r.Value = []byte(value)
	} else if len(value) != 0 {
		d.failf("nil value of %d bytes", len(value))
	}
	if flags&resultStamp != 0 {
		origin := d.uvarint()
		if origin > math.MaxUint32 {
			d.failf("site %d out of range", origin)
		}
		r.Stamp = wire.Stamp{Origin: wire.SiteID(origin), N: d.uvarint(), TS: d.uvarint()}
	}
	if err := d.finish(); err != nil {
		return wire.Result{}, err
	}
	return r, nil
}

// decoder reads an encoded record; the first error sticks and later reads
// return zero values.
type decoder struct {
	what string
	buf  []byte
	err  error
}

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("corrupt %s record: %s", d.what, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) version() {
	if v := d.byte(); d.err == nil && v != formatV1 {
		d.failf("unknown format version %d", v)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.failf("truncated")
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes reads a length-prefixed byte string and returns a copy.
// count reads how many entries follow, each at least one byte long.
func (d *decoder) count(what string) uint64 {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.failf("%s of %d entries in %d bytes", what, n, len(d.buf))
		return 0
	}
	return n
}

// site reads a site id.
func (d *decoder) site() wire.SiteID {
	s := d.uvarint()
	if s > math.MaxUint32 {
		d.failf("site %d out of range", s)
	}
	return wire.SiteID(s)
}

func (d *decoder) bytes() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.buf)) {
		d.failf("truncated: %d-byte string in %d bytes", n, len(d.buf))
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) != 0 {
		d.failf("%d trailing bytes", len(d.buf))
	}
	return d.err
}
