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
//   - nested structs, and the elements of slices of structs, are framed:
//     a uvarint byte length, then their fields (docs/adr/0026).
//
// The encoding of each message (→ marks a framed struct, [] a counted
// slice, whose struct elements are framed too):
//
//	1  ClientRequest  Volume Epoch Client ReqNo AckedBelow ExpectSession →Op MinVersion Keyspaces []Dep TS User FromSite Sites
//	2  ClientReply    Volume Client ReqNo Err →Result present? →Config Epoch Position Stable []SiteID(Sites)
//	3  Forward        Volume Epoch []Update
//	4  Ack            Volume Epoch SN Shipped →Vector(ShippedTo) →Vector(Relayed)
//	5  SyncRequest    Volume Epoch AppliedSN CommittedSN NeedSnapshot AppliedEpoch →Transfer
//	6  SyncReply      Volume Epoch PredecessorAppliedSN PredecessorComplete CatchUp →Transfer PredecessorDurableSN
//	7  SnapshotChunk  Volume Epoch SnapshotSN Seq []KeyValue []SessionRecord Last →Vector []Update(ShipLog) SnapshotEpoch [Split.Into Split.SN Split.Epoch]
//	8  Heartbeat      Incarnation SentAt []VolumeStatus Heard AuthVersion NewDataDir MinProtocol MaxProtocol
//	9  HeartbeatReply SentAt LeaseGranted LeaseFor []Config []Keyspace []Site []VolumeVector(Stable) Cluster present? →AuthTable Returning ClusterVersion [WallTime]
//	10 NewConfig      →Config
//	11 ConfigRequest  Cluster
//	12 ConfigReply    []Config []NodeID(Masters) Leader
//	13 StatusRequest  (nothing)
//	14 StatusReply    []Config []ServerStatus []NodeID(Masters) Leader []Keyspace Site []Site Cluster ClusterVersion
//	15 Hello          From MinProtocol MaxProtocol
//	16 PeerReset      Peer
//	17 RaftMessage    Data
//	18 QueryUp        Volume Epoch ReplyTo →ClientRequest (its fields, no type byte)
//	19 KeyspaceRequest →Keyspace present? Override.Keyspace Override.Reassign Override.Generation []SiteID [Split]
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
//	31 VersionRequest Finalize
//	32 VersionReply   Err Release MinProtocol MaxProtocol ClusterVersion Leader
//
// ConfigReply ends with []Keyspace Cluster [ClusterVersion].
//
// Fields in brackets were appended after release 0.1.0 (protocol 2,
// docs/adr/0028): they are written only when not zero, so a message
// without them is encoded as release 0.1.0 encoded it, and decoded only
// when bytes are left.
//
//	Config        Volume Epoch []NodeID Joining Flags(Fresh 1, Moved 2, Mode 4+8, FromSplit 16) K []SiteID(Sites) [Split.Into Split.Epoch Split.Modulus Split.Keep]
//	Keyspace      Name Prefix Mode K ReplicationFactor FirstVolume Volumes []SiteID(Sites) PartitionDepth Relaxed Idle Grace.Generation []SiteID(Grace.Sites) Reassign.Generation []SiteID(Reassign.Sites) [Splits []VolumeID(VolumeIDs)]
//	Op            Kind Key Value Expected ExpectAbsent Delta [Expires TTL Expiry]
//	Result        Status Found Value SN →Stamp [Expires Type]
//	Update        SN Key Changed Deleted Value Client ReqNo AckedBelow ReplyTo →Result →Stamp []Dep Epoch [Expires Type]
//	KeyValue      Key Value Deleted →Stamp [Expires Type]
//	Stamp         Origin N TS
//	TransferID    Incarnation Attempt
//	View          N []SiteID(Members)
//	Dep           Key Origin N
//	Vector        []SiteCount: Site N (increasing sites, no zero count)
//	SiteTime      Site Age
//	Site          ID Name []NodeID(Masters)
//	VolumeVector  Volume →Vector
//	SessionRecord Client AckedBelow LastSN []Outcome
//	Outcome       ReqNo →Result
//	VolumeStatus  Volume Epoch AppliedSN CommittedSN JoinerReady Complete →Vector(Stable) →Vector(Shipped) StalledFor []PathControl(Control) []SiteTime(ShippingAge) [Split.Into Split.SN Split.Epoch Watches]
//	PathControl   Path Site Deep
//	ServerStatus  ID Alive Incarnation []VolumeStatus MinProtocol MaxProtocol
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
// # Evolution
//
// Since release 0.1.0 (the base release, docs/upgrades.md) the format
// changes only by appending: a new field goes at the end of its message
// or struct, its zero value meaning what older releases did, and is
// decoded only when bytes are left (`if len(d.b) > 0`); no field is
// removed, reordered or re-encoded, and no type byte renumbered. A
// release may leave its appended fields out while they are all zero, so
// a message that uses nothing new reads the same to older releases. Bytes
// after the fields a release knows, at the end of a message or of a
// framed struct, are a newer release's fields and are skipped; a new
// message type is ErrUnknownMessage to older releases, which drop it. A
// behaviour older releases cannot follow waits for the cluster version
// (docs/adr/0026). The frozen corpora (testdata/corpus) hold every
// message of each release, and every later release must decode them.
//
// Decoding is otherwise strict: Unmarshal rejects truncated input (a
// message or struct ending inside or before one of its base fields),
// unknown type bytes (ErrUnknownMessage), bools and presence bytes other
// than 0 and 1, integers out of their type's range, and lengths or counts
// that the remaining input cannot hold. It never allocates more than the input could describe, and the
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
	// ErrUnknownMessage is wrapped by errors reporting a payload whose
	// type byte names no message this version knows: perhaps a newer
	// release's. Its frame was read whole, so a stream stays usable: a
	// receiver drops the message and reads on (docs/adr/0026, step 3).
	ErrUnknownMessage = errors.New("wire: unknown message type")
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
	msgVersionRequest  byte = 31
	msgVersionReply    byte = 32
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
	msgVersionRequest:  "VersionRequest",
	msgVersionReply:    "VersionReply",
}

// Minimum encoded sizes of slice elements: every field at its shortest (one
// byte per integer, bool, length or count), plus the length byte of each
// framed struct. A count is rejected when count * min exceeds the remaining
// input, which bounds allocations by the input. TestMinSizes checks them
// against the encoding of zero values.
const (
	minNodeID        = 1                                // length
	minConfig        = 1 + 7                            // Volume Epoch count Joining Fresh K count
	minKeyspace      = 1 + 15                           // Name Prefix Mode K ReplicationFactor FirstVolume Volumes count PartitionDepth Relaxed Idle Grace.Generation count Reassign.Generation count
	minStamp         = 1 + 3                            // Origin N TS
	minResult        = 1 + 4 + minStamp                 // Status Found Value SN Stamp
	minUpdate        = 1 + 9 + minResult + minStamp + 2 // ... count(Deps) Epoch
	minKeyValue      = 1 + 3 + minStamp                 // Key Value Deleted Stamp
	minOutcome       = 1 + 1 + minResult                // ReqNo Result
	minSessionRecord = 1 + 4                            // Client AckedBelow LastSN count
	minVolumeStatus  = 1 + 11                           // Volume Epoch AppliedSN CommittedSN JoinerReady Complete count count StalledFor count count
	minPathControl   = 1 + 3                            // Path Site Deep
	minServerStatus  = 1 + 6                            // ID Alive Incarnation count MinProtocol MaxProtocol
	minDep           = 1 + 3                            // Key Origin N
	minSiteCount     = 1 + 2                            // Site N
	minSiteTime      = 1 + 2                            // Site Age
	minSite          = 1 + 3                            // ID Name count
	minVolumeVector  = 1 + 2                            // Volume count
	minSiteID        = 1
	minString        = 1     // length
	minUser          = 1 + 3 // Name PasswordHash count
	minRole          = 1 + 2 // Name count
	minGrant         = 1 + 3 // Keyspace Prefix Access
)

// Marshal returns the payload encoding m: its type byte and its fields.
func Marshal(m Message) ([]byte, error) {
	return AppendMessage(nil, m)
}

// AppendMessage appends the payload encoding m to dst and returns the
// extended buffer. On error it returns dst unchanged (but its spare capacity
// may have been written). Each message's fields are encoded by its append
// function, beside its decode function in the codec file of its group
// (codec_chain.go, codec_master.go, codec_sites.go, or below).
func AppendMessage(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	b := dst
	switch m := m.(type) {
	case *ClientRequest:
		b = appendPayload(b, msgClientRequest, m, appendClientRequest)
	case *ClientReply:
		b = appendPayload(b, msgClientReply, m, appendClientReply)
	case *Forward:
		b = appendPayload(b, msgForward, m, appendForward)
	case *Ack:
		b = appendPayload(b, msgAck, m, appendAck)
	case *SyncRequest:
		b = appendPayload(b, msgSyncRequest, m, appendSyncRequest)
	case *SyncReply:
		b = appendPayload(b, msgSyncReply, m, appendSyncReply)
	case *SnapshotChunk:
		b = appendPayload(b, msgSnapshotChunk, m, appendSnapshotChunk)
	case *Heartbeat:
		b = appendPayload(b, msgHeartbeat, m, appendHeartbeat)
	case *HeartbeatReply:
		b = appendPayload(b, msgHeartbeatReply, m, appendHeartbeatReply)
	case *NewConfig:
		b = appendPayload(b, msgNewConfig, m, appendNewConfig)
	case *ConfigRequest:
		b = appendPayload(b, msgConfigRequest, m, appendConfigRequest)
	case *ConfigReply:
		b = appendPayload(b, msgConfigReply, m, appendConfigReply)
	case *StatusRequest:
		b = appendPayload(b, msgStatusRequest, m, appendStatusRequest)
	case *StatusReply:
		b = appendPayload(b, msgStatusReply, m, appendStatusReply)
	case *Hello:
		b = appendPayload(b, msgHello, m, appendHello)
	case *PeerReset:
		b = appendPayload(b, msgPeerReset, m, appendPeerReset)
	case *RaftMessage:
		b = appendPayload(b, msgRaftMessage, m, appendRaftMessage)
	case *QueryUp:
		b = appendPayload(b, msgQueryUp, m, appendQueryUp)
	case *KeyspaceRequest:
		b = appendPayload(b, msgKeyspaceRequest, m, appendKeyspaceRequest)
	case *KeyspaceReply:
		b = appendPayload(b, msgKeyspaceReply, m, appendKeyspaceReply)
	case *Ship:
		b = appendPayload(b, msgShip, m, appendShip)
	case *ShipAck:
		b = appendPayload(b, msgShipAck, m, appendShipAck)
	case *AuthRequest:
		b = appendPayload(b, msgAuthRequest, m, appendAuthRequest)
	case *AuthReply:
		b = appendPayload(b, msgAuthReply, m, appendAuthReply)
	case *NewAuth:
		b = appendPayload(b, msgNewAuth, m, appendNewAuth)
	case *Control:
		b = appendPayload(b, msgControl, m, appendControl)
	case *Fetch:
		b = appendPayload(b, msgFetch, m, appendFetch)
	case *Fetched:
		b = appendPayload(b, msgFetched, m, appendFetched)
	case *Moved:
		b = appendPayload(b, msgMoved, m, appendMoved)
	case *Durable:
		b = appendPayload(b, msgDurable, m, appendDurable)
	case *VersionRequest:
		b = appendPayload(b, msgVersionRequest, m, appendVersionRequest)
	case *VersionReply:
		b = appendPayload(b, msgVersionReply, m, appendVersionReply)
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

// appendPayload appends m's type byte t, then its fields as appendFields
// encodes them. A nil m appends nothing.
func appendPayload[M any](b []byte, t byte, m *M, appendFields func([]byte, *M) []byte) []byte {
	if m == nil {
		return b
	}
	return appendFields(append(b, t), m)
}

// Unmarshal decodes one payload produced by Marshal. The result never
// aliases b. Errors wrap ErrMalformed, ErrTooLarge for len(b) >
// FrameSizeMax, or ErrUnknownMessage for a type byte this version does
// not know; Unmarshal does not panic on any input.
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
		return nil, fmt.Errorf("%w %d", ErrUnknownMessage, t)
	}
	d := decoder{b: b[1:], msg: msgNames[t]}
	m := messageDecoders[t](&d)
	if d.err != nil {
		return nil, d.err
	}
	// Bytes after the fields this release knows are a newer release's
	// appended fields: skipped, as within a framed struct.
	return m, nil
}

// messageDecoders decodes each message type's fields, by type byte; every
// type byte msgNames names has one.
var messageDecoders = [...]func(*decoder) Message{
	msgClientRequest:   decodeClientRequest,
	msgClientReply:     decodeClientReply,
	msgForward:         decodeForward,
	msgAck:             decodeAck,
	msgSyncRequest:     decodeSyncRequest,
	msgSyncReply:       decodeSyncReply,
	msgSnapshotChunk:   decodeSnapshotChunk,
	msgHeartbeat:       decodeHeartbeat,
	msgHeartbeatReply:  decodeHeartbeatReply,
	msgNewConfig:       decodeNewConfig,
	msgConfigRequest:   decodeConfigRequest,
	msgConfigReply:     decodeConfigReply,
	msgStatusRequest:   decodeStatusRequest,
	msgStatusReply:     decodeStatusReply,
	msgHello:           decodeHello,
	msgPeerReset:       decodePeerReset,
	msgRaftMessage:     decodeRaftMessage,
	msgQueryUp:         decodeQueryUp,
	msgKeyspaceRequest: decodeKeyspaceRequest,
	msgKeyspaceReply:   decodeKeyspaceReply,
	msgShip:            decodeShip,
	msgShipAck:         decodeShipAck,
	msgAuthRequest:     decodeAuthRequest,
	msgAuthReply:       decodeAuthReply,
	msgNewAuth:         decodeNewAuth,
	msgControl:         decodeControl,
	msgFetch:           decodeFetch,
	msgFetched:         decodeFetched,
	msgMoved:           decodeMoved,
	msgDurable:         decodeDurable,
	msgVersionRequest:  decodeVersionRequest,
	msgVersionReply:    decodeVersionReply,
}

// The transport's own messages.

// appendHello appends a Hello's fields (no type byte).
func appendHello(b []byte, m *Hello) []byte {
	b = appendString(b, string(m.From))
	b = appendU32(b, m.MinProtocol)
	return appendU32(b, m.MaxProtocol)
}

// decodeHello decodes a Hello's fields.
func decodeHello(d *decoder) Message {
	return &Hello{From: NodeID(d.string("From")), MinProtocol: uint32(d.volume("MinProtocol")), MaxProtocol: uint32(d.volume("MaxProtocol"))}
}

// appendPeerReset appends a PeerReset's fields (no type byte).
func appendPeerReset(b []byte, m *PeerReset) []byte {
	b = appendString(b, string(m.Peer))
	return b
}

// decodePeerReset decodes a PeerReset's fields.
func decodePeerReset(d *decoder) Message {
	return &PeerReset{Peer: NodeID(d.string("Peer"))}
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
// anything is allocated; the stream is then unusable. After
// ErrUnknownMessage it is not: the frame was read whole.
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
