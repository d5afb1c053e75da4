package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Watches (docs/adr/0032-watch-and-leases.md): OpWatch asks any member
// of a volume's chain for the committed updates after a revision (the
// volume's SN) to the keys with a prefix, or to one key. The member
// answers from the updates it keeps in memory (its catch-up log), never
// past what it knows the chain committed, and holds the request for up
// to Op.TTL when it has nothing to send.

// WatchEventKind says what an update did to its key.
type WatchEventKind uint8

// Watch event kinds.
const (
	// WatchPut: the key was written (its value, deadline or type may all
	// have changed; a changed deadline alone is a put too).
	WatchPut WatchEventKind = iota + 1
	// WatchDelete: a client deleted the key.
	WatchDelete
	// WatchExpire: the key's deadline passed and the chain's head
	// reclaimed it with a replicated delete (docs/adr/0028).
	WatchExpire
)

func (k WatchEventKind) String() string {
	switch k {
	case WatchPut:
		return "put"
	case WatchDelete:
		return "delete"
	case WatchExpire:
		return "expire"
	}
	return fmt.Sprintf("watch-event(%d)", uint8(k))
}

// WatchEvent is one committed update of a watched key.
type WatchEvent struct {
	// SN is the update's revision: its volume's SN.
	SN   SN
	Kind WatchEventKind
	Key  string
	// Value, Expires and Type are the key's after a put.
	Value   []byte
	Expires Time
	Type    ObjectType
}

// WatchPage is a member's answer to an OpWatch (ClientReply.Result.Value,
// EncodeWatchPage).
type WatchPage struct {
	// Events are the matching committed updates after the revision asked
	// for, in SN order.
	Events []WatchEvent
	// Through is the revision the page reaches: every committed update
	// up to it that matches is in this page or was before the revision
	// asked for. The next watch asks from it.
	Through SN
	// Compacted says the member no longer holds the updates after the
	// revision asked for (they left its window, or it restarted or took
	// a snapshot since); Oldest is the revision it can watch from. The
	// caller asks another member, or reads the keys again and watches
	// from Oldest.
	Compacted bool
	Oldest    SN
	// Split is where the volume's history passed its latest split, once
	// Through has reached it (Split.SN ≤ Through; zero otherwise), and
	// SplitModulus the keyspace's volume count after it: the updates of
	// the moved keys from Split.SN on are volume Split.Into's, which a
	// watch of them follows from Split.SN−1 (its seed's state).
	Split        SplitPoint
	SplitModulus uint32
}

// Watch limits.
const (
	// WatchPageEvents and WatchPageBytes bound one page.
	WatchPageEvents = 1000
	WatchPageBytes  = 256 << 10
	// WatchHoldMax bounds how long a member holds a watch with nothing
	// to send (Op.TTL).
	WatchHoldMax = 2 * Second
	// WatchFromNow, as an OpWatch's revision (Op.Delta), asks for no
	// past updates: the page answers at once with the member's
	// committed revision to watch from.
	WatchFromNow = -1
)

// LeaseKeyPrefix starts the keys of leases' records (client.Grant,
// docs/adr/0032): the one part of the reserved namespace clients may
// read and write, and scan from (they never appear in other scans).
const LeaseKeyPrefix = ReservedKeyPrefix + "lease/"

// WatchExactKey, in an OpWatch's Op.Value, watches the key Op.Key alone
// rather than the keys it prefixes.
const WatchExactKey byte = 1

// WatchMatches reports whether key is one an OpWatch op watches.
// Keys with the reserved prefix (leases' records) match only a watch
// whose own prefix is reserved.
func WatchMatches(op Op, key string) bool {
	if len(op.Value) > 0 && op.Value[0]&WatchExactKey != 0 {
		return key == op.Key
	}
	if strings.HasPrefix(key, ReservedKeyPrefix) && !strings.HasPrefix(op.Key, ReservedKeyPrefix) {
		return false
	}
	return strings.HasPrefix(key, op.Key)
}

// ErrBadWatchPage is wrapped by every error DecodeWatchPage returns.
var ErrBadWatchPage = errors.New("malformed watch page")

// EncodeWatchPage encodes p: the event count, each event (SN, kind, key,
// value, deadline, type), Through, a flags byte (1: Compacted), Oldest,
// then the split (Into, SN, Epoch, SplitModulus); integers as uvarints,
// strings with their length first.
func EncodeWatchPage(p WatchPage) []byte {
	n := 8 * binary.MaxVarintLen64
	for _, e := range p.Events {
		n += len(e.Key) + len(e.Value) + 4*binary.MaxVarintLen64 + 2
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(p.Events)))
	for _, e := range p.Events {
		b = binary.AppendUvarint(b, uint64(e.SN))
		b = append(b, byte(e.Kind))
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
		b = binary.AppendUvarint(b, uint64(len(e.Value)))
		b = append(b, e.Value...)
		b = binary.AppendVarint(b, int64(e.Expires))
		b = append(b, byte(e.Type))
	}
	b = binary.AppendUvarint(b, uint64(p.Through))
	flags := byte(0)
	if p.Compacted {
		flags = 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(p.Oldest))
	b = binary.AppendUvarint(b, uint64(p.Split.Into))
	b = binary.AppendUvarint(b, uint64(p.Split.SN))
	b = binary.AppendUvarint(b, uint64(p.Split.Epoch))
	b = binary.AppendUvarint(b, uint64(p.SplitModulus))
	return b
}

// DecodeWatchPage decodes what EncodeWatchPage encoded, refusing anything
// else: truncated or trailing bytes, more than WatchPageEvents events,
// an unknown event kind or type.
func DecodeWatchPage(b []byte) (WatchPage, error) {
	var p WatchPage
	fail := func(what string) (WatchPage, error) {
		return WatchPage{}, fmt.Errorf("%w: bad %s", ErrBadWatchPage, what)
	}
	uvarint := func(limit uint64) (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 || v > limit {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	bytesOf := func() ([]byte, bool) {
		n, ok := uvarint(uint64(len(b)))
		if !ok || n > uint64(len(b)) {
			return nil, false
		}
		s := b[:n:n]
		b = b[n:]
		return s, true
	}
	count, ok := uvarint(WatchPageEvents)
	if !ok {
		return fail("event count")
	}
	if count > 0 {
		p.Events = make([]WatchEvent, count)
	}
	for i := range p.Events {
		e := &p.Events[i]
		sn, ok := uvarint(math.MaxUint64)
		if !ok || len(b) < 1 {
			return fail("event")
		}
		e.SN, e.Kind, b = SN(sn), WatchEventKind(b[0]), b[1:]
		if e.Kind < WatchPut || e.Kind > WatchExpire {
			return fail("event kind")
		}
		key, ok := bytesOf()
		if !ok {
			return fail("event key")
		}
		value, ok := bytesOf()
		if !ok {
			return fail("event value")
		}
		e.Key = string(key)
		if len(value) > 0 {
			e.Value = append([]byte(nil), value...)
		}
		expires, k := binary.Varint(b)
		if k <= 0 || len(b) < k+1 {
			return fail("event deadline")
		}
		e.Expires, e.Type, b = Time(expires), ObjectType(b[k]), b[k+1:]
		if e.Type > TypeHash {
			return fail("event type")
		}
	}
	through, ok := uvarint(math.MaxUint64)
	if !ok || len(b) < 1 || b[0] > 1 {
		return fail("end")
	}
	p.Through, p.Compacted, b = SN(through), b[0] == 1, b[1:]
	var split [5]uint64
	limits := [5]uint64{math.MaxUint64, math.MaxUint32, math.MaxUint64, math.MaxUint64, math.MaxUint32}
	for i := range split {
		if split[i], ok = uvarint(limits[i]); !ok {
			return fail("split")
		}
	}
	if len(b) != 0 {
		return fail("end: trailing bytes")
	}
	p.Oldest = SN(split[0])
	p.Split = SplitPoint{Into: VolumeID(split[1]), SN: SN(split[2]), Epoch: Epoch(split[3])}
	p.SplitModulus = uint32(split[4])
	return p, nil
}
