package storage

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// MemoryEngine is an Engine whose stores live in memory. Commit does
// nothing, unless the engine models a disk (NewCrashableMemoryEngine).
type MemoryEngine struct {
	volumes map[wire.VolumeID]*Memory
	// crashable: writes since the last Commit are undone by Crash.
	crashable bool
	// undo holds, in order, how to take back each write since the last
	// Commit (crashable engines only).
	undo []func()
	// durable holds each volume's Meta as of the last Commit
	// (crashable engines only).
	durable map[wire.VolumeID]Meta
}

// NewMemoryEngine returns an empty in-memory engine whose every write is
// durable at once.
func NewMemoryEngine() *MemoryEngine { return &MemoryEngine{volumes: map[wire.VolumeID]*Memory{}} }

// NewCrashableMemoryEngine returns an empty in-memory engine that models
// a disk: only what was written before the last Commit survives Crash.
// The simulator gives servers such engines when their commits lag their
// steps (chain.ServerOptions.CommitsLag).
func NewCrashableMemoryEngine() *MemoryEngine {
	e := NewMemoryEngine()
	e.crashable, e.durable = true, map[wire.VolumeID]Meta{}
	return e
}

// Volume implements Engine.
func (e *MemoryEngine) Volume(v wire.VolumeID) Store {
	if e.volumes[v] == nil {
		e.volumes[v] = NewMemory()
		if e.crashable {
			e.volumes[v].undo = &e.undo
		}
	}
	return e.volumes[v]
}

// Crash takes back every write since the last Commit, as a machine crash
// loses what was not on disk; a no-op for an engine that is not
// crashable.
func (e *MemoryEngine) Crash() {
	for i := len(e.undo) - 1; i >= 0; i-- {
		e.undo[i]()
	}
	e.undo = e.undo[:0]
}

// Uncommitted reports whether a crashable engine holds writes the next
// Commit would make durable.
func (e *MemoryEngine) Uncommitted() bool { return len(e.undo) > 0 }

// DurableMeta returns a volume's Meta as of the last Commit of a
// crashable engine: what a crash would leave (false if none).
func (e *MemoryEngine) DurableMeta(v wire.VolumeID) (Meta, bool) {
	m, ok := e.durable[v]
	return m, ok
}

// Volumes implements Engine.
func (e *MemoryEngine) Volumes() []wire.VolumeID {
	var out []wire.VolumeID
	for _, v := range slices.Sorted(maps.Keys(e.volumes)) {
		if _, ok := e.volumes[v].Meta(); ok {
			out = append(out, v)
		}
	}
	return out
}

// Commit implements Engine.
func (e *MemoryEngine) Commit() error {
	if !e.crashable || len(e.undo) == 0 {
		return nil
	}
	clear(e.undo) // (drop the closures' references)
	e.undo = e.undo[:0]
	for v, m := range e.volumes {
		if meta, ok := m.Meta(); ok {
			e.durable[v] = meta
		} else {
			delete(e.durable, v)
		}
	}
	return nil
}

// Close implements Engine.
func (e *MemoryEngine) Close() error { return nil }

// Memory is an in-memory Store.
type Memory struct {
	objects map[string]kv.Object
	// expiring holds the keys of objects with a deadline, so that
	// Deadlines looks at those alone.
	expiring map[string]bool
	meta     *Meta
	sessions map[wire.ClientID]*memorySession
	// shipLogs hold the shipping log of each origin in Stamp.N order.
	shipLogs map[wire.SiteID][]wire.Update
	// undo, in a crashable engine's store, is the engine's log of how to
	// take back each write since its last Commit.
	undo *[]func()
}

// remember logs how to take back a write, in a crashable engine's store.
func (m *Memory) remember(f func()) {
	if m.undo != nil {
		*m.undo = append(*m.undo, f)
	}
}

type memorySession struct {
	ackedBelow uint64
	lastSN     wire.SN
	outcomes   map[uint64]wire.Result
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{objects: map[string]kv.Object{}, expiring: map[string]bool{}, sessions: map[wire.ClientID]*memorySession{}}
}

// Get implements Store.
func (m *Memory) Get(key string) kv.Object {
	o := m.objects[key]
	o.Value = bytes.Clone(o.Value)
	return o
}

// Cached implements Store. A Memory holds every object in memory, but it
// stands in for a store whose cache misses: it reports the keys whose
// hash is odd uncached, so that the simulator runs the callers' paths
// for both answers.
func (m *Memory) Cached(key string) (kv.Object, bool) {
	h := fnv.New32a()
	h.Write([]byte(key))
	if h.Sum32()%2 == 1 {
		return kv.Object{}, false
	}
	return m.objects[key], true
}

// Set implements Store.
func (m *Memory) Set(key string, object kv.Object) {
	if m.undo != nil {
		old, had := m.objects[key]
		m.remember(func() {
			if had {
				m.objects[key] = old
			} else {
				delete(m.objects, key)
			}
			m.noteDeadline(key, old)
		})
	}
	m.noteDeadline(key, object)
	if !object.Exists && object.Stamp.IsZero() {
		delete(m.objects, key)
		return
	}
	if !object.Exists {
		object.Value, object.Expires, object.Type = nil, 0, wire.TypeString
	}
	m.objects[key] = object
}

// AppendShipLog implements Store.
func (m *Memory) AppendShipLog(u wire.Update) {
	log := m.shipLogs[u.Stamp.Origin]
	if n := len(log); n > 0 && log[n-1].Stamp.N >= u.Stamp.N {
		panic(fmt.Sprintf("storage: ship log of site %d: append of %d after %d", u.Stamp.Origin, u.Stamp.N, log[n-1].Stamp.N))
	}
	if m.shipLogs == nil {
		m.shipLogs = map[wire.SiteID][]wire.Update{}
	}
	n := len(log)
	m.remember(func() { m.shipLogs[u.Stamp.Origin] = m.shipLogs[u.Stamp.Origin][:n] })
	m.shipLogs[u.Stamp.Origin] = append(log, cloneUpdate(u))
}

// ShipLog implements Store.
func (m *Memory) ShipLog(origin wire.SiteID, from uint64, max int) []wire.Update {
	log := m.shipLogs[origin]
	i, _ := slices.BinarySearchFunc(log, from, func(u wire.Update, n uint64) int { return cmp.Compare(u.Stamp.N, n) })
	var out []wire.Update
	for ; i < len(log) && len(out) < max; i++ {
		if len(out) > 0 && log[i].Stamp.N != out[len(out)-1].Stamp.N+1 {
			break
		}
		out = append(out, cloneUpdate(log[i]))
	}
	return out
}

// TrimShipLog implements Store.
func (m *Memory) TrimShipLog(origin wire.SiteID, through uint64) {
	log := m.shipLogs[origin]
	if len(log) == 0 {
		return
	}
	i, found := slices.BinarySearchFunc(log, through, func(u wire.Update, n uint64) int { return cmp.Compare(u.Stamp.N, n) })
	if found {
		i++
	}
	if m.undo != nil {
		trimmed := slices.Clone(log[:i])
		m.remember(func() { m.shipLogs[origin] = append(trimmed, m.shipLogs[origin]...) })
	}
	m.shipLogs[origin] = slices.Delete(log, 0, i)
}

// cloneUpdate copies the parts of u a caller could modify.
func cloneUpdate(u wire.Update) wire.Update {
	u.Value = bytes.Clone(u.Value)
	u.Deps = slices.Clone(u.Deps)
	u.Result.Value = bytes.Clone(u.Result.Value)
	return u
}

// Snapshot implements Store.
func (m *Memory) Snapshot() []KeyObject {
	keys := slices.Sorted(maps.Keys(m.objects))
	out := make([]KeyObject, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeyObject{Key: k, Object: m.Get(k)})
	}
	return out
}

// noteDeadline keeps expiring in step with key's object o.
func (m *Memory) noteDeadline(key string, o kv.Object) {
	if o.Exists && o.Expires != 0 {
		m.expiring[key] = true
	} else {
		delete(m.expiring, key)
	}
}

// Deadlines implements Store. It sorts the objects with a deadline on
// every call: the memory store serves tests and the simulator.
func (m *Memory) Deadlines(max int) []KeyDeadline {
	var out []KeyDeadline
	for k := range m.expiring {
		out = append(out, KeyDeadline{Key: k, Expires: m.objects[k].Expires})
	}
	slices.SortFunc(out, func(a, b KeyDeadline) int {
		return cmp.Or(cmp.Compare(a.Expires, b.Expires), cmp.Compare(a.Key, b.Key))
	})
	if len(out) > max {
		out = out[:max:max]
	}
	return out
}

// Keys implements Store. It sorts the keys on every call: the memory
// store serves tests and the simulator, not large volumes.
func (m *Memory) Keys(from string, max int) ([]string, bool) {
	var keys []string
	for k, o := range m.objects {
		if k >= from && o.Exists {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) > max {
		return keys[:max:max], true
	}
	return keys, false
}

// Reset implements Store.
func (m *Memory) Reset() {
	if m.undo != nil {
		objects, expiring, sessions, shipLogs, meta := m.objects, m.expiring, m.sessions, m.shipLogs, m.meta
		m.remember(func() {
			m.objects, m.expiring, m.sessions, m.shipLogs, m.meta = objects, expiring, sessions, shipLogs, meta
		})
		m.objects, m.expiring, m.sessions = map[string]kv.Object{}, map[string]bool{}, map[wire.ClientID]*memorySession{}
	} else {
		clear(m.objects)
		clear(m.expiring)
		clear(m.sessions)
	}
	m.shipLogs = nil
	m.meta = nil
}

// SetMeta implements Store.
func (m *Memory) SetMeta(meta Meta) {
	meta.Config = meta.Config.Clone()
	meta.Vector = slices.Clone(meta.Vector)
	old := m.meta
	m.remember(func() { m.meta = old })
	m.meta = &meta
}

// Meta implements Store.
func (m *Memory) Meta() (Meta, bool) {
	if m.meta == nil {
		return Meta{}, false
	}
	meta := *m.meta
	meta.Config = meta.Config.Clone()
	meta.Vector = slices.Clone(meta.Vector)
	return meta, true
}

func (m *Memory) session(client wire.ClientID) *memorySession {
	s := m.sessions[client]
	if s == nil {
		s = &memorySession{outcomes: map[uint64]wire.Result{}}
		m.sessions[client] = s
	}
	return s
}

// SetSession implements Store.
func (m *Memory) SetSession(client wire.ClientID, ackedBelow uint64, lastSN wire.SN) {
	m.rememberSession(client)
	s := m.session(client)
	s.ackedBelow, s.lastSN = ackedBelow, lastSN
}

// sessionToChange returns, in a crashable engine's store, the existing
// session a change is about to touch; for a session the change creates it
// logs the session's removal and returns nil (nil too when nothing is
// logged).
func (m *Memory) sessionToChange(client wire.ClientID) *memorySession {
	if m.undo == nil {
		return nil
	}
	s := m.sessions[client]
	if s == nil {
		m.remember(func() { delete(m.sessions, client) })
	}
	return s
}

// rememberSession logs how to take back a change to a session's header.
func (m *Memory) rememberSession(client wire.ClientID) {
	if s := m.sessionToChange(client); s != nil {
		ackedBelow, lastSN := s.ackedBelow, s.lastSN
		m.remember(func() { s.ackedBelow, s.lastSN = ackedBelow, lastSN })
	}
}

// rememberOutcome logs how to take back a change to one outcome.
func (m *Memory) rememberOutcome(client wire.ClientID, reqNo uint64) {
	s := m.sessionToChange(client)
	if s == nil {
		return
	}
	old, had := s.outcomes[reqNo]
	m.remember(func() {
		if had {
			s.outcomes[reqNo] = old
		} else {
			delete(s.outcomes, reqNo)
		}
	})
}

// SetOutcome implements Store.
func (m *Memory) SetOutcome(client wire.ClientID, reqNo uint64, result wire.Result) {
	m.rememberOutcome(client, reqNo)
	m.session(client).outcomes[reqNo] = result
}

// DeleteOutcome implements Store.
func (m *Memory) DeleteOutcome(client wire.ClientID, reqNo uint64) {
	if s := m.sessions[client]; s != nil {
		m.rememberOutcome(client, reqNo)
		delete(s.outcomes, reqNo)
	}
}

// DeleteSession implements Store.
func (m *Memory) DeleteSession(client wire.ClientID) {
	if s := m.sessions[client]; s != nil {
		m.remember(func() { m.sessions[client] = s })
	}
	delete(m.sessions, client)
}

// Sessions implements Store.
func (m *Memory) Sessions() []wire.SessionRecord {
	var out []wire.SessionRecord
	for _, id := range slices.Sorted(maps.Keys(m.sessions)) {
		s := m.sessions[id]
		rec := wire.SessionRecord{Client: id, AckedBelow: s.ackedBelow, LastSN: s.lastSN}
		for _, reqNo := range slices.Sorted(maps.Keys(s.outcomes)) {
			result := s.outcomes[reqNo]
			result.Value = bytes.Clone(result.Value)
			rec.Outcomes = append(rec.Outcomes, wire.Outcome{ReqNo: reqNo, Result: result})
		}
		out = append(out, rec)
	}
	return out
}
