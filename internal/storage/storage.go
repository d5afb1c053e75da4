// Package storage holds the objects of the volumes a server replicates.
//
// Store is the boundary the replica state machine writes through. Memory is
// the implementation for tests and the simulator; a durable implementation
// (Pebble) satisfies the same contract.
package storage

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/kv"
)

// Store holds one volume's objects.
//
// Contract: calls come from one goroutine at a time (the replica's); Get
// returns what the last Set stored; values passed in and returned are not
// retained or modified by the caller afterwards.
type Store interface {
	Get(key string) kv.Object
	// Set stores object under key; an object with Exists false deletes it.
	Set(key string, object kv.Object)
	// Snapshot returns a point-in-time copy of every existing object,
	// ordered by key.
	Snapshot() []KeyObject
	// Reset removes every object.
	Reset()
}

// KeyObject is one entry of a snapshot.
type KeyObject struct {
	Key    string
	Object kv.Object
}

// Memory is an in-memory Store.
type Memory struct{ objects map[string]kv.Object }

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{objects: map[string]kv.Object{}} }

// Get implements Store.
func (m *Memory) Get(key string) kv.Object { return m.objects[key] }

// Set implements Store.
func (m *Memory) Set(key string, object kv.Object) {
	if !object.Exists {
		delete(m.objects, key)
		return
	}
	m.objects[key] = object
}

// Snapshot implements Store.
func (m *Memory) Snapshot() []KeyObject {
	keys := slices.Sorted(maps.Keys(m.objects))
	out := make([]KeyObject, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeyObject{Key: k, Object: m.objects[k]})
	}
	return out
}

// Reset implements Store.
func (m *Memory) Reset() { clear(m.objects) }
