package chain

import (
	"fmt"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// sentList is CR §3's Sent_i: the updates a replica applied and forwarded
// (or will forward) to its successor that the tail may not have processed
// yet. It may hold SentMax (100 000) updates, and every update, ack and
// CRAQ query touches it, so each operation costs O(1), amortised over the
// updates it adds or drops, never a pass over the whole list:
//
//   - the updates have consecutive SNs first..last and sit in a queue of
//     fixed-size chunks, so appending at the back, trimming at the front
//     and finding the update with a given SN need no search, and a
//     growing list is never copied (a ring that doubled copied every
//     update again at each doubling: 7% of a server's CPU under
//     pipelined writes, issue 36);
//   - newest holds, per key, the SN of the newest update to it on the list,
//     so "is an update to key beyond SN s on Sent" (CRAQ's dirty check) is
//     one lookup.
//
// Memory follows the list: trimmed slots are cleared (their values can be
// collected), a chunk is released once its last update is trimmed (one is
// kept for the next), and newest holds only keys with an update on the
// list.
//
// A list that keeps versions (Traits.KeepsVersions, keepVersions) can say
// what a key held as of any SN from the one before its first on (asOf):
// prev links each update to the previous update to its key on the list,
// and before holds, per key with an update on the list, the object before
// the first of them when the replica knew it (it read it from its store
// as it applied that update; a list refilled from the catch-up log does
// not know it). Both cost O(1) per update.
//
// The same ring, without the per-key index, is a replica's catch-up log
// (newCatchUpLog, catchup.go).
type sentList struct {
	// chunks hold the updates from slot front of the first on, each
	// chunk sentChunk slots; spare are emptied chunks kept for the next
	// (at most sentSpares).
	chunks [][]sentSlot
	spare  [][]sentSlot
	front  int
	count  int
	// first is the SN of the update at front when count > 0.
	first wire.SN
	// newest is nil in a list without the per-key index.
	newest map[string]wire.SN
	// before holds the objects before each key's first update on the
	// list; nil unless the list keeps versions (then each slot's prev
	// counts too).
	before map[string]kv.Object
	// bytes is what the updates on the list weigh (updateBytes).
	bytes int
}

// sentSlot holds an update on the list and, in a list that keeps
// versions, the SN of the previous update to the same key (0: none on
// the list).
type sentSlot struct {
	u    wire.Update
	prev wire.SN
}

// sentChunkBits sizes the chunks: 64 slots of about 260 bytes.
// sentSpares bounds the emptied chunks a list keeps, so that a list
// that shrinks and grows again by up to 512 updates (a member's, between
// acknowledgements of pipelined batches) allocates nothing.
const (
	sentChunkBits = 6
	sentChunk     = 1 << sentChunkBits
	sentSpares    = 8
)

func newSentList() sentList { return sentList{newest: map[string]wire.SN{}} }

// len returns the number of updates on the list.
func (s *sentList) len() int { return s.count }

// firstSN returns the SN of the oldest update, 0 if the list is empty.
func (s *sentList) firstSN() wire.SN {
	if s.count == 0 {
		return 0
	}
	return s.first
}

// lastSN returns the SN of the newest update, 0 if the list is empty.
func (s *sentList) lastSN() wire.SN {
	if s.count == 0 {
		return 0
	}
	return s.first + wire.SN(s.count-1)
}

// holds reports whether the update with SN sn is on the list.
func (s *sentList) holds(sn wire.SN) bool {
	return s.count > 0 && sn >= s.first && sn <= s.lastSN()
}

// at returns the update with SN sn; it stays valid until the next append,
// trim or reset.
// REQUIRES: s.holds(sn).
func (s *sentList) at(sn wire.SN) *wire.Update {
	if !s.holds(sn) {
		panic(fmt.Sprintf("INVARIANT Sent lookup: SN %d not in [%d, %d]", sn, s.firstSN(), s.lastSN()))
	}
	return &s.slot(int(sn - s.first)).u
}

// slot returns the i-th slot from the front.
func (s *sentList) slot(i int) *sentSlot {
	j := s.front + i
	return &s.chunks[j>>sentChunkBits][j&(sentChunk-1)]
}

// keepVersions makes the list keep versions (on) or stop keeping them;
// an update already on the list when it starts has no prior version.
func (s *sentList) keepVersions(on bool) {
	switch {
	case on && s.before == nil:
		s.before = map[string]kv.Object{}
		for i := range s.count {
			s.slot(i).prev = 0 // left from an earlier time it kept them
		}
	case !on:
		s.before = nil
	}
}

// keepsVersions reports whether the list keeps versions.
func (s *sentList) keepsVersions() bool { return s.before != nil }

// append adds a copy of u at the back. prior is the object u's key held
// before u, if the caller knows it and u is the list's only update to
// the key (a list that keeps versions remembers it).
// REQUIRES: the list is empty or u.SN is the SN after its last.
func (s *sentList) append(u *wire.Update, prior *kv.Object) {
	// INVARIANT Sent: its SNs are consecutive, since a replica applies in SN
	// order and appends what it applies.
	if s.count > 0 && u.SN != s.lastSN()+1 {
		panic(fmt.Sprintf("INVARIANT Sent contiguous: appending SN %d after %d", u.SN, s.lastSN()))
	}
	if s.front+s.count == len(s.chunks)*sentChunk {
		var chunk []sentSlot
		if n := len(s.spare); n > 0 {
			chunk, s.spare[n-1] = s.spare[n-1], nil
			s.spare = s.spare[:n-1]
		} else {
			chunk = make([]sentSlot, sentChunk)
		}
		s.chunks = append(s.chunks, chunk)
	}
	if s.count == 0 {
		s.first = u.SN
	}
	slot := s.slot(s.count)
	slot.u = *u
	s.count++
	s.bytes += updateBytes(u)
	if s.before != nil {
		last, pending := s.newest[u.Key]
		slot.prev = last
		switch {
		case pending:
		case prior != nil:
			s.before[u.Key] = *prior
		default:
			delete(s.before, u.Key)
		}
	}
	if s.newest != nil {
		s.newest[u.Key] = u.SN
	}
}

// pending reports whether an update to key is on the list.
func (s *sentList) pending(key string) bool {
	_, ok := s.newest[key]
	return ok
}

// updateBytes is what an update weighs on a list: its key and value and
// updateOverhead.
func updateBytes(u *wire.Update) int { return len(u.Key) + len(u.Value) + updateOverhead }

// updateOverhead approximates the rest of an update held on a list: the
// ring slot (a wire.Update) and the small fields it points to.
const updateOverhead = 256

// trimFront drops the oldest update.
// REQUIRES: the list is not empty.
func (s *sentList) trimFront() {
	slot := &s.chunks[0][s.front]
	u := &slot.u
	last := s.newest != nil && s.newest[u.Key] == u.SN
	if last {
		delete(s.newest, u.Key)
	}
	if s.before != nil {
		switch {
		case last:
			delete(s.before, u.Key)
		case u.Changed:
			// The key's object before its next update on the list.
			s.before[u.Key] = updatedObject(u)
		}
	}
	s.bytes -= updateBytes(u)
	*slot = sentSlot{}
	s.front++
	s.first++
	s.count--
	if s.front == sentChunk {
		// The first chunk is empty (every slot cleared): keep it for
		// the next, or release it.
		if len(s.spare) < sentSpares {
			s.spare = append(s.spare, s.chunks[0])
		}
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.front = 0
	}
}

// trimThrough drops every update with an SN at or below sn.
func (s *sentList) trimThrough(sn wire.SN) {
	for s.count > 0 && s.first <= sn {
		s.trimFront()
	}
}

// copyOut copies len(dst) updates, from the i-th from the front on.
func (s *sentList) copyOut(dst []wire.Update, i int) {
	for k := range dst {
		dst[k] = s.slot(i + k).u
	}
}

// copyFrom returns a copy of at most n updates starting at SN sn.
// REQUIRES: s.holds(sn), n > 0.
func (s *sentList) copyFrom(sn wire.SN, n int) []wire.Update {
	if !s.holds(sn) || n <= 0 {
		panic(fmt.Sprintf("INVARIANT Sent copy: %d updates from SN %d, list holds [%d, %d]", n, sn, s.firstSN(), s.lastSN()))
	}
	i := int(sn - s.first)
	out := make([]wire.Update, min(n, s.count-i))
	s.copyOut(out, i)
	return out
}

// updatesAfter reports whether an update to key with an SN above sn is
// on the list.
func (s *sentList) updatesAfter(key string, sn wire.SN) bool {
	newest, ok := s.newest[key]
	return ok && newest > sn
}

// newestOf returns the SN of the newest update to key on the list.
func (s *sentList) newestOf(key string) (wire.SN, bool) {
	sn, ok := s.newest[key]
	return sn, ok
}

// reset empties the list and releases its memory.
func (s *sentList) reset() {
	s.chunks, s.spare, s.front, s.count, s.first, s.bytes = nil, nil, 0, 0, 0, 0
	clear(s.newest)
	if s.before != nil {
		clear(s.before)
	}
}

// asOf returns the object key held as of SN sn, given its object now
// (current, after every update applied): found is false if the list does
// not know it (an update to key after sn whose prior object it never
// learned).
// REQUIRES: the list keeps versions; sn is at or after the SN before the
// list's first.
func (s *sentList) asOf(key string, sn wire.SN, current kv.Object) (obj kv.Object, found bool) {
	at, pending := s.newest[key]
	for pending && at > sn {
		// INVARIANT: at is on the list, an update to key after sn.
		at = s.slot(int(at - s.first)).prev
		pending = at >= s.first && at != 0
	}
	if !pending {
		if at, ok := s.newest[key]; !ok || at <= sn {
			return current, true // no update to key after sn on the list
		}
		obj, found = s.before[key]
		return obj, found
	}
	for {
		slot := s.slot(int(at - s.first))
		if slot.u.Changed {
			return updatedObject(&slot.u), true
		}
		// A failed compare-and-set changed nothing: the object is the
		// one before it.
		at = slot.prev
		if at < s.first || at == 0 {
			obj, found = s.before[key]
			return obj, found
		}
	}
}

// updatedObject is the object a changing update leaves.
func updatedObject(u *wire.Update) kv.Object {
	return kv.Object{Value: u.Value, Exists: !u.Deleted, Stamp: u.Stamp, Expires: u.Expires, Type: u.Type}
}

// check verifies the list's own bookkeeping; O(1), so it may run after
// every step. Tests check the per-key index against the contents.
func (s *sentList) check() error {
	switch {
	case s.count < 0 || s.front < 0 || s.front >= sentChunk || s.front+s.count > len(s.chunks)*sentChunk:
		return fmt.Errorf("Sent holds %d updates from slot %d of %d chunks", s.count, s.front, len(s.chunks))
	case len(s.chunks) > (s.front+s.count+sentChunk-1)/sentChunk+1:
		return fmt.Errorf("Sent keeps %d chunks for %d updates from slot %d", len(s.chunks), s.count, s.front)
	case len(s.newest) > s.count:
		return fmt.Errorf("Sent indexes %d keys for %d updates", len(s.newest), s.count)
	case s.bytes < 0 || s.count == 0 && s.bytes != 0:
		return fmt.Errorf("Sent weighs %d bytes with %d updates", s.bytes, s.count)
	}
	return nil
}
