package wire

// The codec of the messages between sites: shipping, hierarchical
// control, fetches and moved configurations (codec.go describes the
// format).

import "encoding/binary"

// appendShip appends a Ship's fields (no type byte).
func appendShip(b []byte, m *Ship) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = appendU32(b, uint32(m.Origin))
	b = appendU32(b, uint32(m.OriginVolume))
	b = appendUpdates(b, m.Updates)
	b = appendString(b, m.Cluster)
	b = appendU32(b, uint32(m.Sender))
	b = binary.AppendUvarint(b, m.View)
	return b
}

// decodeShip decodes a Ship's fields.
func decodeShip(d *decoder) Message {
	x := &Ship{}
	x.Volume = d.volume("Volume")
	x.Origin = SiteID(d.volume("Origin"))
	x.OriginVolume = d.volume("OriginVolume")
	x.Updates = d.updates("Updates")
	x.Cluster = d.string("Cluster")
	x.Sender = SiteID(d.volume("Sender"))
	x.View = d.uvarint("View")
	return x
}

// appendShipAck appends a ShipAck's fields (no type byte).
func appendShipAck(b []byte, m *ShipAck) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = appendU32(b, uint32(m.Site))
	b = append(b, byte(m.Err))
	b = binary.AppendUvarint(b, m.Received)
	b = binary.AppendUvarint(b, m.Stable)
	b = appendBool(b, m.Config != nil)
	if m.Config != nil {
		b = appendConfig(b, m.Config)
	}
	b = appendU32(b, uint32(m.Origin))
	return b
}

// decodeShipAck decodes a ShipAck's fields.
func decodeShipAck(d *decoder) Message {
	x := &ShipAck{}
	x.Volume = d.volume("Volume")
	x.Site = SiteID(d.volume("Site"))
	x.Err = ErrCode(d.byte("Err"))
	x.Received = d.uvarint("Received")
	x.Stable = d.uvarint("Stable")
	if d.bool("Config") {
		x.Config = &Config{}
		d.config(x.Config, "Config")
	}
	x.Origin = SiteID(d.volume("Origin"))
	return x
}

// appendControl appends a Control's fields (no type byte).
func appendControl(b []byte, m *Control) []byte {
	b = append(b, byte(m.Kind))
	b = appendString(b, m.Keyspace)
	b = appendU32(b, m.Domain)
	b = appendU32(b, uint32(m.From))
	b = appendU32(b, uint32(m.To))
	b = appendBallot(b, m.Ballot)
	b = appendString(b, m.Path)
	b = appendBool(b, m.Deep)
	b = appendBool(b, m.Granted)
	b = appendU32(b, uint32(m.Holder))
	b = appendBallot(b, m.HolderBallot)
	b = append(b, byte(m.Err))
	b = appendView(b, &m.View)
	b = appendVector(b, m.Vector)
	return b
}

// decodeControl decodes a Control's fields.
func decodeControl(d *decoder) Message {
	x := &Control{}
	x.Kind = ControlKind(d.byte("Kind"))
	x.Keyspace = d.string("Keyspace")
	x.Domain = uint32(d.volume("Domain"))
	x.From = SiteID(d.volume("From"))
	x.To = SiteID(d.volume("To"))
	x.Ballot = d.ballot("Ballot")
	x.Path = d.string("Path")
	x.Deep = d.bool("Deep")
	x.Granted = d.bool("Granted")
	x.Holder = SiteID(d.volume("Holder"))
	x.HolderBallot = d.ballot("HolderBallot")
	x.Err = ErrCode(d.byte("Err"))
	d.view(&x.View, "View")
	x.Vector = d.vector("Vector")
	return x
}

// appendFetch appends a Fetch's fields (no type byte).
func appendFetch(b []byte, m *Fetch) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = appendU32(b, uint32(m.Site))
	b = appendU32(b, uint32(m.OriginVolume))
	b = appendStrings(b, m.Keys)
	b = appendString(b, m.Cluster)
	return b
}

// decodeFetch decodes a Fetch's fields.
func decodeFetch(d *decoder) Message {
	x := &Fetch{}
	x.Volume = d.volume("Volume")
	x.Site = SiteID(d.volume("Site"))
	x.OriginVolume = d.volume("OriginVolume")
	x.Keys = d.strings("Keys")
	x.Cluster = d.string("Cluster")
	return x
}

// appendFetched appends a Fetched's fields (no type byte).
func appendFetched(b []byte, m *Fetched) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = appendU32(b, uint32(m.Site))
	b = appendKeyValues(b, m.Objects)
	b = appendVector(b, m.Vector)
	return b
}

// decodeFetched decodes a Fetched's fields.
func decodeFetched(d *decoder) Message {
	x := &Fetched{}
	x.Volume = d.volume("Volume")
	x.Site = SiteID(d.volume("Site"))
	x.Objects = d.keyValues("Objects")
	x.Vector = d.vector("Vector")
	return x
}

// appendMoved appends a Moved's fields (no type byte).
func appendMoved(b []byte, m *Moved) []byte {
	b = appendU32(b, uint32(m.Site))
	b = appendConfig(b, &m.Config)
	return b
}

// decodeMoved decodes a Moved's fields.
func decodeMoved(d *decoder) Message {
	x := &Moved{}
	x.Site = SiteID(d.volume("Site"))
	d.config(&x.Config, "Config")
	return x
}
