package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/catena-kv/catena/internal/wire"
)

// Encodings of the values the Pebble engine stores (the key layout is in
// pebble_keys.go).
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
//	ship log v2: 2, flags, SN, key, value, client, reqNo, ackedBelow,
//	            replyTo, result (its v1 record, length-prefixed), origin,
//	            n, ts, len(deps), (key, origin, n)..., epoch
//	            flags bit 0: Changed; bit 1: Deleted; bit 2: Value is
//	            non-nil
//	ship log v1 (read only): 1, then the wire encoding of a Forward
//	            holding the update; written before v2, and readable only
//	            while the wire codec decodes that Forward as it did
//	session v1: 1, ackedBelow, lastSN
//	Result v1:  1, status (1 byte), flags, SN, value [, origin, n, ts]
//	            [, expires]
//	            flags bit 0: Found; bit 1: Value is non-nil; bit 2: a
//	            Stamp follows; bit 3: an expires follows (release 0.2.0)
//	deadline v1: 1, expires (an object's deadline, release 0.2.0)
//	outcomes v2: 2, count, (reqNo - previous reqNo, result v1
//	            length-prefixed)...: several outcomes of one client
//	            under the outcome key of the first request number
//	            (its key's, from which the first difference counts),
//	            request numbers ascending; written once the cluster
//	            version is ProtocolOutcomeGroups (release 0.2.0). An
//	            outcome key holding a Result v1 is that one request's.

// formatV1 is the version byte of every encoded record this code writes,
// but the ship log's.
const formatV1 byte = 1

// shipLogV2 is the version byte of the ship log's records: their own
// encoding, so that a change of the wire codec leaves the stored log
// readable (issue 33).
const shipLogV2 byte = 2

// outcomesV2 is the version byte of a record of several outcomes of a
// client (pebble_outcomes.go); a Result v1 under an outcome key is one.
const outcomesV2 byte = 2

const (
	shipChanged     = 1 << 0
	shipDeleted     = 1 << 1
	shipValueNonNil = 1 << 2
	shipKnownFlags  = shipChanged | shipDeleted | shipValueNonNil
)

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
	// metaSplit: the configuration's Split, Meta.Split and Meta.Seeded
	// follow the mode (a volume of a keyspace that was split).
	metaSplit = 1 << 7

	resultFound       = 1 << 0
	resultValueNonNil = 1 << 1
	// resultStamp: the result's Stamp follows the value.
	resultStamp = 1 << 2
	// resultExpires: the result's deadline (a signed varint) follows
	// the stamp (release 0.2.0; 0.1.0 refuses the flag as corrupt, so
	// it is written only once the cluster runs at protocol 2).
	resultExpires = 1 << 3
)

// encodeDeadline encodes an object's deadline (kindDeadline's value).
func encodeDeadline(t wire.Time) []byte {
	return binary.AppendVarint([]byte{formatV1}, int64(t))
}

func decodeDeadline(b []byte) (wire.Time, error) {
	d := decoder{what: "deadline", buf: b}
	d.version()
	t := wire.Time(d.varint())
	if t <= 0 {
		d.failf("deadline %d", t)
	}
	if err := d.finish(); err != nil {
		return 0, err
	}
	return t, nil
}

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
	if !m.Config.Split.IsZero() || !m.Split.IsZero() || m.Seeded {
		flags |= metaSplit
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
	if flags&metaSplit != 0 {
		s, p := m.Config.Split, m.Split
		b = binary.AppendUvarint(b, uint64(s.Into))
		b = binary.AppendUvarint(b, uint64(s.Epoch))
		b = binary.AppendUvarint(b, uint64(s.Modulus))
		b = binary.AppendUvarint(b, uint64(s.Keep))
		b = binary.AppendUvarint(b, uint64(p.Into))
		b = binary.AppendUvarint(b, uint64(p.SN))
		b = binary.AppendUvarint(b, uint64(p.Epoch))
		seeded := byte(0)
		if m.Seeded {
			seeded = 1
		}
		b = append(b, seeded)
	}
	return b
}

func decodeMeta(b []byte) (Meta, error) {
	d := decoder{what: "meta", buf: b}
	d.version()
	flags := d.byte()
	if flags&^(metaChainNonNil|metaSnapshotInstalled|metaVector|metaCatchUp|metaAppliedEpoch|metaSites|metaMode|metaSplit) != 0 {
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
	if flags&metaSplit != 0 {
		m.Config.Split = wire.Split{Into: d.volume(), Epoch: wire.Epoch(d.uvarint()), Modulus: uint32(d.volume()), Keep: uint32(d.volume())}
		m.Split = wire.SplitPoint{Into: d.volume(), SN: wire.SN(d.uvarint()), Epoch: wire.Epoch(d.uvarint())}
		switch seeded := d.byte(); seeded {
		case 0, 1:
			m.Seeded = seeded == 1
		default:
			d.failf("seeded %d", seeded)
		}
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

func encodeStamp(st wire.Stamp) []byte {
	b := []byte{formatV1}
	b = binary.AppendUvarint(b, uint64(st.Origin))
	b = binary.AppendUvarint(b, st.N)
	return binary.AppendUvarint(b, st.TS)
}

func decodeStamp(b []byte) (wire.Stamp, error) {
	d := decoder{what: "stamp", buf: b}
	d.version()
	origin := d.uvarint()
	if origin > math.MaxUint32 {
		d.failf("site %d out of range", origin)
	}
	st := wire.Stamp{Origin: wire.SiteID(origin), N: d.uvarint(), TS: d.uvarint()}
	if err := d.finish(); err != nil {
		return wire.Stamp{}, err
	}
	return st, nil
}

// encodeShipLogRecord encodes u for the shipping log (v2).
func encodeShipLogRecord(u wire.Update) ([]byte, error) {
	var flags byte
	if u.Changed {
		flags |= shipChanged
	}
	if u.Deleted {
		flags |= shipDeleted
	}
	if u.Value != nil {
		flags |= shipValueNonNil
	}
	b := make([]byte, 0, 16+len(u.Key)+len(u.Value)+8*binary.MaxVarintLen64)
	b = append(b, shipLogV2, flags)
	b = binary.AppendUvarint(b, uint64(u.SN))
	b = appendString(b, u.Key)
	b = appendString(b, string(u.Value))
	b = binary.AppendUvarint(b, uint64(u.Client))
	b = binary.AppendUvarint(b, u.ReqNo)
	b = binary.AppendUvarint(b, u.AckedBelow)
	b = appendString(b, string(u.ReplyTo))
	b = appendString(b, string(encodeResult(u.Result)))
	b = binary.AppendUvarint(b, uint64(u.Stamp.Origin))
	b = binary.AppendUvarint(b, u.Stamp.N)
	b = binary.AppendUvarint(b, u.Stamp.TS)
	b = binary.AppendUvarint(b, uint64(len(u.Deps)))
	for _, dep := range u.Deps {
		b = appendString(b, dep.Key)
		b = binary.AppendUvarint(b, uint64(dep.Origin))
		b = binary.AppendUvarint(b, dep.N)
	}
	return binary.AppendUvarint(b, uint64(u.Epoch)), nil
}

// decodeShipLogRecord decodes the shipping log's record of origin's
// update n: it must hold that update.
func decodeShipLogRecord(b []byte, origin wire.SiteID, n uint64) (wire.Update, error) {
	var u wire.Update
	var err error
	switch {
	case len(b) > 0 && b[0] == shipLogV2:
		u, err = decodeShipLogV2(b)
	case len(b) > 0 && b[0] == formatV1:
		// A wire-encoded Forward, as builds before the base release
		// (0.1.0) wrote; the wire's framing (docs/adr/0026) changed it.
		return wire.Update{}, fmt.Errorf("ship log record %d: written by a build before release 0.1.0, which cannot be upgraded from", n)
	default:
		return wire.Update{}, fmt.Errorf("corrupt ship log record %d: unknown format", n)
	}
	if err == nil && (u.Stamp.N != n || u.Stamp.Origin != origin) {
		err = fmt.Errorf("holds update %d of site %d", u.Stamp.N, u.Stamp.Origin)
	}
	if err != nil {
		return wire.Update{}, fmt.Errorf("corrupt ship log record %d: %w", n, err)
	}
	return u, nil
}

// decodeShipLogV2 decodes a ship log record of v2.
func decodeShipLogV2(b []byte) (wire.Update, error) {
	d := decoder{what: "ship log", buf: b[1:]}
	var u wire.Update
	flags := d.byte()
	if flags&^shipKnownFlags != 0 {
		d.failf("unknown flags %#x", flags)
	}
	u.Changed, u.Deleted = flags&shipChanged != 0, flags&shipDeleted != 0
	u.SN = wire.SN(d.uvarint())
	u.Key = d.bytes()
	value := d.bytes()
	if flags&shipValueNonNil != 0 {
		u.Value = []byte(value)
	} else if len(value) != 0 {
		d.failf("nil value of %d bytes", len(value))
	}
	u.Client = wire.ClientID(d.uvarint())
	u.ReqNo = d.uvarint()
	u.AckedBelow = d.uvarint()
	u.ReplyTo = wire.NodeID(d.bytes())
	result := d.bytes()
	if d.err == nil {
		var err error
		if u.Result, err = decodeResult([]byte(result)); err != nil {
			d.failf("result: %v", err)
		}
	}
	u.Stamp = wire.Stamp{Origin: d.site(), N: d.uvarint(), TS: d.uvarint()}
	deps := d.count("dependencies")
	for range deps {
		u.Deps = append(u.Deps, wire.Dep{Key: d.bytes(), Origin: d.site(), N: d.uvarint()})
	}
	u.Epoch = wire.Epoch(d.uvarint())
	if err := d.finish(); err != nil {
		return wire.Update{}, err
	}
	return u, nil
}

func encodeResult(r wire.Result) []byte {
	return appendResult(make([]byte, 0, 3+2*binary.MaxVarintLen64+len(r.Value)), r)
}

// appendResult appends r's Result v1 record to b.
func appendResult(b []byte, r wire.Result) []byte {
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
	if r.Expires != 0 {
		flags |= resultExpires
	}
	b = append(b, formatV1, byte(r.Status), flags)
	b = binary.AppendUvarint(b, uint64(r.SN))
	b = appendString(b, string(r.Value))
	if !r.Stamp.IsZero() {
		b = binary.AppendUvarint(b, uint64(r.Stamp.Origin))
		b = binary.AppendUvarint(b, r.Stamp.N)
		b = binary.AppendUvarint(b, r.Stamp.TS)
	}
	if r.Expires != 0 {
		b = binary.AppendVarint(b, int64(r.Expires))
	}
	return b
}

func decodeResult(b []byte) (wire.Result, error) {
	d := decoder{what: "outcome", buf: b}
	d.version()
	var r wire.Result
	r.Status = wire.Status(d.byte())
	flags := d.byte()
	if flags&^(resultFound|resultValueNonNil|resultStamp|resultExpires) != 0 {
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
	if flags&resultExpires != 0 {
		r.Expires = wire.Time(d.varint())
	}
	if err := d.finish(); err != nil {
		return wire.Result{}, err
	}
	return r, nil
}

// appendOutcomes appends the outcomes record of a client's outcomes
// under the key of request number key: reqNos ascending, none below
// key, result(reqNo) each one's result.
func appendOutcomes(b []byte, key uint64, reqNos []uint64, result func(uint64) wire.Result) []byte {
	b = append(b, outcomesV2)
	b = binary.AppendUvarint(b, uint64(len(reqNos)))
	prev := key
	for _, reqNo := range reqNos {
		b = binary.AppendUvarint(b, reqNo-prev)
		prev = reqNo
		// The result's length prefix: one byte for a result of
		// up to 127 bytes (nearly all), else moved into place.
		at := len(b)
		b = append(b, 0)
		b = appendResult(b, result(reqNo))
		if n := len(b) - at - 1; n < 0x80 {
			b[at] = byte(n)
		} else {
			var prefix [binary.MaxVarintLen64]byte
			m := binary.PutUvarint(prefix[:], uint64(n))
			b = append(b, prefix[1:m]...)
			copy(b[at+m:], b[at+1:at+1+n])
			copy(b[at:], prefix[:m])
		}
	}
	return b
}

// decodeOutcomes decodes the record under the outcome key of request
// number key: a Result v1 (that request's outcome) or an outcomes v2
// record, whose outcomes it appends to out.
func decodeOutcomes(out []wire.Outcome, key uint64, b []byte) ([]wire.Outcome, error) {
	if len(b) == 0 || b[0] != outcomesV2 {
		r, err := decodeResult(b)
		if err != nil {
			return out, err
		}
		return append(out, wire.Outcome{ReqNo: key, Result: r}), nil
	}
	d := decoder{what: "outcomes", buf: b[1:]}
	n := d.count("outcomes")
	if n == 0 && d.err == nil {
		d.failf("no outcomes")
	}
	reqNo := key
	for i := uint64(0); i < n && d.err == nil; i++ {
		delta := d.uvarint()
		if i > 0 && delta == 0 || reqNo+delta < reqNo {
			d.failf("request numbers not ascending")
			break
		}
		reqNo += delta
		r, err := decodeResult([]byte(d.bytes()))
		if err != nil && d.err == nil {
			d.err = err
		}
		out = append(out, wire.Outcome{ReqNo: reqNo, Result: r})
	}
	if err := d.finish(); err != nil {
		return out, err
	}
	return out, nil
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

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

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

// bytes reads a length-prefixed byte string and returns a copy.
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

func (d *decoder) volume() wire.VolumeID {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.failf("volume %d out of range", v)
	}
	return wire.VolumeID(v)
}
