package wire

// Binary codec for messages: a compact, hand-written encoding used by the
// network transports.
//
// # Payload
//
// A payload is one type byte (see the msg* constants below) followed by the
// message's fields in declaration order, with no field tags and no padding:
//
//   - unsigned integers (VolumeID, Epoch, SN, ClientID, uint64): uvarint
//     (encoding/binary); VolumeID must fit in 32 bits;
//   - signed integers (Time, int64, int): zigzag varint; int must fit in int;
//   - uint8 kinds (OpKind, Status, ErrCode): one raw byte, any value;
//   - bool: one byte, 0 or 1 (anything else is malformed);
//   - string, NodeID and []byte: uvarint length, then the bytes. An empty
//     []byte decodes as nil;
//   - slices: uvarint count, then the elements. An empty slice decodes as nil;
//   - pointers (ClientReply.Config): a presence byte, 0 or 1, then the value
//     when present;
//   - nested structs: their fields inline.
//
// The encoding of each message (→ marks a nested struct, [] a counted slice):
//
//	1  ClientRequest  Volume Epoch Client ReqNo AckedBelow ExpectSession →Op MinVersion Keyspaces []Dep TS User
//	2  ClientReply    Volume Client ReqNo Err →Result present? →Config Epoch Position Stable
//	3  Forward        Volume Epoch []Update
//	4  Ack            Volume Epoch SN Shipped →Vector(ShippedTo) →Vector(Relayed)
//	5  SyncRequest    Volume Epoch AppliedSN CommittedSN NeedSnapshot AppliedEpoch →Transfer
//	6  SyncReply      Volume Epoch PredecessorAppliedSN PredecessorComplete CatchUp →Transfer PredecessorDurableSN
//	7  SnapshotChunk  Volume Epoch SnapshotSN Seq []KeyValue []SessionRecord Last →Vector []Update(ShipLog) SnapshotEpoch
//	8  Heartbeat      Incarnation SentAt []VolumeStatus Heard AuthVersion NewDataDir
//	9  HeartbeatReply SentAt LeaseGranted LeaseFor []Config []Keyspace []Site []VolumeVector(Stable) Cluster present? →AuthTable Returning
//	10 NewConfig      →Config
//	11 ConfigRequest  Cluster
//	12 ConfigReply    []Config []NodeID(Masters) Leader
//	13 StatusRequest  (nothing)
//	14 StatusReply    []Config []ServerStatus []NodeID(Masters) Leader []Keyspace Site []Site Cluster
//	15 Hello          From
//	16 PeerReset      Peer
//	17 RaftMessage    Data
//	18 QueryUp        Volume Epoch ReplyTo →ClientRequest (its fields, no type byte)
//	19 KeyspaceRequest →Keyspace present? Override.Keyspace Override.Reassign Override.Generation []SiteID
//	20 KeyspaceReply  Err []Keyspace
//	21 Ship           Volume Origin OriginVolume []Update Cluster Sender View
//	22 ShipAck        Volume Site Err Received Stable present? →Config Origin
//	23 AuthRequest    ID →AuthChange
//	24 AuthReply      ID Err →AuthTable
//	25 NewAuth        →AuthTable
//	26 Control        Kind Keyspace Domain From To →Ballot Path Deep Granted Holder →Ballot(HolderBallot) Err →View →Vector
//	27 Fetch          Volume Site OriginVolume []string(Keys) Cluster
//	28 Fetched        Volume Site []KeyValue →Vector
//	29 Moved          Site →Config
//	30 Durable        Volume Epoch SN
//
// ConfigReply ends with []Keyspace Cluster.
//
//	Config        Volume Epoch []NodeID Joining Flags(Fresh 1, Moved 2) K []SiteID(Sites)
//	Keyspace      Name Prefix Mode K ReplicationFactor FirstVolume Volumes []SiteID(Sites) PartitionDepth Relaxed Idle Grace.Generation []SiteID(Grace.Sites) Reassign.Generation []SiteID(Reassign.Sites)
//	Op            Kind Key Value Expected ExpectAbsent Delta
//	Result        Status Found Value SN →Stamp
//	Update        SN Key Changed Deleted Value Client ReqNo AckedBelow ReplyTo →Result →Stamp []Dep Epoch
//	KeyValue      Key Value Deleted →Stamp
//	Stamp         Origin N TS
//	TransferID    Incarnation Attempt
//	View          N []SiteID(Members)
//	Dep           Key Origin N
//	Vector        []SiteCount: Site N (increasing sites, no zero count)
//	Site          ID Name []NodeID(Masters)
//	VolumeVector  Volume →Vector
//	SessionRecord Client AckedBelow LastSN []Outcome
//	Outcome       ReqNo →Result
//	VolumeStatus  Volume Epoch AppliedSN CommittedSN JoinerReady Complete →Vector(Stable) →Vector(Shipped) StalledFor
//	ServerStatus  ID Alive Incarnation []VolumeStatus
//	AuthChange    Op User Role PasswordHash []string(Roles) →Grant
//	AuthTable     Version []User []Role
//	User          Name PasswordHash []string(Roles)
//	Role          Name []Grant
//	Grant         Keyspace Prefix Access
//	Ballot        N Site
//
// ClientRequest.Caller, AuthRequest.Caller and KeyspaceRequest.Caller
// are not encoded: the receiving transport sets them.
//
// Sites lists are in increasing order without repeats; anything else is
// malformed.
//
// Changing the field order or the encoding of any field is a change of the
// wire format, as is renumbering a type byte.
//
// Decoding is strict: Unmarshal rejects truncated input, trailing bytes,
// unknown type bytes, bools and presence bytes other than 0 and 1, integers
// out of their type's range, and lengths or counts that the remaining input
// cannot hold. It never allocates more than the input could describe, and the
// decoded message never aliases the input. Varints are accepted in
// non-minimal form, but Marshal always writes the minimal form, so
// Marshal(Unmarshal(b)) is canonical.
//
// # Frames
//
// On a stream each payload is preceded by its length as a 4-byte big-endian
// integer (WriteFrame, ReadFrame). A length of 0 or above FrameSizeMax is an
// error after which the stream cannot be resynchronised: close it.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// FrameSizeMax bounds the size of one encoded payload (excluding the 4-byte
// frame header). Marshal refuses to produce more; Unmarshal and ReadFrame
// refuse to read more.
const FrameSizeMax = 16 << 20

// frameHeaderSize is the size of a frame's big-endian length prefix.
const frameHeaderSize = 4

var (
	// ErrMalformed is wrapped by every error reporting input that is not a
	// valid encoding.
	ErrMalformed = errors.New("wire: malformed message")
	// ErrTooLarge is wrapped by errors reporting a payload over FrameSizeMax.
	ErrTooLarge = errors.New("wire: message too large")
)

// Message type bytes. They are part of the on-the-wire format: NEVER
// renumber or reuse them. A new message type takes the next unused number.
const (
	msgClientRequest   byte = 1
	msgClientReply     byte = 2
	msgForward         byte = 3
	msgAck             byte = 4
	msgSyncRequest     byte = 5
	msgSyncReply       byte = 6
	msgSnapshotChunk   byte = 7
	msgHeartbeat       byte = 8
	msgHeartbeatReply  byte = 9
	msgNewConfig       byte = 10
	msgConfigRequest   byte = 11
	msgConfigReply     byte = 12
	msgStatusRequest   byte = 13
	msgStatusReply     byte = 14
	msgHello           byte = 15
	msgPeerReset       byte = 16
	msgRaftMessage     byte = 17
	msgQueryUp         byte = 18
	msgKeyspaceRequest byte = 19
	msgKeyspaceReply   byte = 20
	msgShip            byte = 21
	msgShipAck         byte = 22
	msgAuthRequest     byte = 23
	msgAuthReply       byte = 24
	msgNewAuth         byte = 25
	msgControl         byte = 26
	msgFetch           byte = 27
	msgFetched         byte = 28
	msgMoved           byte = 29
	msgDurable         byte = 30
)

// msgNames maps type bytes to message names, for error messages.
var msgNames = [...]string{
	msgClientRequest:   "ClientRequest",
	msgClientReply:     "ClientReply",
	msgForward:         "Forward",
	msgAck:             "Ack",
	msgSyncRequest:     "SyncRequest",
	msgSyncReply:       "SyncReply",
	msgSnapshotChunk:   "SnapshotChunk",
	msgHeartbeat:       "Heartbeat",
	msgHeartbeatReply:  "HeartbeatReply",
	msgNewConfig:       "NewConfig",
	msgConfigRequest:   "ConfigRequest",
	msgConfigReply:     "ConfigReply",
	msgStatusRequest:   "StatusRequest",
	msgStatusReply:     "StatusReply",
	msgHello:           "Hello",
	msgPeerReset:       "PeerReset",
	msgRaftMessage:     "RaftMessage",
	msgQueryUp:         "QueryUp",
	msgKeyspaceRequest: "KeyspaceRequest",
	msgKeyspaceReply:   "KeyspaceReply",
	msgShip:            "Ship",
	msgShipAck:         "ShipAck",
	msgAuthRequest:     "AuthRequest",
	msgAuthReply:       "AuthReply",
	msgNewAuth:         "NewAuth",
	msgControl:         "Control",
	msgFetch:           "Fetch",
	msgFetched:         "Fetched",
	msgMoved:           "Moved",
	msgDurable:         "Durable",
}

// Minimum encoded sizes of slice elements: every field at its shortest (one
// byte per integer, bool, length or count). A count is rejected when count *
// min exceeds the remaining input, which bounds allocations by the input.
// TestMinSizes checks them against the encoding of zero values.
const (
	minNodeID        = 1                            // length
	minConfig        = 7                            // Volume Epoch count Joining Fresh K count
	minKeyspace      = 15                           // Name Prefix Mode K ReplicationFactor FirstVolume Volumes count PartitionDepth Relaxed Idle Grace.Generation count Reassign.Generation count
	minStamp         = 3                            // Origin N TS
	minResult        = 4 + minStamp                 // Status Found Value SN Stamp
	minUpdate        = 9 + minResult + minStamp + 2 // ... count(Deps) Epoch
	minKeyValue      = 3 + minStamp                 // Key Value Deleted Stamp
	minOutcome       = 1 + minResult
	minSessionRecord = 4 // Client AckedBelow LastSN count
	minVolumeStatus  = 9 // Volume Epoch AppliedSN CommittedSN JoinerReady Complete count count StalledFor
	minServerStatus  = 4 // ID Alive Incarnation count
	minDep           = 3 // Key Origin N
	minSiteCount     = 2 // Site N
	minSite          = 3 // ID Name count
	minVolumeVector  = 2 // Volume count
	minSiteID        = 1
	minString        = 1 // length
	minUser          = 3 // Name PasswordHash count
	minRole          = 2 // Name count
	minGrant         = 3 // Keyspace Prefix Access
)

// Marshal returns the payload encoding m: its type byte and its fields.
func Marshal(m Message) ([]byte, error) {
	return AppendMessage(nil, m)
}

// AppendMessage appends the payload encoding m to dst and returns the
// extended buffer. On error it returns dst unchanged (but its spare capacity
// may have been written).
func AppendMessage(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	b := dst
	switch m := m.(type) {
	case *ClientRequest:
		if m == nil {
			break
		}
		b = append(b, msgClientRequest)
		b = appendClientRequest(b, m)
	case *ClientReply:
		if m == nil {
			break
		}
		b = append(b, msgClientReply)
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
	case *QueryUp:
		if m == nil {
			break
		}
		b = append(b, msgQueryUp)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = appendString(b, string(m.ReplyTo))
		b = appendClientRequest(b, &m.Request)
	case *Forward:
		if m == nil {
			break
		}
		b = append(b, msgForward)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = appendUpdates(b, m.Updates)
	case *Ship:
		if m == nil {
			break
		}
		b = append(b, msgShip)
		b = appendU32(b, uint32(m.Volume))
		b = appendU32(b, uint32(m.Origin))
		b = appendU32(b, uint32(m.OriginVolume))
		b = appendUpdates(b, m.Updates)
		b = appendString(b, m.Cluster)
		b = appendU32(b, uint32(m.Sender))
		b = binary.AppendUvarint(b, m.View)
	case *ShipAck:
		if m == nil {
			break
		}
		b = append(b, msgShipAck)
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
	case *Ack:
		if m == nil {
			break
		}
		b = append(b, msgAck)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = binary.AppendUvarint(b, uint64(m.SN))
		b = binary.AppendUvarint(b, m.Shipped)
		b = appendVector(b, m.ShippedTo)
		b = appendVector(b, m.Relayed)
	case *SyncRequest:
		if m == nil {
			break
		}
		b = append(b, msgSyncRequest)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = binary.AppendUvarint(b, uint64(m.AppliedSN))
		b = binary.AppendUvarint(b, uint64(m.CommittedSN))
		b = appendBool(b, m.NeedSnapshot)
		b = binary.AppendUvarint(b, uint64(m.AppliedEpoch))
		b = appendTransferID(b, m.Transfer)
	case *SyncReply:
		if m == nil {
			break
		}
		b = append(b, msgSyncReply)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = binary.AppendUvarint(b, uint64(m.PredecessorAppliedSN))
		b = appendBool(b, m.PredecessorComplete)
		b = appendBool(b, m.CatchUp)
		b = appendTransferID(b, m.Transfer)
		b = binary.AppendUvarint(b, uint64(m.PredecessorDurableSN))
	case *Durable:
		if m == nil {
			break
		}
		b = append(b, msgDurable)
		b = appendU32(b, uint32(m.Volume))
		b = binary.AppendUvarint(b, uint64(m.Epoch))
		b = binary.AppendUvarint(b, uint64(m.SN))
	case *SnapshotChunk:
		if m == nil {
			break
		}
		b = append(b, msgSnapshotChunk)
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
	case *Heartbeat:
		if m == nil {
			break
		}
		b = append(b, msgHeartbeat)
		b = binary.AppendUvarint(b, m.Incarnation)
		b = binary.AppendVarint(b, int64(m.SentAt))
		b = appendVolumeStatuses(b, m.Volumes)
		b = binary.AppendVarint(b, int64(m.Heard))
		b = binary.AppendUvarint(b, m.AuthVersion)
		b = appendBool(b, m.NewDataDir)
	case *HeartbeatReply:
		if m == nil {
			break
		}
		b = append(b, msgHeartbeatReply)
		b = binary.AppendVarint(b, int64(m.SentAt))
		b = appendBool(b, m.LeaseGranted)
		b = binary.AppendVarint(b, int64(m.LeaseFor))
		b = appendConfigs(b, m.Configs)
		b = appendKeyspaces(b, m.Keyspaces)
		b = appendSites(b, m.Sites)
		b = binary.AppendUvarint(b, uint64(len(m.Stable)))
		for i := range m.Stable {
			b = appendU32(b, uint32(m.Stable[i].Volume))
			b = appendVector(b, m.Stable[i].Vector)
		}
		b = appendString(b, m.Cluster)
		b = appendBool(b, m.Auth != nil)
		if m.Auth != nil {
			b = appendAuthTable(b, m.Auth)
		}
		b = appendBool(b, m.Returning)
	case *NewConfig:
		if m == nil {
			break
		}
		b = append(b, msgNewConfig)
		b = appendConfig(b, &m.Config)
	case *ConfigRequest:
		if m == nil {
			break
		}
		b = append(b, msgConfigRequest)
		b = appendString(b, m.Cluster)
	case *ConfigReply:
		if m == nil {
			break
		}
		b = append(b, msgConfigReply)
		b = appendConfigs(b, m.Configs)
		b = appendNodeIDs(b, m.Masters)
		b = appendString(b, string(m.Leader))
		b = appendKeyspaces(b, m.Keyspaces)
		b = appendString(b, m.Cluster)
	case *KeyspaceRequest:
		if m == nil {
			break
		}
		b = append(b, msgKeyspaceRequest)
		b = appendKeyspace(b, &m.Create)
		b = appendBool(b, m.Override != nil)
		if m.Override != nil {
			b = appendString(b, m.Override.Keyspace)
			b = appendBool(b, m.Override.Reassign)
			b = binary.AppendUvarint(b, m.Override.Override.Generation)
			b = appendSiteIDs(b, m.Override.Override.Sites)
		}
	case *KeyspaceReply:
		if m == nil {
			break
		}
		b = append(b, msgKeyspaceReply)
		b = appendString(b, m.Err)
		b = appendKeyspaces(b, m.Keyspaces)
	case *StatusRequest:
		if m == nil {
			break
		}
		b = append(b, msgStatusRequest)
	case *StatusReply:
		if m == nil {
			break
		}
		b = append(b, msgStatusReply)
		b = appendConfigs(b, m.Configs)
		b = binary.AppendUvarint(b, uint64(len(m.Servers)))
		for i := range m.Servers {
			s := &m.Servers[i]
			b = appendString(b, string(s.ID))
			b = appendBool(b, s.Alive)
			b = binary.AppendUvarint(b, s.Incarnation)
			b = appendVolumeStatuses(b, s.Volumes)
		}
		b = appendNodeIDs(b, m.Masters)
		b = appendString(b, string(m.Leader))
		b = appendKeyspaces(b, m.Keyspaces)
		b = appendU32(b, uint32(m.Site))
		b = appendSites(b, m.Sites)
		b = appendString(b, m.Cluster)
	case *Hello:
		if m == nil {
			break
		}
		b = append(b, msgHello)
		b = appendString(b, string(m.From))
	case *PeerReset:
		if m == nil {
			break
		}
		b = append(b, msgPeerReset)
		b = appendString(b, string(m.Peer))
	case *RaftMessage:
		if m == nil {
			break
		}
		b = append(b, msgRaftMessage)
		b = appendBytes(b, m.Data)
	case *AuthRequest:
		if m == nil {
			break
		}
		b = append(b, msgAuthRequest)
		b = binary.AppendUvarint(b, m.ID)
		b = appendAuthChange(b, &m.Change)
	case *AuthReply:
		if m == nil {
			break
		}
		b = append(b, msgAuthReply)
		b = binary.AppendUvarint(b, m.ID)
		b = appendString(b, m.Err)
		b = appendAuthTable(b, &m.Table)
	case *NewAuth:
		if m == nil {
			break
		}
		b = append(b, msgNewAuth)
		b = appendAuthTable(b, &m.Table)
	case *Control:
		if m == nil {
			break
		}
		b = append(b, msgControl)
		b = append(b, byte(m.Kind))
		b = appendString(b, m.Keyspace)
		b = appendU32(b, m.Domain)
		b = appendU32(b, uint32(m.From))
		b = appendU32(b, uint32(m.To))
		b = binary.AppendUvarint(b, m.Ballot.N)
		b = appendU32(b, uint32(m.Ballot.Site))
		b = appendString(b, m.Path)
		b = appendBool(b, m.Deep)
		b = appendBool(b, m.Granted)
		b = appendU32(b, uint32(m.Holder))
		b = binary.AppendUvarint(b, m.HolderBallot.N)
		b = appendU32(b, uint32(m.HolderBallot.Site))
		b = append(b, byte(m.Err))
		b = binary.AppendUvarint(b, m.View.N)
		b = appendSiteIDs(b, m.View.Members)
		b = appendVector(b, m.Vector)
	case *Fetch:
		if m == nil {
			break
		}
		b = append(b, msgFetch)
		b = appendU32(b, uint32(m.Volume))
		b = appendU32(b, uint32(m.Site))
		b = appendU32(b, uint32(m.OriginVolume))
		b = appendStrings(b, m.Keys)
		b = appendString(b, m.Cluster)
	case *Fetched:
		if m == nil {
			break
		}
		b = append(b, msgFetched)
		b = appendU32(b, uint32(m.Volume))
		b = appendU32(b, uint32(m.Site))
		b = appendKeyValues(b, m.Objects)
		b = appendVector(b, m.Vector)
	case *Moved:
		if m == nil {
			break
		}
		b = append(b, msgMoved)
		b = appendU32(b, uint32(m.Site))
		b = appendConfig(b, &m.Config)
	default:
		return dst, fmt.Errorf("wire: cannot encode message of type %T", m)
	}
	if len(b) == start {
		return dst, fmt.Errorf("wire: cannot encode nil %T", m)
	}
	if n := len(b) - start; n > FrameSizeMax {
		return dst, fmt.Errorf("%w: %s payload is %d bytes, over the %d-byte limit",
			ErrTooLarge, MessageName(m), n, FrameSizeMax)
	}
	return b, nil
}

func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

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
	return binary.AppendUvarint(b, uint64(m.FromSite))
}

func appendKeyValues(b []byte, kvs []KeyValue) []byte {
	b = binary.AppendUvarint(b, uint64(len(kvs)))
	for i := range kvs {
		kv := &kvs[i]
		b = appendString(b, kv.Key)
		b = appendBytes(b, kv.Value)
		b = appendBool(b, kv.Deleted)
		b = appendStamp(b, &kv.Stamp)
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
	b = appendString(b, g.Keyspace)
	b = appendString(b, g.Prefix)
	return append(b, byte(g.Access))
}

func appendAuthChange(b []byte, c *AuthChange) []byte {
	b = append(b, byte(c.Op))
	b = appendString(b, c.User)
	b = appendString(b, c.Role)
	b = appendString(b, c.PasswordHash)
	b = appendStrings(b, c.Roles)
	return appendGrant(b, &c.Grant)
}

func appendAuthTable(b []byte, t *AuthTable) []byte {
	b = binary.AppendUvarint(b, t.Version)
	b = binary.AppendUvarint(b, uint64(len(t.Users)))
	for i := range t.Users {
		u := &t.Users[i]
		b = appendString(b, u.Name)
		b = appendString(b, u.PasswordHash)
		b = appendStrings(b, u.Roles)
	}
	b = binary.AppendUvarint(b, uint64(len(t.Roles)))
	for i := range t.Roles {
		r := &t.Roles[i]
		b = appendString(b, r.Name)
		b = binary.AppendUvarint(b, uint64(len(r.Grants)))
		for j := range r.Grants {
			b = appendGrant(b, &r.Grants[j])
		}
	}
	return b
}

func appendStamp(b []byte, s *Stamp) []byte {
	b = appendU32(b, uint32(s.Origin))
	b = binary.AppendUvarint(b, s.N)
	return binary.AppendUvarint(b, s.TS)
}

func appendTransferID(b []byte, t TransferID) []byte {
	b = binary.AppendUvarint(b, t.Incarnation)
	return binary.AppendUvarint(b, t.Attempt)
}

func appendDeps(b []byte, deps []Dep) []byte {
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for i := range deps {
		b = appendString(b, deps[i].Key)
		b = appendU32(b, uint32(deps[i].Origin))
		b = binary.AppendUvarint(b, deps[i].N)
	}
	return b
}

func appendVector(b []byte, v Vector) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	for _, e := range v {
		b = appendU32(b, uint32(e.Site))
		b = binary.AppendUvarint(b, e.N)
	}
	return b
}

func appendSites(b []byte, sites []Site) []byte {
	b = binary.AppendUvarint(b, uint64(len(sites)))
	for i := range sites {
		st := &sites[i]
		b = appendU32(b, uint32(st.ID))
		b = appendString(b, st.Name)
		b = appendNodeIDs(b, st.Masters)
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
	b = appendU32(b, uint32(c.Volume))
	b = binary.AppendUvarint(b, uint64(c.Epoch))
	b = binary.AppendUvarint(b, uint64(len(c.Chain)))
	for _, id := range c.Chain {
		b = appendString(b, string(id))
	}
	b = appendString(b, string(c.Joining))
	b = append(b, configFlags(c))
	b = binary.AppendVarint(b, int64(c.K))
	return appendSiteIDs(b, c.Sites)
}

// A Config's flags byte; Fresh alone encodes as the bool it once was.
// Bits 2 and 3 hold the Mode, so a strong volume's configuration encodes
// as it did before configurations named their mode.
const (
	configFresh byte = 1 << iota
	configMoved
	configModeShift = 2
	configModeMask  = 3 << configModeShift
)

func configFlags(c *Config) byte {
	f := byte(c.Mode) << configModeShift
	if c.Fresh {
		f |= configFresh
	}
	if c.Moved {
		f |= configMoved
	}
	return f
}

func appendKeyspace(b []byte, k *Keyspace) []byte {
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
	return appendSiteIDs(b, k.Reassign.Sites)
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
	b = append(b, byte(o.Kind))
	b = appendString(b, o.Key)
	b = appendBytes(b, o.Value)
	b = appendBytes(b, o.Expected)
	b = appendBool(b, o.ExpectAbsent)
	return binary.AppendVarint(b, o.Delta)
}

func appendResult(b []byte, r *Result) []byte {
	b = append(b, byte(r.Status))
	b = appendBool(b, r.Found)
	b = appendBytes(b, r.Value)
	b = binary.AppendUvarint(b, uint64(r.SN))
	return appendStamp(b, &r.Stamp)
}

func appendUpdate(b []byte, u *Update) []byte {
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
	return binary.AppendUvarint(b, uint64(u.Epoch))
}

func appendSessionRecord(b []byte, s *SessionRecord) []byte {
	b = binary.AppendUvarint(b, uint64(s.Client))
	b = binary.AppendUvarint(b, s.AckedBelow)
	b = binary.AppendUvarint(b, uint64(s.LastSN))
	b = binary.AppendUvarint(b, uint64(len(s.Outcomes)))
	for i := range s.Outcomes {
		o := &s.Outcomes[i]
		b = binary.AppendUvarint(b, o.ReqNo)
		b = appendResult(b, &o.Result)
	}
	return b
}

func appendVolumeStatuses(b []byte, vs []VolumeStatus) []byte {
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for i := range vs {
		v := &vs[i]
		b = appendU32(b, uint32(v.Volume))
		b = binary.AppendUvarint(b, uint64(v.Epoch))
		b = binary.AppendUvarint(b, uint64(v.AppliedSN))
		b = binary.AppendUvarint(b, uint64(v.CommittedSN))
		b = appendBool(b, v.JoinerReady)
		b = appendBool(b, v.Complete)
		b = appendVector(b, v.Stable)
		b = appendVector(b, v.Shipped)
		b = binary.AppendVarint(b, int64(v.StalledFor))
	}
	return b
}

// Unmarshal decodes one payload produced by Marshal. The result never
// aliases b. Errors wrap ErrMalformed (or ErrTooLarge for len(b) >
// FrameSizeMax); Unmarshal does not panic on any input.
func Unmarshal(b []byte) (Message, error) {
	if len(b) > FrameSizeMax {
		return nil, fmt.Errorf("%w: payload is %d bytes, over the %d-byte limit",
			ErrTooLarge, len(b), FrameSizeMax)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty payload", ErrMalformed)
	}
	t := b[0]
	if int(t) >= len(msgNames) || msgNames[t] == "" {
		return nil, fmt.Errorf("%w: unknown message type %d", ErrMalformed, t)
	}
	d := decoder{b: b[1:], msg: msgNames[t]}
	var m Message
	switch t {
	case msgClientRequest:
		x := &ClientRequest{}
		d.clientRequest(x)
		m = x
	case msgClientReply:
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
		m = x
	case msgQueryUp:
		x := &QueryUp{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.ReplyTo = NodeID(d.string("ReplyTo"))
		prev := d.nest("Request")
		d.clientRequest(&x.Request)
		d.prefix = prev
		m = x
	case msgForward:
		x := &Forward{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.Updates = d.updates("Updates")
		m = x
	case msgShip:
		x := &Ship{}
		x.Volume = d.volume("Volume")
		x.Origin = SiteID(d.volume("Origin"))
		x.OriginVolume = d.volume("OriginVolume")
		x.Updates = d.updates("Updates")
		x.Cluster = d.string("Cluster")
		x.Sender = SiteID(d.volume("Sender"))
		x.View = d.uvarint("View")
		m = x
	case msgShipAck:
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
		m = x
	case msgAck:
		x := &Ack{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.SN = SN(d.uvarint("SN"))
		x.Shipped = d.uvarint("Shipped")
		x.ShippedTo = d.vector("ShippedTo")
		x.Relayed = d.vector("Relayed")
		m = x
	case msgSyncRequest:
		x := &SyncRequest{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.AppliedSN = SN(d.uvarint("AppliedSN"))
		x.CommittedSN = SN(d.uvarint("CommittedSN"))
		x.NeedSnapshot = d.bool("NeedSnapshot")
		x.AppliedEpoch = Epoch(d.uvarint("AppliedEpoch"))
		x.Transfer = d.transferID()
		m = x
	case msgSyncReply:
		x := &SyncReply{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.PredecessorAppliedSN = SN(d.uvarint("PredecessorAppliedSN"))
		x.PredecessorComplete = d.bool("PredecessorComplete")
		x.CatchUp = d.bool("CatchUp")
		x.Transfer = d.transferID()
		x.PredecessorDurableSN = SN(d.uvarint("PredecessorDurableSN"))
		m = x
	case msgDurable:
		x := &Durable{}
		x.Volume = d.volume("Volume")
		x.Epoch = Epoch(d.uvarint("Epoch"))
		x.SN = SN(d.uvarint("SN"))
		m = x
	case msgSnapshotChunk:
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
		m = x
	case msgHeartbeat:
		x := &Heartbeat{}
		x.Incarnation = d.uvarint("Incarnation")
		x.SentAt = Time(d.varint("SentAt"))
		x.Volumes = d.volumeStatuses("Volumes", "Volumes")
		x.Heard = Time(d.varint("Heard"))
		x.AuthVersion = d.uvarint("AuthVersion")
		x.NewDataDir = d.bool("NewDataDir")
		m = x
	case msgHeartbeatReply:
		x := &HeartbeatReply{}
		x.SentAt = Time(d.varint("SentAt"))
		x.LeaseGranted = d.bool("LeaseGranted")
		x.LeaseFor = Time(d.varint("LeaseFor"))
		x.Configs = d.configs("Configs")
		x.Keyspaces = d.keyspaces("Keyspaces")
		x.Sites = d.sites("Sites")
		if n := d.count("Stable", minVolumeVector); n > 0 {
			x.Stable = make([]VolumeVector, n)
			prev := d.nest("Stable")
			for i := range x.Stable {
				x.Stable[i].Volume = d.volume("Volume")
				x.Stable[i].Vector = d.vector("Vector")
			}
			d.prefix = prev
		}
		x.Cluster = d.string("Cluster")
		if d.bool("Auth") {
			x.Auth = &AuthTable{}
			d.authTable(x.Auth, "Auth")
		}
		x.Returning = d.bool("Returning")
		m = x
	case msgNewConfig:
		x := &NewConfig{}
		d.config(&x.Config, "Config")
		m = x
	case msgConfigRequest:
		m = &ConfigRequest{Cluster: d.string("Cluster")}
	case msgConfigReply:
		x := &ConfigReply{}
		x.Configs = d.configs("Configs")
		x.Masters = d.nodeIDs("Masters")
		x.Leader = NodeID(d.string("Leader"))
		x.Keyspaces = d.keyspaces("Keyspaces")
		x.Cluster = d.string("Cluster")
		m = x
	case msgKeyspaceRequest:
		x := &KeyspaceRequest{}
		d.keyspace(&x.Create, "Create")
		if d.bool("Override") {
			x.Override = &OverrideRequest{}
			x.Override.Keyspace = d.string("Override.Keyspace")
			x.Override.Reassign = d.bool("Override.Reassign")
			x.Override.Override.Generation = d.uvarint("Override.Generation")
			x.Override.Override.Sites = d.siteIDs("Override.Sites")
		}
		m = x
	case msgKeyspaceReply:
		x := &KeyspaceReply{}
		x.Err = d.string("Err")
		x.Keyspaces = d.keyspaces("Keyspaces")
		m = x
	case msgStatusRequest:
		m = &StatusRequest{}
	case msgStatusReply:
		x := &StatusReply{}
		x.Configs = d.configs("Configs")
		if n := d.count("Servers", minServerStatus); n > 0 {
			x.Servers = make([]ServerStatus, n)
			for i := range x.Servers {
				d.serverStatus(&x.Servers[i])
			}
		}
		x.Masters = d.nodeIDs("Masters")
		x.Leader = NodeID(d.string("Leader"))
		x.Keyspaces = d.keyspaces("Keyspaces")
		x.Site = SiteID(d.volume("Site"))
		x.Sites = d.sites("Sites")
		x.Cluster = d.string("Cluster")
		m = x
	case msgHello:
		m = &Hello{From: NodeID(d.string("From"))}
	case msgPeerReset:
		m = &PeerReset{Peer: NodeID(d.string("Peer"))}
	case msgRaftMessage:
		m = &RaftMessage{Data: d.bytes("Data")}
	case msgAuthRequest:
		x := &AuthRequest{}
		x.ID = d.uvarint("ID")
		d.authChange(&x.Change)
		m = x
	case msgAuthReply:
		x := &AuthReply{}
		x.ID = d.uvarint("ID")
		x.Err = d.string("Err")
		d.authTable(&x.Table, "Table")
		m = x
	case msgNewAuth:
		x := &NewAuth{}
		d.authTable(&x.Table, "Table")
		m = x
	case msgControl:
		x := &Control{}
		x.Kind = ControlKind(d.byte("Kind"))
		x.Keyspace = d.string("Keyspace")
		x.Domain = uint32(d.volume("Domain"))
		x.From = SiteID(d.volume("From"))
		x.To = SiteID(d.volume("To"))
		x.Ballot.N = d.uvarint("Ballot.N")
		x.Ballot.Site = SiteID(d.volume("Ballot.Site"))
		x.Path = d.string("Path")
		x.Deep = d.bool("Deep")
		x.Granted = d.bool("Granted")
		x.Holder = SiteID(d.volume("Holder"))
		x.HolderBallot.N = d.uvarint("HolderBallot.N")
		x.HolderBallot.Site = SiteID(d.volume("HolderBallot.Site"))
		x.Err = ErrCode(d.byte("Err"))
		x.View.N = d.uvarint("View.N")
		x.View.Members = d.siteIDs("View.Members")
		x.Vector = d.vector("Vector")
		m = x
	case msgFetch:
		x := &Fetch{}
		x.Volume = d.volume("Volume")
		x.Site = SiteID(d.volume("Site"))
		x.OriginVolume = d.volume("OriginVolume")
		x.Keys = d.strings("Keys")
		x.Cluster = d.string("Cluster")
		m = x
	case msgFetched:
		x := &Fetched{}
		x.Volume = d.volume("Volume")
		x.Site = SiteID(d.volume("Site"))
		x.Objects = d.keyValues("Objects")
		x.Vector = d.vector("Vector")
		m = x
	case msgMoved:
		x := &Moved{}
		x.Site = SiteID(d.volume("Site"))
		d.config(&x.Config, "Config")
		m = x
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, d.msg, len(d.b))
	}
	return m, nil
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
		d.err = fmt.Errorf("%w: %s%s: %s", ErrMalformed, name, field, fmt.Sprintf(format, args...))
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
	case flags&^(configFresh|configMoved|configModeMask) != 0:
		d.fail("Flags", "unknown flags %#x", flags)
	case Mode(flags&configModeMask>>configModeShift) > ModeHierarchical:
		d.fail("Flags", "unknown mode %d", flags&configModeMask>>configModeShift)
	default:
		c.Fresh, c.Moved = flags&configFresh != 0, flags&configMoved != 0
		c.Mode = Mode(flags & configModeMask >> configModeShift)
	}
	c.K = d.int("K")
	c.Sites = d.siteIDs("Sites")
	d.prefix = prev
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
	c.Op = AuthOp(d.byte("Op"))
	c.User = d.string("User")
	c.Role = d.string("Role")
	c.PasswordHash = d.string("PasswordHash")
	c.Roles = d.strings("Roles")
	c.Grant.Keyspace = d.string("Grant.Keyspace")
	c.Grant.Prefix = d.string("Grant.Prefix")
	c.Grant.Access = Access(d.byte("Grant.Access"))
	d.prefix = prev
}

// authTable decodes an AuthTable; field names it in errors.
func (d *decoder) authTable(t *AuthTable, field string) {
	prev := d.nest(field)
	t.Version = d.uvarint("Version")
	if n := d.count("Users", minUser); n > 0 {
		t.Users = make([]User, n)
		for i := range t.Users {
			u := &t.Users[i]
			u.Name = d.string("Users.Name")
			u.PasswordHash = d.string("Users.PasswordHash")
			u.Roles = d.strings("Users.Roles")
		}
	}
	if n := d.count("Roles", minRole); n > 0 {
		t.Roles = make([]Role, n)
		for i := range t.Roles {
			r := &t.Roles[i]
			r.Name = d.string("Roles.Name")
			if n := d.count("Roles.Grants", minGrant); n > 0 {
				r.Grants = make([]Grant, n)
				for j := range r.Grants {
					g := &r.Grants[j]
					g.Keyspace = d.string("Roles.Grants.Keyspace")
					g.Prefix = d.string("Roles.Grants.Prefix")
					g.Access = Access(d.byte("Roles.Grants.Access"))
				}
			}
		}
	}
	d.prefix = prev
}

func (d *decoder) stamp(s *Stamp, field string) {
	prev := d.nest(field)
	s.Origin = SiteID(d.volume("Origin"))
	s.N = d.uvarint("N")
	s.TS = d.uvarint("TS")
	d.prefix = prev
}

func (d *decoder) transferID() TransferID {
	prev := d.nest("Transfer")
	t := TransferID{Incarnation: d.uvarint("Incarnation"), Attempt: d.uvarint("Attempt")}
	d.prefix = prev
	return t
}

func (d *decoder) deps(field string) []Dep {
	n := d.count(field, minDep)
	if n == 0 {
		return nil
	}
	deps := make([]Dep, n)
	for i := range deps {
		deps[i].Key = d.string(field)
		deps[i].Origin = SiteID(d.volume(field))
		deps[i].N = d.uvarint(field)
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
		v[i].Site = SiteID(d.volume(field))
		v[i].N = d.uvarint(field)
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
		st.ID = SiteID(d.volume("ID"))
		st.Name = d.string("Name")
		st.Masters = d.nodeIDs("Masters")
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
	d.prefix = prev
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
	o.Kind = OpKind(d.byte("Kind"))
	o.Key = d.string("Key")
	o.Value = d.bytes("Value")
	o.Expected = d.bytes("Expected")
	o.ExpectAbsent = d.bool("ExpectAbsent")
	o.Delta = d.varint("Delta")
	d.prefix = prev
}

// result decodes a Result; field names it in errors.
func (d *decoder) result(r *Result, field string) {
	prev := d.nest(field)
	r.Status = Status(d.byte("Status"))
	r.Found = d.bool("Found")
	r.Value = d.bytes("Value")
	r.SN = SN(d.uvarint("SN"))
	d.stamp(&r.Stamp, field+".Stamp")
	d.prefix = prev
}

func (d *decoder) update(u *Update) {
	prev := d.nest("Updates")
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
	d.prefix = prev
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
	kv.Key = d.string("Key")
	kv.Value = d.bytes("Value")
	kv.Deleted = d.bool("Deleted")
	d.stamp(&kv.Stamp, "Objects.Stamp")
	d.prefix = prev
}

func (d *decoder) sessionRecord(s *SessionRecord) {
	prev := d.nest("Sessions")
	s.Client = ClientID(d.uvarint("Client"))
	s.AckedBelow = d.uvarint("AckedBelow")
	s.LastSN = SN(d.uvarint("LastSN"))
	if n := d.count("Outcomes", minOutcome); n > 0 {
		s.Outcomes = make([]Outcome, n)
		for i := range s.Outcomes {
			o := &s.Outcomes[i]
			d.prefix = "Sessions.Outcomes"
			o.ReqNo = d.uvarint("ReqNo")
			d.result(&o.Result, "Sessions.Outcomes.Result")
		}
	}
	d.prefix = prev
}

func (d *decoder) serverStatus(s *ServerStatus) {
	prev := d.nest("Servers")
	s.ID = NodeID(d.string("ID"))
	s.Alive = d.bool("Alive")
	s.Incarnation = d.uvarint("Incarnation")
	s.Volumes = d.volumeStatuses("Volumes", "Servers.Volumes")
	d.prefix = prev
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
		v.Volume = d.volume("Volume")
		v.Epoch = Epoch(d.uvarint("Epoch"))
		v.AppliedSN = SN(d.uvarint("AppliedSN"))
		v.CommittedSN = SN(d.uvarint("CommittedSN"))
		v.JoinerReady = d.bool("JoinerReady")
		v.Complete = d.bool("Complete")
		v.Stable = d.vector("Stable")
		v.Shipped = d.vector("Shipped")
		v.StalledFor = Time(d.varint("StalledFor"))
	}
	d.prefix = prev
	return vs
}

// WriteFrame writes m to w as one frame: a 4-byte big-endian payload length,
// then the payload. It does not flush w. When m cannot be encoded nothing is
// written.
func WriteFrame(w *bufio.Writer, m Message) error {
	// Encode straight into w's free buffer space when it is large enough
	// (append reallocates otherwise).
	b := append(w.AvailableBuffer(), 0, 0, 0, 0)
	b, err := AppendMessage(b, m)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-frameHeaderSize))
	_, err = w.Write(b)
	return err
}

// ReadFrame reads one frame from r and decodes it. buf is a scratch buffer
// (possibly nil) that is grown as needed and returned for reuse by the next
// call; the message does not alias it. At a clean end of stream ReadFrame
// returns io.EOF; a frame cut short gives io.ErrUnexpectedEOF. Lengths of 0
// or above FrameSizeMax are rejected (ErrMalformed, ErrTooLarge) before
// anything is allocated; the stream is then unusable.
func ReadFrame(r *bufio.Reader, buf []byte) (Message, []byte, error) {
	if cap(buf) < frameHeaderSize {
		buf = make([]byte, 0, 512)
	}
	hdr := buf[:frameHeaderSize]
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr)
	switch {
	case n == 0:
		return nil, buf, fmt.Errorf("%w: frame of length 0", ErrMalformed)
	case n > FrameSizeMax:
		return nil, buf, fmt.Errorf("%w: frame of %d bytes, over the %d-byte limit", ErrTooLarge, n, FrameSizeMax)
	}
	if uint64(cap(buf)) < uint64(n) {
		buf = make([]byte, n)
	}
	payload := buf[:n]
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, err
	}
	m, err := Unmarshal(payload)
	return m, buf, err
}
