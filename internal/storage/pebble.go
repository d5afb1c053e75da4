package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// The Pebble engine: a durable Engine on one Pebble database, with its
// keys laid out as pebble_keys.go describes and its values encoded as in
// pebble_encoding.go.

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
	// snapshots are the exports open on the database (shared by the
	// siblings), closed with it.
	snapshots *openSnapshots
	// objects caches the stores' objects (nil: no cache).
	objects *objectCache
	// dirty are the stores with a meta, session headers or outcomes
	// written since the last commit and not yet in the batch
	// (pebbleStore.pending).
	dirty []*pebbleStore
	// grouped: the cluster runs at OutcomeGroupsVersion, and the stores
	// write outcomes in groups (pebble_outcomes.go); version is the
	// highest cluster version the engine was told or read back.
	grouped bool
	version uint32
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
	e := &PebbleEngine{
		db:        db,
		batch:     db.NewIndexedBatch(),
		write:     write,
		stores:    map[wire.VolumeID]*pebbleStore{},
		onCommit:  o.OnCommit,
		failed:    &commitFailure{},
		objects:   newObjectCache(o.ObjectCacheBytes, o.OnCacheRead),
		snapshots: &openSnapshots{},
	}
	if err := e.readVersion(); err != nil {
		_ = e.batch.Close()
		_ = db.Close()
		return nil, fmt.Errorf("storage: open pebble in %s: %w", o.Dir, err)
	}
	return e, nil
}

// Sibling returns an engine on the same database with its own pending
// batch and stores, for use from another goroutine: the engines of one
// process must use disjoint volumes. Close the siblings before e.
func (e *PebbleEngine) Sibling() *PebbleEngine {
	return &PebbleEngine{
		db: e.db, batch: e.db.NewIndexedBatch(), write: e.write,
		stores: map[wire.VolumeID]*pebbleStore{}, onCommit: e.onCommit,
		failed: e.failed, sibling: true, snapshots: e.snapshots, objects: e.objects.sibling(), grouped: e.grouped, version: e.version,
	}
}

// Volume implements Engine. A volume exists as soon as something is
// stored in it; the returned store stays valid across Commits. The same
// volume always gives the same store, which keeps per-client state.
func (e *PebbleEngine) Volume(v wire.VolumeID) Store {
	s := e.stores[v]
	if s == nil {
		prefix, deadlines, types := volumePrefix(kindStamp, v), volumePrefix(kindDeadline, v), volumePrefix(kindType, v)
		s = &pebbleStore{e: e, vol: v, stamped: e.holdsAny("open volume", prefix, prefixEnd(prefix)),
			expiring: e.holdsAny("open volume", deadlines, prefixEnd(deadlines)),
			typed:    e.holdsAny("open volume", types, prefixEnd(types))}
		e.stores[v] = s
	}
	return s
}

// Volumes implements Engine.
func (e *PebbleEngine) Volumes() []wire.VolumeID {
	e.writePending()
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
	e.writePending()
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
	if err := e.snapshots.closeAll(); err != nil {
		return fmt.Errorf("storage: pebble close: exports: %w", err)
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
// writePending puts the metas and session headers the stores hold back
// into the batch: each is written once per commit however often the
// replica set it (a replica sets its meta with every update it applies,
// and its client's session header with every update of that client).
func (e *PebbleEngine) writePending() {
	for _, s := range e.dirty {
		s.writePending()
	}
	e.dirty = e.dirty[:0]
}

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
	e.scanWhile(op, lower, upper, func(key, value []byte) bool {
		f(key, value)
		return true
	})
}

// scanWhile is scan that stops once f returns false.
func (e *PebbleEngine) scanWhile(op string, lower, upper []byte, f func(key, value []byte) bool) {
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
		if !f(it.Key(), value) {
			break
		}
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
	// expiring is set once the volume holds a deadline: only then do
	// reads look for one, so keys that never expire cost nothing more.
	expiring bool
	// typed is set once the volume holds an object that is not a
	// string (a hash): only then do reads look for a type.
	typed bool
	// meta and sessions are the latest meta and session headers set and
	// not yet written into the batch; the engine writes them before it
	// commits, or before a read that scans for them (writePending).
	// dirty says the engine lists this store.
	meta     Meta
	metaSet  bool
	sessions map[wire.ClientID]sessionHeader
	dirty    bool
	// lastMeta is the last meta set, its slices the store's own: a meta
	// set again with equal slices (every update's) shares them instead
	// of copying them again.
	lastMeta Meta
	// headers are the clients known to have a session header in the
	// database or the batch, so that recording an outcome need not read
	// for one.
	headers map[wire.ClientID]bool
	// outcomes are the clients' outcomes while the engine writes them in
	// groups (pebble_outcomes.go), and outcomesDirty those with changes
	// not yet in the batch; outcomeBuf and outcomeKeyBuf are scratch.
	outcomes                  map[wire.ClientID]*clientOutcomes
	outcomesDirty             []*clientOutcomes
	outcomeBuf, outcomeKeyBuf []byte
	// keyBuf is scratch for object keys (Pebble copies what it keeps).
	keyBuf []byte
}

// sessionHeader is a client's session header: what SetSession stores.
type sessionHeader struct {
	ackedBelow uint64
	lastSN     wire.SN
}

// markDirty lists the store with its engine for writePending.
func (s *pebbleStore) markDirty() {
	if !s.dirty {
		s.dirty = true
		s.e.dirty = append(s.e.dirty, s)
	}
}

// writePending writes the held-back meta, session headers and outcomes
// into the batch, the headers in client order.
func (s *pebbleStore) writePending() {
	if len(s.outcomesDirty) > 0 {
		s.writeOutcomes()
	}
	if s.metaSet {
		s.set("set meta", volumePrefix(kindMeta, s.vol), encodeMeta(s.meta))
		s.meta, s.metaSet = Meta{}, false
	}
	if len(s.sessions) > 0 {
		for _, client := range slices.Sorted(maps.Keys(s.sessions)) {
			h := s.sessions[client]
			s.set("set session", sessionKey(s.vol, client), encodeSession(h.ackedBelow, h.lastSN))
		}
		clear(s.sessions)
	}
	s.dirty = false
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
	value, ok := s.get("get", s.objectKey(key))
	o := kv.Object{Value: value, Exists: ok}
	if s.stamped {
		if b, ok := s.get("get stamp", stampKey(s.vol, key)); ok {
			o.Stamp = s.stamp(b)
		}
	}
	if s.expiring && ok {
		o.Expires = s.deadline(key)
	}
	if s.typed && ok {
		o.Type = s.objectType(key)
	}
	if s.e.objects != nil {
		s.e.objects.put(s.vol, key, kv.Object{Value: bytes.Clone(o.Value), Exists: o.Exists, Stamp: o.Stamp, Expires: o.Expires, Type: o.Type})
	}
	return o
}

// Cached implements Store: the object cache's copy, if it holds key.
func (s *pebbleStore) Cached(key string) (kv.Object, bool) { return s.e.objects.peek(s.vol, key) }

// objectType reads an object's stored type (a string if none); an
// unknown one is fatal.
func (s *pebbleStore) objectType(key string) wire.ObjectType {
	b, ok := s.get("get type", typeKey(s.vol, key))
	if !ok {
		return wire.TypeString
	}
	if len(b) != 1 || wire.ObjectType(b[0]) != wire.TypeHash {
		s.fail("get type", fmt.Errorf("corrupt type record %x", b))
	}
	return wire.ObjectType(b[0])
}

// setType stores key's type, a record only for a type other than a
// string.
func (s *pebbleStore) setType(key string, t wire.ObjectType) {
	switch {
	case t != wire.TypeString:
		s.typed = true
		s.set("set type", typeKey(s.vol, key), []byte{byte(t)})
	case s.typed:
		s.delete("delete type", typeKey(s.vol, key))
	}
}

// deadline reads an object's stored deadline (0: none); a corrupt one
// is fatal.
func (s *pebbleStore) deadline(key string) wire.Time {
	b, ok := s.get("get deadline", deadlineKey(s.vol, key))
	if !ok {
		return 0
	}
	t, err := decodeDeadline(b)
	if err != nil {
		s.fail("get deadline", err)
	}
	return t
}

// setDeadline stores key's deadline (0: none) and keeps the index of
// deadlines in step.
func (s *pebbleStore) setDeadline(key string, t wire.Time) {
	if t == 0 && !s.expiring {
		return
	}
	old := s.deadline(key)
	if old == t {
		return
	}
	if old != 0 {
		s.delete("delete deadline", deadlineIndexKey(s.vol, old, key))
	}
	if t == 0 {
		s.delete("delete deadline", deadlineKey(s.vol, key))
		return
	}
	s.expiring = true
	s.set("set deadline", deadlineKey(s.vol, key), encodeDeadline(t))
	s.set("set deadline", deadlineIndexKey(s.vol, t, key), nil)
}

// Deadlines implements Store.
func (s *pebbleStore) Deadlines(max int) []KeyDeadline {
	if !s.expiring {
		return nil
	}
	var out []KeyDeadline
	prefix := volumePrefix(kindDeadlineIndex, s.vol)
	s.e.scanWhile("deadlines", prefix, prefixEnd(prefix), func(key, _ []byte) bool {
		if len(out) == max {
			return false
		}
		rest := key[len(prefix):]
		out = append(out, KeyDeadline{Expires: wire.Time(binary.BigEndian.Uint64(rest)), Key: string(rest[8:])})
		return true
	})
	return out
}

// stamp decodes a stored Stamp; a corrupt one is fatal.
func (s *pebbleStore) stamp(b []byte) wire.Stamp {
	st, err := decodeStamp(b)
	if err != nil {
		s.fail("get stamp", err)
	}
	return st
}

// objectKey returns key's object key in the store's scratch buffer,
// valid until the next call.
func (s *pebbleStore) objectKey(key string) []byte {
	s.keyBuf = append(append(s.keyBuf[:0], kindObject, 0, 0, 0, 0), key...)
	binary.BigEndian.PutUint32(s.keyBuf[1:5], uint32(s.vol))
	return s.keyBuf
}

// Set implements Store.
func (s *pebbleStore) Set(key string, object kv.Object) {
	k := s.objectKey(key)
	switch {
	case !object.Stamp.IsZero():
		s.stamped = true
		s.set("set stamp", stampKey(s.vol, key), encodeStamp(object.Stamp))
	case s.stamped:
		s.delete("delete stamp", stampKey(s.vol, key))
	}
	if !object.Exists {
		s.delete("delete", k)
		s.setDeadline(key, 0)
		s.setType(key, wire.TypeString)
		s.e.objects.put(s.vol, key, kv.Object{Stamp: object.Stamp})
		return
	}
	s.set("set", k, object.Value)
	s.setDeadline(key, object.Expires)
	s.setType(key, object.Type)
	value := object.Value
	if value == nil {
		value = []byte{} // as Get reads it back
	}
	s.e.objects.put(s.vol, key, kv.Object{Value: value, Exists: true, Stamp: object.Stamp, Expires: object.Expires, Type: object.Type})
}

// AppendShipLog implements Store.
func (s *pebbleStore) AppendShipLog(u wire.Update) {
	b, err := encodeShipLogRecord(u)
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
		u, err := decodeShipLogRecord(value, origin, n)
		if err != nil {
			s.fail(op, err)
		}
		out = append(out, u)
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
	if s.expiring {
		s.mergeDeadlines(out)
	}
	if s.typed {
		s.mergeTypes(out)
	}
	if out == nil {
		out = []KeyObject{}
	}
	return out
}

// mergeTypes adds the types to objects (ordered by key).
func (s *pebbleStore) mergeTypes(objects []KeyObject) {
	s.mergeRecords(objects, kindType, "snapshot types", func(o *kv.Object, value []byte) {
		if len(value) == 1 {
			o.Type = wire.ObjectType(value[0])
		}
	})
}

// mergeDeadlines adds the deadlines to objects (ordered by key).
func (s *pebbleStore) mergeDeadlines(objects []KeyObject) {
	s.mergeRecords(objects, kindDeadline, "snapshot deadlines", func(o *kv.Object, value []byte) {
		t, err := decodeDeadline(value)
		if err != nil {
			s.fail("snapshot deadlines", err)
		}
		o.Expires = t
	})
}

// mergeRecords walks the volume's records of kind, in key order beside
// objects (ordered by key), and has take add each to its object.
func (s *pebbleStore) mergeRecords(objects []KeyObject, kind byte, op string, take func(o *kv.Object, value []byte)) {
	i := 0
	prefix := volumePrefix(kind, s.vol)
	s.e.scan(op, prefix, prefixEnd(prefix), func(key, value []byte) {
		k := string(key[len(prefix):])
		for i < len(objects) && objects[i].Key < k {
			i++
		}
		if i < len(objects) && objects[i].Key == k {
			take(&objects[i].Object, value)
		}
	})
}

// Keys implements Store: the objects of a volume are its existing keys
// (a tombstone is a stamp alone), so one bounded iteration answers.
func (s *pebbleStore) Keys(from string, max int) ([]string, bool) {
	prefix := volumePrefix(kindObject, s.vol)
	lower := objectKey(s.vol, from)
	var keys []string
	more := false
	s.e.scanWhile("keys", lower, prefixEnd(prefix), func(key, _ []byte) bool {
		if len(keys) == max {
			more = true
			return false
		}
		keys = append(keys, string(key[len(prefix):]))
		return true
	})
	return keys, more
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
		st := s.stamp(value)
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
	s.meta, s.metaSet, s.lastMeta = Meta{}, false, Meta{}
	clear(s.sessions)
	clear(s.headers)
	clear(s.outcomes)
	s.expiring, s.typed = false, false
	for _, kind := range []byte{kindObject, kindMeta, kindSession, kindOutcome, kindStamp, kindShipLog, kindDeadline, kindDeadlineIndex, kindType} {
		prefix := volumePrefix(kind, s.vol)
		s.deleteRange("reset", prefix, prefixEnd(prefix))
	}
}

// SetMeta implements Store.
// The meta is held back until the engine commits (writePending).
func (s *pebbleStore) SetMeta(meta Meta) {
	last := &s.lastMeta
	if slices.Equal(meta.Config.Chain, last.Config.Chain) && (meta.Config.Chain == nil) == (last.Config.Chain == nil) {
		meta.Config.Chain = last.Config.Chain
	} else {
		meta.Config.Chain = slices.Clone(meta.Config.Chain)
	}
	if slices.Equal(meta.Config.Sites, last.Config.Sites) && (meta.Config.Sites == nil) == (last.Config.Sites == nil) {
		meta.Config.Sites = last.Config.Sites
	} else {
		meta.Config.Sites = slices.Clone(meta.Config.Sites)
	}
	if slices.Equal(meta.Vector, last.Vector) && (meta.Vector == nil) == (last.Vector == nil) {
		meta.Vector = last.Vector
	} else {
		meta.Vector = slices.Clone(meta.Vector)
	}
	s.lastMeta, s.meta, s.metaSet = meta, meta, true
	s.markDirty()
}

// Meta implements Store.
func (s *pebbleStore) Meta() (Meta, bool) {
	if s.metaSet {
		m := s.meta
		m.Config, m.Vector = m.Config.Clone(), slices.Clone(m.Vector)
		return m, true
	}
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
// The header is held back until the engine commits (writePending).
func (s *pebbleStore) SetSession(client wire.ClientID, ackedBelow uint64, lastSN wire.SN) {
	if s.sessions == nil {
		s.sessions = map[wire.ClientID]sessionHeader{}
	}
	s.sessions[client] = sessionHeader{ackedBelow: ackedBelow, lastSN: lastSN}
	s.knowHeader(client)
	s.markDirty()
}

// knowHeader records that client has a session header.
func (s *pebbleStore) knowHeader(client wire.ClientID) {
	if s.headers == nil {
		s.headers = map[wire.ClientID]bool{}
	}
	s.headers[client] = true
}

// SetOutcome implements Store. Like Memory, it creates the client's
// session (with a zero header) if there is none, so that Sessions lists
// every client that has outcomes.
func (s *pebbleStore) SetOutcome(client wire.ClientID, reqNo uint64, result wire.Result) {
	if !s.headers[client] {
		header := sessionKey(s.vol, client)
		if _, ok := s.get("set outcome", header); !ok {
			if _, held := s.sessions[client]; !held {
				s.set("set outcome", header, encodeSession(0, 0))
			}
		}
		s.knowHeader(client)
	}
	if s.e.grouped {
		s.setOutcomeGrouped(client, reqNo, result)
		return
	}
	s.set("set outcome", outcomeKey(s.vol, client, reqNo), encodeResult(result))
}

// DeleteOutcome implements Store. Before the engine writes outcomes in
// groups it is a blind delete; after, the first outcome of a client the
// store changes reads that client's outcomes (pebble_outcomes.go).
func (s *pebbleStore) DeleteOutcome(client wire.ClientID, reqNo uint64) {
	if s.e.grouped {
		s.deleteOutcomeGrouped(client, reqNo)
		return
	}
	s.delete("delete outcome", outcomeKey(s.vol, client, reqNo))
}

// DeleteSession implements Store.
func (s *pebbleStore) DeleteSession(client wire.ClientID) {
	delete(s.sessions, client)
	delete(s.headers, client)
	delete(s.outcomes, client)
	s.delete("delete session", sessionKey(s.vol, client))
	prefix := outcomePrefix(s.vol, client)
	s.deleteEach("delete session", prefix, prefixEnd(prefix))
}

// Sessions implements Store.
func (s *pebbleStore) Sessions() []wire.SessionRecord {
	s.e.writePending()
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
	// Attach the outcomes, which are in the same (client, reqNo) order
	// but for groups (pebble_outcomes.go), each client's sorted after.
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
		var err error
		if out[i].Outcomes, err = decodeOutcomes(out[i].Outcomes, binary.BigEndian.Uint64(key[len(op)+8:]), value); err != nil {
			s.fail("list sessions", err)
		}
	})
	for _, rec := range out {
		if !slices.IsSortedFunc(rec.Outcomes, compareOutcomes) {
			slices.SortFunc(rec.Outcomes, compareOutcomes)
		}
	}
	return out
}

func compareOutcomes(a, b wire.Outcome) int {
	return cmp.Compare(a.ReqNo, b.ReqNo)
}
