package clientcore

import "github.com/catena-kv/catena/internal/wire"

// KeyVersion is what a client knows of one key's newest version that it
// read or wrote and that is not yet stable (not yet known to be at the
// tail): ChainReaction's per-key client metadata (§III-B: a version and
// a chainIndex per key). By Update Propagation (CR §3) the members at
// positions 0..Position of the configuration of Epoch hold Version, so a
// read of the key may go to any of them without going back in time.
type KeyVersion struct {
	Volume wire.VolumeID
	// Epoch is the configuration Position refers to; after a
	// reconfiguration the positions mean other servers.
	Epoch wire.Epoch
	// Version is the key's version: the SN of the update that wrote it,
	// or for a read the answering replica's applied SN (at least the
	// key's version).
	Version wire.SN
	// Position is the chain index of the member known to hold Version.
	Position int
}

// keyMetadata holds the KeyVersion of every key whose newest version the
// client saw is not yet stable. A stable version drops the key's entry:
// every replica may then serve it, so the client need remember nothing.
//
// INVARIANT: every entry is unstable. In strong and CRAQ modes every
// answer is of a version the tail processed (updates are answered by the
// tail, reads by the tail or by a member for a clean key), so the map
// stays empty; causal+ writes, answered after k < t replicas, fill it.
type keyMetadata struct {
	entries map[string]KeyVersion
	// peak is the most entries held at once since the map was made or
	// resetPeak last ran (at least len(entries)).
	peak int
}

func newKeyMetadata() keyMetadata { return keyMetadata{entries: map[string]KeyVersion{}} }

// observe records what an answer taught about key. A version older than
// the entry's teaches nothing; a newer one, or the same one further down
// the chain, replaces it; a stable one at or above it removes it.
func (m *keyMetadata) observe(key string, v KeyVersion, stable bool) {
	cur, ok := m.entries[key]
	if stable {
		if ok && v.Version >= cur.Version {
			delete(m.entries, key)
		}
		return
	}
	// SNs grow across a volume's epochs, so versions compare across them.
	switch {
	case !ok, v.Version > cur.Version,
		v.Version == cur.Version && v.Epoch > cur.Epoch,
		v.Version == cur.Version && v.Epoch == cur.Epoch && v.Position > cur.Position:
		m.entries[key] = v
		m.peak = max(m.peak, len(m.entries))
	}
}

// lookup returns the key's unstable version, if the client has one.
func (m *keyMetadata) lookup(key string) (KeyVersion, bool) {
	v, ok := m.entries[key]
	return v, ok
}

// forget drops the key's entry.
func (m *keyMetadata) forget(key string) { delete(m.entries, key) }

// len is the number of keys with an unstable version.
func (m *keyMetadata) len() int { return len(m.entries) }

// resetPeak starts a new peak from the current size.
func (m *keyMetadata) resetPeak() { m.peak = len(m.entries) }
