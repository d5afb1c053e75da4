package wire

// The codec of the messages between clients and servers and along a
// chain (codec.go describes the format): each message's append and
// decode functions, side by side.

import (
	"encoding/binary"
	"math"
)

// appendClientRequest appends a ClientRequest's fields (no type byte).
func appendClientRequest(b []byte, m *ClientRequest) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.Client))
	b = binary.AppendUvarint(b, m.ReqNo)
	b = binary.AppendUvarint(b, m.AckedBelow)
	b = appendBool(b, m.ExpectSession)
	b = appendOp(b, &m.Op)
	b = binary.AppendUvarint(b, uint64(m.MinVersion))
	b = appendU32(b, m.Keyspaces)
	b = appendDeps(b, m.Deps)
	b = binary.AppendUvarint(b, m.TS)
	b = appendString(b, m.User)
	// A varint: 0 on every request a client sends, one byte.
	b = binary.AppendUvarint(b, uint64(m.FromSite))
	return binary.AppendUvarint(b, uint64(m.Sites))
}

// clientRequest decodes a ClientRequest's fields.
func (d *decoder) clientRequest(x *ClientRequest) {
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.Client = ClientID(d.uvarint("Client"))
	x.ReqNo = d.uvarint("ReqNo")
	x.AckedBelow = d.uvarint("AckedBelow")
	x.ExpectSession = d.bool("ExpectSession")
	d.op(&x.Op)
	x.MinVersion = SN(d.uvarint("MinVersion"))
	x.Keyspaces = uint32(d.volume("Keyspaces"))
	x.Deps = d.deps("Deps")
	x.TS = d.uvarint("TS")
	x.User = d.string("User")
	if site := d.uvarint("FromSite"); site > math.MaxUint32 {
		d.fail("FromSite", "site %d out of range", site)
	} else {
		x.FromSite = SiteID(site)
	}
	if n := d.uvarint("Sites"); n > math.MaxUint32 {
		d.fail("Sites", "%d sites out of range", n)
	} else {
		x.Sites = uint32(n)
	}
}

// decodeClientRequest decodes a ClientRequest's fields.
func decodeClientRequest(d *decoder) Message {
	x := &ClientRequest{}
	d.clientRequest(x)
	return x
}

// appendClientReply appends a ClientReply's fields (no type byte).
func appendClientReply(b []byte, m *ClientReply) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Client))
	b = binary.AppendUvarint(b, m.ReqNo)
	b = append(b, byte(m.Err))
	b = appendResult(b, &m.Result)
	b = appendBool(b, m.Config != nil)
	if m.Config != nil {
		b = appendConfig(b, m.Config)
	}
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendVarint(b, int64(m.Position))
	b = appendBool(b, m.Stable)
	return appendSiteIDs(b, m.Sites)
}

// decodeClientReply decodes a ClientReply's fields.
func decodeClientReply(d *decoder) Message {
	x := &ClientReply{}
	x.Volume = d.volume("Volume")
	x.Client = ClientID(d.uvarint("Client"))
	x.ReqNo = d.uvarint("ReqNo")
	x.Err = ErrCode(d.byte("Err"))
	d.result(&x.Result, "Result")
	if d.bool("Config") {
		x.Config = &Config{}
		d.config(x.Config, "Config")
	}
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.Position = d.int("Position")
	x.Stable = d.bool("Stable")
	x.Sites = d.siteIDs("Sites")
	return x
}

// appendForward appends a Forward's fields (no type byte).
func appendForward(b []byte, m *Forward) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = appendUpdates(b, m.Updates)
	return b
}

// decodeForward decodes a Forward's fields.
func decodeForward(d *decoder) Message {
	x := &Forward{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.Updates = d.updates("Updates")
	return x
}

// appendAck appends an Ack's fields (no type byte).
func appendAck(b []byte, m *Ack) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.SN))
	b = binary.AppendUvarint(b, m.Shipped)
	b = appendVector(b, m.ShippedTo)
	b = appendVector(b, m.Relayed)
	return b
}

// decodeAck decodes an Ack's fields.
func decodeAck(d *decoder) Message {
	x := &Ack{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.SN = SN(d.uvarint("SN"))
	x.Shipped = d.uvarint("Shipped")
	x.ShippedTo = d.vector("ShippedTo")
	x.Relayed = d.vector("Relayed")
	return x
}

// appendSyncRequest appends a SyncRequest's fields (no type byte).
func appendSyncRequest(b []byte, m *SyncRequest) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.AppliedSN))
	b = binary.AppendUvarint(b, uint64(m.CommittedSN))
	b = appendBool(b, m.NeedSnapshot)
	b = binary.AppendUvarint(b, uint64(m.AppliedEpoch))
	b = appendTransferID(b, m.Transfer)
	return b
}

// decodeSyncRequest decodes a SyncRequest's fields.
func decodeSyncRequest(d *decoder) Message {
	x := &SyncRequest{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.AppliedSN = SN(d.uvarint("AppliedSN"))
	x.CommittedSN = SN(d.uvarint("CommittedSN"))
	x.NeedSnapshot = d.bool("NeedSnapshot")
	x.AppliedEpoch = Epoch(d.uvarint("AppliedEpoch"))
	x.Transfer = d.transferID()
	return x
}

// appendSyncReply appends a SyncReply's fields (no type byte).
func appendSyncReply(b []byte, m *SyncReply) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.PredecessorAppliedSN))
	b = appendBool(b, m.PredecessorComplete)
	b = appendBool(b, m.CatchUp)
	b = appendTransferID(b, m.Transfer)
	b = binary.AppendUvarint(b, uint64(m.PredecessorDurableSN))
	return b
}

// decodeSyncReply decodes a SyncReply's fields.
func decodeSyncReply(d *decoder) Message {
	x := &SyncReply{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.PredecessorAppliedSN = SN(d.uvarint("PredecessorAppliedSN"))
	x.PredecessorComplete = d.bool("PredecessorComplete")
	x.CatchUp = d.bool("CatchUp")
	x.Transfer = d.transferID()
	x.PredecessorDurableSN = SN(d.uvarint("PredecessorDurableSN"))
	return x
}

// appendSnapshotChunk appends a SnapshotChunk's fields (no type byte).
func appendSnapshotChunk(b []byte, m *SnapshotChunk) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.SnapshotSN))
	b = binary.AppendVarint(b, int64(m.Seq))
	b = appendKeyValues(b, m.Objects)
	b = binary.AppendUvarint(b, uint64(len(m.Sessions)))
	for i := range m.Sessions {
		b = appendSessionRecord(b, &m.Sessions[i])
	}
	b = appendBool(b, m.Last)
	b = appendVector(b, m.Vector)
	b = appendUpdates(b, m.ShipLog)
	b = binary.AppendUvarint(b, uint64(m.SnapshotEpoch))
	if !m.Split.IsZero() { // appended after 0.1.0, left out when none
		b = appendU32(b, uint32(m.Split.Into))
		b = binary.AppendUvarint(b, uint64(m.Split.SN))
		b = binary.AppendUvarint(b, uint64(m.Split.Epoch))
	}
	return b
}

// decodeSnapshotChunk decodes a SnapshotChunk's fields.
func decodeSnapshotChunk(d *decoder) Message {
	x := &SnapshotChunk{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.SnapshotSN = SN(d.uvarint("SnapshotSN"))
	x.Seq = d.int("Seq")
	x.Objects = d.keyValues("Objects")
	if n := d.count("Sessions", minSessionRecord); n > 0 {
		x.Sessions = make([]SessionRecord, n)
		for i := range x.Sessions {
			d.sessionRecord(&x.Sessions[i])
		}
	}
	x.Last = d.bool("Last")
	x.Vector = d.vector("Vector")
	x.ShipLog = d.updates("ShipLog")
	x.SnapshotEpoch = Epoch(d.uvarint("SnapshotEpoch"))
	if len(d.b) > 0 { // appended after 0.1.0
		x.Split = SplitPoint{Into: d.volume("Split.Into"), SN: SN(d.uvarint("Split.SN")), Epoch: Epoch(d.uvarint("Split.Epoch"))}
	}
	return x
}

// appendQueryUp appends a QueryUp's fields (no type byte).
func appendQueryUp(b []byte, m *QueryUp) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = appendString(b, string(m.ReplyTo))
	b, at := openStruct(b)
	b = appendClientRequest(b, &m.Request)
	return closeStruct(b, at)
}

// decodeQueryUp decodes a QueryUp's fields.
func decodeQueryUp(d *decoder) Message {
	x := &QueryUp{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.ReplyTo = NodeID(d.string("ReplyTo"))
	prev := d.nest("Request")
	rest := d.enter("")
	d.clientRequest(&x.Request)
	d.leave(rest)
	d.prefix = prev
	return x
}

// appendDurable appends a Durable's fields (no type byte).
func appendDurable(b []byte, m *Durable) []byte {
	b = appendU32(b, uint32(m.Volume))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(m.SN))
	return b
}

// decodeDurable decodes a Durable's fields.
func decodeDurable(d *decoder) Message {
	x := &Durable{}
	x.Volume = d.volume("Volume")
	x.Epoch = Epoch(d.uvarint("Epoch"))
	x.SN = SN(d.uvarint("SN"))
	return x
}
