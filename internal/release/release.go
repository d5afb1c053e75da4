// Package release names this build's release and the protocol versions
// it speaks (docs/upgrades.md, docs/adr/0026-an-encoding-that-can-evolve.md).
//
// A release's number follows semantic versioning. Its protocol range is
// what a process puts in every connection's Hello and reports to the
// master: two processes talk when their ranges meet, and a behaviour that
// needs protocol version v is used only once the cluster version (kept by
// the master, raised by catena upgrade finalize) is at least v.
package release

import "fmt"

// Protocol versions this release speaks. ProtocolMax (version.go) is
// the newest: a release that adds a behaviour older processes cannot
// follow raises it and gates the behaviour on the cluster version.
// ProtocolMin is the oldest it still speaks: lowering a release's
// ability to talk to the previous one breaks rolling upgrades from it,
// so ProtocolMin stays at most the previous release's ProtocolMax.
const ProtocolMin uint32 = 1

// Range is a closed range of protocol versions a process speaks.
type Range struct {
	Min, Max uint32
}

// Speaks is this build's range.
var Speaks = Range{Min: ProtocolMin, Max: ProtocolMax}

// Meets reports whether r and o share a version.
func (r Range) Meets(o Range) bool { return r.Min <= o.Max && o.Min <= r.Max }

// Common is the newest version both r and o speak; 0 when they do not
// meet.
func (r Range) Common(o Range) uint32 {
	if !r.Meets(o) {
		return 0
	}
	return min(r.Max, o.Max)
}

// Valid reports whether r is a non-empty range of versions from 1.
func (r Range) Valid() bool { return r.Min >= 1 && r.Min <= r.Max }

// String formats r as "1" or "1-2".
func (r Range) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

// Protocol versions that bring a behaviour older releases cannot follow
// (docs/upgrades.md): it is used only once the cluster version is at
// least its number.
const (
	// ProtocolExpiry brings keys that expire (docs/adr/0028).
	ProtocolExpiry uint32 = 2
	// ProtocolHashes brings hashes (docs/adr/0029).
	ProtocolHashes uint32 = 2
	// ProtocolExport brings exports, a backup's reads (docs/adr/0030).
	ProtocolExport uint32 = 2
	// ProtocolSplit brings keyspaces whose volumes double while they
	// serve (docs/adr/0031): configurations, keyspaces and heartbeats
	// that an older release would misread.
	ProtocolSplit uint32 = 2
	// ProtocolWatch brings watches: OpWatch, answered by any member of a
	// strong chain (docs/adr/0032).
	ProtocolWatch uint32 = 2
	// ProtocolOutcomeGroups brings the storage record of several
	// outcomes of one client (internal/storage/pebble_outcomes.go).
	ProtocolOutcomeGroups uint32 = 2
)
