package wire

// The encodings of the fields messages share (codec.go describes the
// format): the append functions, then the decoder that reads them back.

import (
	"encoding/binary"
	"fmt"
	"math"
)

func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// openStruct begins a framed struct (docs/adr/0026): it reserves one
// byte for the struct's length and returns where that byte is, for
// closeStruct.
func openStruct(b []byte) ([]byte, int) { return append(b, 0), len(b) }

// closeStruct writes the length of the struct whose length byte is at
// at: in the reserved byte when the struct is under 128 bytes, else as a
// longer uvarint, moving the struct's bytes up to make room.
func closeStruct(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var length [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(length[:], uint64(n))
	b = append(b, length[:k-1]...)
	copy(b[at+k:], b[at+1:at+1+n])
	copy(b[at:], length[:k])
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendNodeIDs(b []byte, ids []NodeID) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendString(b, string(id))
	}
	return b
}

func appendString(b []byte, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendKeyValues(b []byte, kvs []KeyValue) []byte {
	b = binary.AppendUvarint(b, uint64(len(kvs)))
	for i := range kvs {
		kv := &kvs[i]
		var at int
		b, at = openStruct(b)
		b = appendString(b, kv.Key)
		b = appendBytes(b, kv.Value)
		b = appendBool(b, kv.Deleted)
		b = appendStamp(b, &kv.Stamp)
		if kv.Expires != 0 || kv.Type != 0 { // appended after 0.1.0, left out when zero
			b = binary.AppendVarint(b, int64(kv.Expires))
			if kv.Type != 0 {
				b = append(b, byte(kv.Type))
			}
		}
		b = closeStruct(b, at)
	}
	return b
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func appendGrant(b []byte, g *Grant) []byte {
	b, at := openStruct(b)
	b = appendString(b, g.Keyspace)
	b = appendString(b, g.Prefix)
	b = append(b, byte(g.Access))
	return closeStruct(b, at)
}

func appendAuthChange(b []byte, c *AuthChange) []byte {
	b, at := openStruct(b)
	b = append(b, byte(c.Op))
	b = appendString(b, c.User)
	b = appendString(b, c.Role)
	b = appendString(b, c.PasswordHash)
	b = appendStrings(b, c.Roles)
	b = appendGrant(b, &c.Grant)
	return closeStruct(b, at)
}

func appendAuthTable(b []byte, t *AuthTable) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, t.Version)
	b = binary.AppendUvarint(b, uint64(len(t.Users)))
	for i := range t.Users {
		u := &t.Users[i]
		var at int
		b, at = openStruct(b)
		b = appendString(b, u.Name)
		b = appendString(b, u.PasswordHash)
		b = appendStrings(b, u.Roles)
		b = closeStruct(b, at)
	}
	b = binary.AppendUvarint(b, uint64(len(t.Roles)))
	for i := range t.Roles {
		r := &t.Roles[i]
		var at int
		b, at = openStruct(b)
		b = appendString(b, r.Name)
		b = binary.AppendUvarint(b, uint64(len(r.Grants)))
		for j := range r.Grants {
			b = appendGrant(b, &r.Grants[j])
		}
		b = closeStruct(b, at)
	}
	return closeStruct(b, at)
}

func appendStamp(b []byte, s *Stamp) []byte {
	b, at := openStruct(b)
	b = appendU32(b, uint32(s.Origin))
	b = binary.AppendUvarint(b, s.N)
	b = binary.AppendUvarint(b, s.TS)
	return closeStruct(b, at)
}

func appendTransferID(b []byte, t TransferID) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, t.Incarnation)
	b = binary.AppendUvarint(b, t.Attempt)
	return closeStruct(b, at)
}

func appendBallot(b []byte, x Ballot) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, x.N)
	b = appendU32(b, uint32(x.Site))
	return closeStruct(b, at)
}

func appendView(b []byte, v *View) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, v.N)
	b = appendSiteIDs(b, v.Members)
	return closeStruct(b, at)
}

func appendDeps(b []byte, deps []Dep) []byte {
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for i := range deps {
		var at int
		b, at = openStruct(b)
		b = appendString(b, deps[i].Key)
		b = appendU32(b, uint32(deps[i].Origin))
		b = binary.AppendUvarint(b, deps[i].N)
		b = closeStruct(b, at)
	}
	return b
}

func appendVector(b []byte, v Vector) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	for _, e := range v {
		var at int
		b, at = openStruct(b)
		b = appendU32(b, uint32(e.Site))
		b = binary.AppendUvarint(b, e.N)
		b = closeStruct(b, at)
	}
	return b
}

func appendSites(b []byte, sites []Site) []byte {
	b = binary.AppendUvarint(b, uint64(len(sites)))
	for i := range sites {
		st := &sites[i]
		var at int
		b, at = openStruct(b)
		b = appendU32(b, uint32(st.ID))
		b = appendString(b, st.Name)
		b = appendNodeIDs(b, st.Masters)
		b = closeStruct(b, at)
	}
	return b
}

func appendSiteIDs(b []byte, ids []SiteID) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendU32(b, uint32(id))
	}
	return b
}

func appendUpdates(b []byte, us []Update) []byte {
	b = binary.AppendUvarint(b, uint64(len(us)))
	for i := range us {
		b = appendUpdate(b, &us[i])
	}
	return b
}

func appendConfig(b []byte, c *Config) []byte {
	b, at := openStruct(b)
	b = appendU32(b, uint32(c.Volume))
	b = binary.AppendUvarint(b, uint64(c.Epoch))
	b = binary.AppendUvarint(b, uint64(len(c.Chain)))
	for _, id := range c.Chain {
		b = appendString(b, string(id))
	}
	b = appendString(b, string(c.Joining))
	b = append(b, configFlags(c))
	b = binary.AppendVarint(b, int64(c.K))
	b = appendSiteIDs(b, c.Sites)
	if !c.Split.IsZero() { // appended after 0.1.0, left out when never split
		b = appendSplit(b, &c.Split)
	}
	return closeStruct(b, at)
}

func appendSplit(b []byte, s *Split) []byte {
	b = appendU32(b, uint32(s.Into))
	b = binary.AppendUvarint(b, uint64(s.Epoch))
	b = appendU32(b, s.Modulus)
	return appendU32(b, s.Keep)
}

// A Config's flags byte; Fresh alone encodes as the bool it once was.
// Bits 2 and 3 hold the Mode, so a strong volume's configuration encodes
// as it did before configurations named their mode.
const (
	configFresh byte = 1 << iota
	configMoved
	configModeShift      = 2
	configModeMask       = 3 << configModeShift
	configFromSplit byte = 1 << 4
)

func configFlags(c *Config) byte {
	f := byte(c.Mode) << configModeShift
	if c.Fresh {
		f |= configFresh
	}
	if c.Moved {
		f |= configMoved
	}
	if c.FromSplit {
		f |= configFromSplit
	}
	return f
}

func appendKeyspace(b []byte, k *Keyspace) []byte {
	b, at := openStruct(b)
	b = appendString(b, k.Name)
	b = appendString(b, k.Prefix)
	b = append(b, byte(k.Mode))
	b = binary.AppendVarint(b, int64(k.K))
	b = binary.AppendVarint(b, int64(k.ReplicationFactor))
	b = appendU32(b, uint32(k.FirstVolume))
	b = binary.AppendVarint(b, int64(k.Volumes))
	b = appendSiteIDs(b, k.Sites)
	b = binary.AppendVarint(b, int64(k.PartitionDepth))
	b = appendBool(b, k.Relaxed)
	b = binary.AppendVarint(b, int64(k.Idle))
	b = binary.AppendUvarint(b, k.Grace.Generation)
	b = appendSiteIDs(b, k.Grace.Sites)
	b = binary.AppendUvarint(b, k.Reassign.Generation)
	b = appendSiteIDs(b, k.Reassign.Sites)
	if k.Splits != 0 { // appended after 0.1.0, left out when never split
		b = binary.AppendVarint(b, int64(k.Splits))
		b = binary.AppendUvarint(b, uint64(len(k.VolumeIDs)))
		for _, v := range k.VolumeIDs {
			b = appendU32(b, uint32(v))
		}
	}
	return closeStruct(b, at)
}

func appendKeyspaces(b []byte, ks []Keyspace) []byte {
	b = binary.AppendUvarint(b, uint64(len(ks)))
	for i := range ks {
		b = appendKeyspace(b, &ks[i])
	}
	return b
}

func appendConfigs(b []byte, cs []Config) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for i := range cs {
		b = appendConfig(b, &cs[i])
	}
	return b
}

func appendOp(b []byte, o *Op) []byte {
	b, at := openStruct(b)
	b = append(b, byte(o.Kind))
	b = appendString(b, o.Key)
	b = appendBytes(b, o.Value)
	b = appendBytes(b, o.Expected)
	b = appendBool(b, o.ExpectAbsent)
	b = binary.AppendVarint(b, o.Delta)
	if o.Expires != 0 || o.TTL != 0 || o.Expiry != 0 { // appended after 0.1.0, left out when zero
		b = binary.AppendVarint(b, int64(o.Expires))
		b = binary.AppendVarint(b, int64(o.TTL))
		b = append(b, byte(o.Expiry))
	}
	return closeStruct(b, at)
}

func appendResult(b []byte, r *Result) []byte {
	b, at := openStruct(b)
	b = append(b, byte(r.Status))
	b = appendBool(b, r.Found)
	b = appendBytes(b, r.Value)
	b = binary.AppendUvarint(b, uint64(r.SN))
	b = appendStamp(b, &r.Stamp)
	if r.Expires != 0 || r.Type != 0 { // appended after 0.1.0, left out when zero
		b = binary.AppendVarint(b, int64(r.Expires))
		if r.Type != 0 {
			b = append(b, byte(r.Type))
		}
	}
	return closeStruct(b, at)
}

func appendUpdate(b []byte, u *Update) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, uint64(u.SN))
	b = appendString(b, u.Key)
	b = appendBool(b, u.Changed)
	b = appendBool(b, u.Deleted)
	b = appendBytes(b, u.Value)
	b = binary.AppendUvarint(b, uint64(u.Client))
	b = binary.AppendUvarint(b, u.ReqNo)
	b = binary.AppendUvarint(b, u.AckedBelow)
	b = appendString(b, string(u.ReplyTo))
	b = appendResult(b, &u.Result)
	b = appendStamp(b, &u.Stamp)
	b = appendDeps(b, u.Deps)
	b = binary.AppendUvarint(b, uint64(u.Epoch))
	if u.Expires != 0 || u.Type != 0 { // appended after 0.1.0, left out when zero
		b = binary.AppendVarint(b, int64(u.Expires))
		if u.Type != 0 {
			b = append(b, byte(u.Type))
		}
	}
	return closeStruct(b, at)
}

func appendSessionRecord(b []byte, s *SessionRecord) []byte {
	b, at := openStruct(b)
	b = binary.AppendUvarint(b, uint64(s.Client))
	b = binary.AppendUvarint(b, s.AckedBelow)
	b = binary.AppendUvarint(b, uint64(s.LastSN))
	b = binary.AppendUvarint(b, uint64(len(s.Outcomes)))
	for i := range s.Outcomes {
		o := &s.Outcomes[i]
		var at int
		b, at = openStruct(b)
		b = binary.AppendUvarint(b, o.ReqNo)
		b = appendResult(b, &o.Result)
		b = closeStruct(b, at)
	}
	return closeStruct(b, at)
}

func appendVolumeStatuses(b []byte, vs []VolumeStatus) []byte {
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for i := range vs {
		v := &vs[i]
		var at int
		b, at = openStruct(b)
		b = appendU32(b, uint32(v.Volume))
		b = binary.AppendUvarint(b, uint64(v.Epoch))
		b = binary.AppendUvarint(b, uint64(v.AppliedSN))
		b = binary.AppendUvarint(b, uint64(v.CommittedSN))
		b = appendBool(b, v.JoinerReady)
		b = appendBool(b, v.Complete)
		b = appendVector(b, v.Stable)
		b = appendVector(b, v.Shipped)
		b = binary.AppendVarint(b, int64(v.StalledFor))
		b = binary.AppendUvarint(b, uint64(len(v.Control)))
		for _, c := range v.Control {
			var at int
			b, at = openStruct(b)
			b = appendString(b, c.Path)
			b = binary.AppendUvarint(b, uint64(c.Site))
			b = appendBool(b, c.Deep)
			b = closeStruct(b, at)
		}
		b = binary.AppendUvarint(b, uint64(len(v.ShippingAge)))
		for _, a := range v.ShippingAge {
			var at int
			b, at = openStruct(b)
			b = appendU32(b, uint32(a.Site))
			b = binary.AppendVarint(b, int64(a.Age))
			b = closeStruct(b, at)
		}
		if !v.Split.IsZero() || v.Watches != 0 { // appended after 0.1.0, left out when none
			b = appendU32(b, uint32(v.Split.Into))
			b = binary.AppendUvarint(b, uint64(v.Split.SN))
			b = binary.AppendUvarint(b, uint64(v.Split.Epoch))
		}
		if v.Watches != 0 { // appended after Split, left out when none
			b = binary.AppendUvarint(b, v.Watches)
		}
		b = closeStruct(b, at)
	}
	return b
}

// decoder reads fields from b. The first error is kept in err and empties
// b, so every later read fails fast (returning zero values) without
// overwriting it; callers check err once at the end.
//
// Field names are passed as constants and only formatted on failure, so
// decoding builds no strings for errors that do not happen. Nested structs
// set prefix (e.g. "Updates.Result") for the duration of their fields.
type decoder struct {
	b      []byte // the input not yet consumed
	msg    string // message name, for errors
	prefix string // enclosing field of a nested struct, for errors
	err    error
}

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		name := d.msg + "."
		if d.prefix != "" {
			name += d.prefix + "."
		}
		name += field
		if field == "" {
			name = name[:len(name)-1]
		}
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformed, name, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

// nest sets the prefix for a nested struct and returns the previous one,
// for the caller to restore.
func (d *decoder) nest(prefix string) string {
	prev := d.prefix
	d.prefix = prefix
	return prev
}

func (d *decoder) uvarint(field string) uint64 {
	if len(d.b) > 0 && d.b[0] < 0x80 {
		v := uint64(d.b[0])
		d.b = d.b[1:]
		return v
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			d.fail(field, "truncated")
		} else {
			d.fail(field, "uvarint overflows 64 bits")
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(field string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		if n == 0 {
			d.fail(field, "truncated")
		} else {
			d.fail(field, "varint overflows 64 bits")
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) volume(field string) VolumeID {
	v := d.uvarint(field)
	if v > math.MaxUint32 {
		d.fail(field, "volume %d overflows 32 bits", v)
		return 0
	}
	return VolumeID(v)
}

func (d *decoder) int(field string) int {
	v := d.varint(field)
	if int64(int(v)) != v {
		d.fail(field, "%d overflows int", v)
		return 0
	}
	return int(v)
}

func (d *decoder) byte(field string) byte {
	if len(d.b) == 0 {
		d.fail(field, "truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool(field string) bool {
	if len(d.b) == 0 {
		d.fail(field, "truncated")
		return false
	}
	v := d.b[0]
	if v > 1 {
		d.fail(field, "bool byte %d is neither 0 nor 1", v)
		return false
	}
	d.b = d.b[1:]
	return v == 1
}

// length reads a byte-string length and checks the input holds that many
// bytes.
func (d *decoder) length(field string) int {
	n := d.uvarint(field)
	if n > uint64(len(d.b)) {
		d.fail(field, "length %d exceeds the %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

// bytes reads a byte string into a new slice; empty decodes as nil.
func (d *decoder) bytes(field string) []byte {
	n := d.length(field)
	if n == 0 {
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

func (d *decoder) nodeIDs(field string) []NodeID {
	n := d.count(field, minNodeID)
	if n == 0 {
		return nil
	}
	ids := make([]NodeID, n)
	for i := range ids {
		ids[i] = NodeID(d.string(field))
	}
	return ids
}

func (d *decoder) string(field string) string {
	n := d.length(field)
	if n == 0 {
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

// enter narrows the input to the framed struct that starts here (its
// length, then its fields) and returns the input after it, for leave.
func (d *decoder) enter(field string) (rest []byte) {
	n := d.length(field)
	if d.err != nil {
		return nil
	}
	rest = d.b[n:]
	d.b = d.b[:n:n]
	return rest
}

// leave ends a framed struct entered with enter: the bytes left in it
// are fields a newer release appended, skipped (docs/adr/0026), and
// decoding goes on after it.
func (d *decoder) leave(rest []byte) {
	if d.err == nil {
		d.b = rest
	}
}

// count reads a slice count and checks that the input left can hold that
// many elements of at least minSize bytes each, so that a lying count
// cannot make the decoder allocate more than the input could describe.
func (d *decoder) count(field string, minSize int) int {
	n := d.uvarint(field)
	if n > uint64(len(d.b)/minSize) {
		d.fail(field, "count %d cannot fit in the %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

// config decodes a Config; field names it in errors.
func (d *decoder) config(c *Config, field string) {
	prev := d.nest(field)
	rest := d.enter("")
	c.Volume = d.volume("Volume")
	c.Epoch = Epoch(d.uvarint("Epoch"))
	if n := d.count("Chain", minNodeID); n > 0 {
		c.Chain = make([]NodeID, n)
		for i := range c.Chain {
			c.Chain[i] = NodeID(d.string("Chain"))
		}
	}
	c.Joining = NodeID(d.string("Joining"))
	switch flags := d.byte("Flags"); {
	case flags&^(configFresh|configMoved|configModeMask|configFromSplit) != 0:
		d.fail("Flags", "unknown flags %#x", flags)
	case Mode(flags&configModeMask>>configModeShift) > ModeHierarchical:
		d.fail("Flags", "unknown mode %d", flags&configModeMask>>configModeShift)
	default:
		c.Fresh, c.Moved, c.FromSplit = flags&configFresh != 0, flags&configMoved != 0, flags&configFromSplit != 0
		c.Mode = Mode(flags & configModeMask >> configModeShift)
	}
	c.K = d.int("K")
	c.Sites = d.siteIDs("Sites")
	if len(d.b) > 0 { // appended after 0.1.0
		c.Split = Split{Into: d.volume("Split.Into"), Epoch: Epoch(d.uvarint("Split.Epoch")),
			Modulus: uint32(d.volume("Split.Modulus")), Keep: uint32(d.volume("Split.Keep"))}
		if c.Split.Modulus == 0 || c.Split.Keep >= c.Split.Modulus/2 {
			d.fail("Split", "keeping %d of modulus %d", c.Split.Keep, c.Split.Modulus)
		}
	}
	d.prefix = prev
	d.leave(rest)
}

// strings decodes a counted []string.
func (d *decoder) strings(field string) []string {
	n := d.count(field, minString)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string(field)
	}
	return ss
}

func (d *decoder) authChange(c *AuthChange) {
	prev := d.nest("Change")
	rest := d.enter("")
	c.Op = AuthOp(d.byte("Op"))
	c.User = d.string("User")
	c.Role = d.string("Role")
	c.PasswordHash = d.string("PasswordHash")
	c.Roles = d.strings("Roles")
	d.grant(&c.Grant, "Change.Grant")
	d.prefix = prev
	d.leave(rest)
}

// grant decodes a Grant; prefix names its fields in errors.
func (d *decoder) grant(g *Grant, prefix string) {
	prev := d.nest(prefix)
	rest := d.enter("")
	g.Keyspace = d.string("Keyspace")
	g.Prefix = d.string("Prefix")
	g.Access = Access(d.byte("Access"))
	d.prefix = prev
	d.leave(rest)
}

// authTable decodes an AuthTable; field names it in errors.
func (d *decoder) authTable(t *AuthTable, field string) {
	prev := d.nest(field)
	tableRest := d.enter("")
	t.Version = d.uvarint("Version")
	if n := d.count("Users", minUser); n > 0 {
		t.Users = make([]User, n)
		for i := range t.Users {
			u := &t.Users[i]
			rest := d.enter("Users")
			u.Name = d.string("Users.Name")
			u.PasswordHash = d.string("Users.PasswordHash")
			u.Roles = d.strings("Users.Roles")
			d.leave(rest)
		}
	}
	if n := d.count("Roles", minRole); n > 0 {
		t.Roles = make([]Role, n)
		for i := range t.Roles {
			r := &t.Roles[i]
			rest := d.enter("Roles")
			r.Name = d.string("Roles.Name")
			if n := d.count("Roles.Grants", minGrant); n > 0 {
				r.Grants = make([]Grant, n)
				for j := range r.Grants {
					d.grant(&r.Grants[j], field+".Roles.Grants")
				}
			}
			d.leave(rest)
		}
	}
	d.prefix = prev
	d.leave(tableRest)
}

func (d *decoder) stamp(s *Stamp, field string) {
	prev := d.nest(field)
	rest := d.enter("")
	s.Origin = SiteID(d.volume("Origin"))
	s.N = d.uvarint("N")
	s.TS = d.uvarint("TS")
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) transferID() TransferID {
	prev := d.nest("Transfer")
	rest := d.enter("")
	t := TransferID{Incarnation: d.uvarint("Incarnation"), Attempt: d.uvarint("Attempt")}
	d.prefix = prev
	d.leave(rest)
	return t
}

// ballot decodes a Ballot; field names it in errors.
func (d *decoder) ballot(field string) Ballot {
	prev := d.nest(field)
	rest := d.enter("")
	x := Ballot{N: d.uvarint("N"), Site: SiteID(d.volume("Site"))}
	d.prefix = prev
	d.leave(rest)
	return x
}

// view decodes a View; field names it in errors.
func (d *decoder) view(v *View, field string) {
	prev := d.nest(field)
	rest := d.enter("")
	v.N = d.uvarint("N")
	v.Members = d.siteIDs("Members")
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) deps(field string) []Dep {
	n := d.count(field, minDep)
	if n == 0 {
		return nil
	}
	deps := make([]Dep, n)
	for i := range deps {
		rest := d.enter(field)
		deps[i].Key = d.string(field)
		deps[i].Origin = SiteID(d.volume(field))
		deps[i].N = d.uvarint(field)
		d.leave(rest)
	}
	return deps
}

// vector decodes a Vector; entries out of order or with a zero count are
// malformed.
func (d *decoder) vector(field string) Vector {
	n := d.count(field, minSiteCount)
	if n == 0 {
		return nil
	}
	v := make(Vector, n)
	for i := range v {
		rest := d.enter(field)
		v[i].Site = SiteID(d.volume(field))
		v[i].N = d.uvarint(field)
		d.leave(rest)
	}
	if d.err == nil && !v.Valid() {
		d.fail(field, "entries out of site order or with a zero count")
		return nil
	}
	return v
}

// sites decodes a counted []Site.
func (d *decoder) sites(field string) []Site {
	n := d.count(field, minSite)
	if n == 0 {
		return nil
	}
	out := make([]Site, n)
	prev := d.nest(field)
	for i := range out {
		st := &out[i]
		rest := d.enter("")
		st.ID = SiteID(d.volume("ID"))
		st.Name = d.string("Name")
		st.Masters = d.nodeIDs("Masters")
		d.leave(rest)
	}
	d.prefix = prev
	return out
}

// siteIDs decodes a list of sites, which must be increasing.
func (d *decoder) siteIDs(field string) []SiteID {
	n := d.count(field, minSiteID)
	if n == 0 {
		return nil
	}
	ids := make([]SiteID, n)
	for i := range ids {
		ids[i] = SiteID(d.volume(field))
		if d.err == nil && i > 0 && ids[i-1] >= ids[i] {
			d.fail(field, "sites not in increasing order")
			return nil
		}
	}
	return ids
}

func (d *decoder) updates(field string) []Update {
	n := d.count(field, minUpdate)
	if n == 0 {
		return nil
	}
	us := make([]Update, n)
	for i := range us {
		d.update(&us[i])
	}
	return us
}

func (d *decoder) keyspace(k *Keyspace, field string) {
	prev := d.nest(field)
	rest := d.enter("")
	k.Name = d.string("Name")
	k.Prefix = d.string("Prefix")
	k.Mode = Mode(d.byte("Mode"))
	k.K = d.int("K")
	k.ReplicationFactor = d.int("ReplicationFactor")
	k.FirstVolume = d.volume("FirstVolume")
	k.Volumes = d.int("Volumes")
	k.Sites = d.siteIDs("Sites")
	k.PartitionDepth = d.int("PartitionDepth")
	k.Relaxed = d.bool("Relaxed")
	k.Idle = Time(d.varint("Idle"))
	k.Grace.Generation = d.uvarint("Grace.Generation")
	k.Grace.Sites = d.siteIDs("Grace.Sites")
	k.Reassign.Generation = d.uvarint("Reassign.Generation")
	k.Reassign.Sites = d.siteIDs("Reassign.Sites")
	if len(d.b) > 0 { // appended after 0.1.0
		k.Splits = d.int("Splits")
		if n := d.count("VolumeIDs", 1); n > 0 {
			k.VolumeIDs = make([]VolumeID, n)
			for i := range k.VolumeIDs {
				k.VolumeIDs[i] = d.volume("VolumeIDs")
			}
		}
		if k.Splits < 1 || len(k.VolumeIDs) != k.Volumes {
			d.fail("VolumeIDs", "%d volumes listed for %d volumes split %d times", len(k.VolumeIDs), k.Volumes, k.Splits)
		}
	}
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) keyspaces(field string) []Keyspace {
	n := d.count(field, minKeyspace)
	if n == 0 {
		return nil
	}
	ks := make([]Keyspace, n)
	for i := range ks {
		d.keyspace(&ks[i], field)
	}
	return ks
}

func (d *decoder) configs(field string) []Config {
	n := d.count(field, minConfig)
	if n == 0 {
		return nil
	}
	cs := make([]Config, n)
	for i := range cs {
		d.config(&cs[i], field)
	}
	return cs
}

func (d *decoder) op(o *Op) {
	prev := d.nest("Op")
	rest := d.enter("")
	o.Kind = OpKind(d.byte("Kind"))
	o.Key = d.string("Key")
	o.Value = d.bytes("Value")
	o.Expected = d.bytes("Expected")
	o.ExpectAbsent = d.bool("ExpectAbsent")
	o.Delta = d.varint("Delta")
	if len(d.b) > 0 { // appended after 0.1.0
		o.Expires = Time(d.varint("Expires"))
		o.TTL = Time(d.varint("TTL"))
		o.Expiry = ExpiryFlags(d.byte("Expiry"))
	}
	d.prefix = prev
	d.leave(rest)
}

// result decodes a Result; field names it in errors.
func (d *decoder) result(r *Result, field string) {
	prev := d.nest(field)
	rest := d.enter("")
	r.Status = Status(d.byte("Status"))
	r.Found = d.bool("Found")
	r.Value = d.bytes("Value")
	r.SN = SN(d.uvarint("SN"))
	d.stamp(&r.Stamp, field+".Stamp")
	if len(d.b) > 0 { // appended after 0.1.0
		r.Expires = Time(d.varint("Expires"))
		if len(d.b) > 0 {
			r.Type = ObjectType(d.byte("Type"))
		}
	}
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) update(u *Update) {
	prev := d.nest("Updates")
	rest := d.enter("")
	u.SN = SN(d.uvarint("SN"))
	u.Key = d.string("Key")
	u.Changed = d.bool("Changed")
	u.Deleted = d.bool("Deleted")
	u.Value = d.bytes("Value")
	u.Client = ClientID(d.uvarint("Client"))
	u.ReqNo = d.uvarint("ReqNo")
	u.AckedBelow = d.uvarint("AckedBelow")
	u.ReplyTo = NodeID(d.string("ReplyTo"))
	d.result(&u.Result, "Updates.Result")
	d.stamp(&u.Stamp, "Updates.Stamp")
	u.Deps = d.deps("Deps")
	u.Epoch = Epoch(d.uvarint("Epoch"))
	if len(d.b) > 0 { // appended after 0.1.0
		u.Expires = Time(d.varint("Expires"))
		if len(d.b) > 0 {
			u.Type = ObjectType(d.byte("Type"))
		}
	}
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) keyValues(field string) []KeyValue {
	n := d.count(field, minKeyValue)
	if n == 0 {
		return nil
	}
	kvs := make([]KeyValue, n)
	for i := range kvs {
		d.keyValue(&kvs[i])
	}
	return kvs
}

func (d *decoder) keyValue(kv *KeyValue) {
	prev := d.nest("Objects")
	rest := d.enter("")
	kv.Key = d.string("Key")
	kv.Value = d.bytes("Value")
	kv.Deleted = d.bool("Deleted")
	d.stamp(&kv.Stamp, "Objects.Stamp")
	if len(d.b) > 0 { // appended after 0.1.0
		kv.Expires = Time(d.varint("Expires"))
		if len(d.b) > 0 {
			kv.Type = ObjectType(d.byte("Type"))
		}
	}
	d.prefix = prev
	d.leave(rest)
}

func (d *decoder) sessionRecord(s *SessionRecord) {
	prev := d.nest("Sessions")
	recordRest := d.enter("")
	s.Client = ClientID(d.uvarint("Client"))
	s.AckedBelow = d.uvarint("AckedBelow")
	s.LastSN = SN(d.uvarint("LastSN"))
	if n := d.count("Outcomes", minOutcome); n > 0 {
		s.Outcomes = make([]Outcome, n)
		for i := range s.Outcomes {
			o := &s.Outcomes[i]
			d.prefix = "Sessions"
			rest := d.enter("Outcomes")
			d.prefix = "Sessions.Outcomes"
			o.ReqNo = d.uvarint("ReqNo")
			d.result(&o.Result, "Sessions.Outcomes.Result")
			d.leave(rest)
		}
	}
	d.prefix = prev
	d.leave(recordRest)
}

func (d *decoder) serverStatus(s *ServerStatus) {
	prev := d.nest("Servers")
	rest := d.enter("")
	s.ID = NodeID(d.string("ID"))
	s.Alive = d.bool("Alive")
	s.Incarnation = d.uvarint("Incarnation")
	s.Volumes = d.volumeStatuses("Volumes", "Servers.Volumes")
	s.MinProtocol = uint32(d.volume("MinProtocol"))
	s.MaxProtocol = uint32(d.volume("MaxProtocol"))
	d.prefix = prev
	d.leave(rest)
}

// volumeStatuses decodes a counted []VolumeStatus. field names the count
// within the current prefix, elemPrefix the elements' fields, in errors.
func (d *decoder) volumeStatuses(field, elemPrefix string) []VolumeStatus {
	n := d.count(field, minVolumeStatus)
	if n == 0 {
		return nil
	}
	prev := d.nest(elemPrefix)
	vs := make([]VolumeStatus, n)
	for i := range vs {
		v := &vs[i]
		rest := d.enter("")
		v.Volume = d.volume("Volume")
		v.Epoch = Epoch(d.uvarint("Epoch"))
		v.AppliedSN = SN(d.uvarint("AppliedSN"))
		v.CommittedSN = SN(d.uvarint("CommittedSN"))
		v.JoinerReady = d.bool("JoinerReady")
		v.Complete = d.bool("Complete")
		v.Stable = d.vector("Stable")
		v.Shipped = d.vector("Shipped")
		v.StalledFor = Time(d.varint("StalledFor"))
		v.Control = d.pathControls("Control")
		if n := d.count("ShippingAge", minSiteTime); n > 0 {
			v.ShippingAge = make([]SiteTime, n)
			for j := range v.ShippingAge {
				rest := d.enter("ShippingAge")
				v.ShippingAge[j].Site = SiteID(d.volume("ShippingAge"))
				v.ShippingAge[j].Age = Time(d.varint("ShippingAge"))
				d.leave(rest)
			}
		}
		if len(d.b) > 0 { // appended after 0.1.0
			v.Split = SplitPoint{Into: d.volume("Split.Into"), SN: SN(d.uvarint("Split.SN")), Epoch: Epoch(d.uvarint("Split.Epoch"))}
		}
		if len(d.b) > 0 { // appended after Split
			v.Watches = d.uvarint("Watches")
		}
		d.leave(rest)
	}
	d.prefix = prev
	return vs
}

// pathControls decodes a VolumeStatus's Control.
func (d *decoder) pathControls(field string) []PathControl {
	n := d.count(field, minPathControl)
	if n == 0 {
		return nil
	}
	out := make([]PathControl, n)
	for i := range out {
		rest := d.enter("Control")
		out[i].Path = d.string("Control.Path")
		if site := d.uvarint("Control.Site"); site > math.MaxUint32 {
			d.fail("Control.Site", "site %d out of range", site)
		} else {
			out[i].Site = SiteID(site)
		}
		out[i].Deep = d.bool("Control.Deep")
		d.leave(rest)
	}
	return out
}
