package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/wire"
)

// Outcomes in groups (issue 36).
//
// A replica records the outcome of every update it applies and forgets
// it once the client acknowledged the reply: written one record each, an
// update cost two of Pebble's memtable inserts for its outcome alone (the
// record and, later, its deletion), more than the object itself. Once
// the cluster runs at ProtocolOutcomeGroups, a store writes the outcomes
// a client's updates recorded since the last commit as one record, under
// the outcome key of the group's first request number (outcomes v2,
// pebble_encoding.go), and writes each group again only when some of its
// outcomes are forgotten: once per commit, without the forgotten ones,
// or deleted once none is left. Before, it writes the old records (an
// older release must still open the directory); both are read, and a
// store switched to groups takes the old records in as groups of one.
//
// The store keeps, per client it touched, which request numbers each of
// its records holds and their results, loaded from the database the
// first time (a scan of the client's outcome keys).

// OutcomeGroupsVersion is the cluster version from which a Pebble store
// writes its outcomes in groups.
const OutcomeGroupsVersion = release.ProtocolOutcomeGroups

// SetClusterVersion tells the engine the protocol version the cluster
// runs at (it is never lowered): from OutcomeGroupsVersion on, its
// stores write outcomes in groups. Siblings are told each on their own.
// The engine records the version in its pending batch first, so that a
// restarted process writes groups from its first update on, before the
// master has told it the version again: once a store wrote a group, an
// outcome is no longer found by its own key, which the old records'
// blind deletes assume.
func (e *PebbleEngine) SetClusterVersion(v uint32) {
	if v < OutcomeGroupsVersion || v <= e.version {
		return
	}
	e.version = v
	e.grouped = true
	b := binary.AppendUvarint([]byte{formatV1}, uint64(v))
	if err := e.pending("set cluster version").Set([]byte{kindVersion}, b, nil); err != nil {
		panic(fmt.Errorf("storage: pebble set cluster version: %w", err))
	}
}

// readVersion sets the engine's version and grouped from what the
// database records.
func (e *PebbleEngine) readVersion() error {
	value, closer, err := e.db.Get([]byte{kindVersion})
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	d := decoder{what: "cluster version", buf: value}
	d.version()
	v := d.uvarint()
	if err := d.finish(); err != nil {
		return err
	}
	if v > math.MaxUint32 {
		return fmt.Errorf("corrupt cluster version record: version %d", v)
	}
	e.version = uint32(v)
	e.grouped = e.version >= OutcomeGroupsVersion
	return nil
}

// clientOutcomes are a client's outcomes in a store that writes groups.
type clientOutcomes struct {
	client wire.ClientID
	// alive holds every outcome, written or not, with its record.
	alive map[uint64]outcomeEntry
	// records are the written records by their key's request number.
	records map[uint64]*outcomeRecord
	// pending is the group of the outcomes set since the last commit
	// (nil: none); changed lists the written records that lost outcomes
	// since then.
	pending *outcomeRecord
	changed []*outcomeRecord
	// listed says the store lists the client in outcomesDirty.
	listed bool
}

type outcomeEntry struct {
	result wire.Result
	rec    *outcomeRecord
}

// outcomeRecord is one record of outcomes: written under the outcome key
// of key, or pending.
type outcomeRecord struct {
	key    uint64
	reqNos []uint64 // unordered
	// changed: listed in clientOutcomes.changed; replaced: its key was
	// taken by a newer group, which holds its outcomes.
	changed, replaced bool
}

// clientOutcomes returns client's outcomes, loading them on first use.
func (s *pebbleStore) clientOutcomes(client wire.ClientID) *clientOutcomes {
	if c := s.outcomes[client]; c != nil {
		return c
	}
	c := &clientOutcomes{client: client, alive: map[uint64]outcomeEntry{}, records: map[uint64]*outcomeRecord{}}
	prefix := outcomePrefix(s.vol, client)
	var outs []wire.Outcome
	s.e.scan("load outcomes", prefix, prefixEnd(prefix), func(key, value []byte) {
		if len(key) != len(prefix)+8 {
			s.fail("load outcomes", fmt.Errorf("corrupt outcome key %x", key))
		}
		first := binary.BigEndian.Uint64(key[len(prefix):])
		var err error
		if outs, err = decodeOutcomes(outs[:0], first, value); err != nil {
			s.fail("load outcomes", err)
		}
		rec := &outcomeRecord{key: first}
		for _, o := range outs {
			rec.reqNos = append(rec.reqNos, o.ReqNo)
			c.alive[o.ReqNo] = outcomeEntry{result: o.Result, rec: rec}
		}
		c.records[first] = rec
	})
	if s.outcomes == nil {
		s.outcomes = map[wire.ClientID]*clientOutcomes{}
	}
	s.outcomes[client] = c
	return c
}

// listOutcomes lists c for writePending.
func (s *pebbleStore) listOutcomes(c *clientOutcomes) {
	if !c.listed {
		c.listed = true
		s.outcomesDirty = append(s.outcomesDirty, c)
	}
	s.markDirty()
}

// setOutcomeGrouped records an outcome in the client's pending group.
func (s *pebbleStore) setOutcomeGrouped(client wire.ClientID, reqNo uint64, result wire.Result) {
	c := s.clientOutcomes(client)
	if e, ok := c.alive[reqNo]; ok {
		c.drop(reqNo, e)
	}
	if c.pending == nil {
		c.pending = &outcomeRecord{}
	}
	c.pending.reqNos = append(c.pending.reqNos, reqNo)
	c.alive[reqNo] = outcomeEntry{result: result, rec: c.pending}
	s.listOutcomes(c)
}

// deleteOutcomeGrouped forgets an outcome.
func (s *pebbleStore) deleteOutcomeGrouped(client wire.ClientID, reqNo uint64) {
	c := s.clientOutcomes(client)
	if e, ok := c.alive[reqNo]; ok {
		c.drop(reqNo, e)
		s.listOutcomes(c)
	}
}

// drop removes an outcome from its record.
func (c *clientOutcomes) drop(reqNo uint64, e outcomeEntry) {
	delete(c.alive, reqNo)
	rec := e.rec
	i := slices.Index(rec.reqNos, reqNo)
	rec.reqNos[i] = rec.reqNos[len(rec.reqNos)-1]
	rec.reqNos = rec.reqNos[:len(rec.reqNos)-1]
	if rec != c.pending && !rec.changed {
		rec.changed = true
		c.changed = append(c.changed, rec)
	}
}

// writeOutcomes writes the clients' pending groups and rewrites or
// deletes the records that lost outcomes.
func (s *pebbleStore) writeOutcomes() {
	for _, c := range s.outcomesDirty {
		c.listed = false
		if s.outcomes[c.client] != c {
			continue // deleted or reset since
		}
		p := c.pending
		c.pending = nil
		if p != nil && len(p.reqNos) == 0 {
			p = nil
		}
		if p != nil {
			slices.Sort(p.reqNos)
			p.key = p.reqNos[0]
			if old := c.records[p.key]; old != nil {
				// The key is taken (its outcome was forgotten, or set
				// again): the new group holds what is left of the old.
				for _, reqNo := range old.reqNos {
					c.alive[reqNo] = outcomeEntry{result: c.alive[reqNo].result, rec: p}
				}
				p.reqNos = append(p.reqNos, old.reqNos...)
				slices.Sort(p.reqNos)
				old.reqNos, old.replaced = nil, true
			}
			c.records[p.key] = p
		}
		for _, rec := range c.changed {
			rec.changed = false
			switch {
			case rec.replaced:
			case len(rec.reqNos) == 0:
				delete(c.records, rec.key)
				s.delete("delete outcome", outcomeKey(s.vol, c.client, rec.key))
			default:
				slices.Sort(rec.reqNos)
				s.writeOutcomeRecord(c, rec)
			}
		}
		clear(c.changed)
		c.changed = c.changed[:0]
		if p != nil {
			s.writeOutcomeRecord(c, p)
		}
	}
	clear(s.outcomesDirty)
	s.outcomesDirty = s.outcomesDirty[:0]
}

// writeOutcomeRecord writes rec (its request numbers sorted).
func (s *pebbleStore) writeOutcomeRecord(c *clientOutcomes, rec *outcomeRecord) {
	s.outcomeBuf = appendOutcomes(s.outcomeBuf[:0], rec.key, rec.reqNos, func(reqNo uint64) wire.Result { return c.alive[reqNo].result })
	s.outcomeKeyBuf = binary.BigEndian.AppendUint64(append(s.outcomeKeyBuf[:0], outcomePrefix(s.vol, c.client)...), rec.key)
	s.set("set outcomes", s.outcomeKeyBuf, s.outcomeBuf) // Pebble copies both
}

var _ VersionedEngine = (*PebbleEngine)(nil)
