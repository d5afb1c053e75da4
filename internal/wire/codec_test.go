package wire

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func testConfig(v VolumeID) Config {
	return Config{
		Volume:  v,
		Epoch:   Epoch(7 + v),
		Chain:   []NodeID{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
		Joining: "10.0.0.4:7000",
		Mode:    ModeCausal,
		K:       2,
		Sites:   []SiteID{1, 3},
	}
}

func testKeyspace(first VolumeID) Keyspace {
	return Keyspace{Name: "sessions", Prefix: "s/", Mode: ModeCausal, K: 2, ReplicationFactor: 3, FirstVolume: first, Volumes: 4, Sites: []SiteID{1, 2, 7}}
}

func testResult(sn SN) Result {
	return Result{Status: StatusCompareFailed, Found: true, Value: []byte("current"), SN: sn,
		Stamp: Stamp{Origin: 2, N: uint64(sn) + 1, TS: 1 << 45}}
}

func testUpdate(sn SN, valueSize int) Update {
	return Update{
		SN:         sn,
		Key:        "user:" + string(rune('a'+sn%26)),
		Changed:    true,
		Deleted:    true,
		Value:      bytes.Repeat([]byte{byte(sn)}, valueSize),
		Client:     ClientID(1<<40 + sn),
		ReqNo:      uint64(sn) * 3,
		AckedBelow: uint64(sn) * 2,
		ReplyTo:    "client-9:5000",
		Result:     testResult(sn),
		Stamp:      Stamp{Origin: 3, N: uint64(sn), TS: 1<<44 + uint64(sn)},
		Deps:       []Dep{{Key: "x", Origin: 1, N: 9}, {Key: "y", Origin: 3, N: 1 << 33}},
		Epoch:      Epoch(sn) + 1<<35,
	}
}

func testAuthTable() AuthTable {
	return AuthTable{Version: 1 << 40,
		Users: []User{{Name: "alice", PasswordHash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", Roles: []string{"admin", "readers"}},
			{Name: "bob", Roles: []string{"readers", "writers"}}},
		Roles: []Role{{Name: "readers", Grants: []Grant{{Keyspace: "orders", Access: AccessRead}, {Prefix: "pub/", Access: AccessRead}}},
			{Name: "writers", Grants: []Grant{{Access: AccessReadWrite}, {Keyspace: "k", Prefix: "p", Access: 9}}}},
	}
}

func testVolumeStatus(v VolumeID) VolumeStatus {
	return VolumeStatus{Volume: v, Epoch: 3, AppliedSN: 1000, CommittedSN: 998, JoinerReady: true, Complete: true,
		Stable: Vector{{Site: 1, N: 4}, {Site: 5, N: 1 << 40}}, Shipped: Vector{{Site: 5, N: 3}}, StalledFor: 1500 * Millisecond,
		ShippingAge: []SiteTime{{Site: 2, Age: 40 * Millisecond}, {Site: 5, Age: 0}}}
}

// testMessages holds at least one fully populated value (every field
// non-zero, slices of 2+ elements) of every message type, plus edge cases.
func testMessages() []struct {
	name string
	msg  Message
} {
	cfg := testConfig(2)
	auth := testAuthTable()
	return []struct {
		name string
		msg  Message
	}{
		{"ClientRequest", &ClientRequest{
			Volume: 1, Epoch: 2, Client: 3, ReqNo: 4, AckedBelow: 5, ExpectSession: true,
			Op: Op{Kind: OpCompareAndSet, Key: "k", Value: []byte("new"), Expected: []byte("old"),
				ExpectAbsent: true, Delta: -42},
			MinVersion: 6, Keyspaces: 3,
			Deps: []Dep{{Key: "a", Origin: 1, N: 2}, {Key: "b", Origin: 2, N: 3}}, TS: 1 << 50,
			User: "alice", FromSite: 3, Sites: 2,
		}},
		{"ClientRequest/extremes", &ClientRequest{
			Volume: math.MaxUint32, Epoch: math.MaxUint64, Client: math.MaxUint64,
			ReqNo: math.MaxUint64, AckedBelow: 1 << 63, ExpectSession: true,
			Op: Op{Kind: 255, Key: strings.Repeat("x", 300), Value: []byte{0}, Expected: []byte{0xff},
				ExpectAbsent: true, Delta: math.MinInt64},
		}},
		{"ClientReply/config", &ClientReply{
			Volume: 9, Client: 8, ReqNo: 7, Err: ErrWrongEpoch, Result: testResult(6), Config: &cfg,
			Epoch: 5, Position: 2, Stable: true,
		}},
		{"ClientReply/sites", &ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrKeyspaceMissing, Sites: []SiteID{1, 3}}},
		{"ClientReply/noconfig", &ClientReply{
			Volume: 9, Client: 8, ReqNo: 7, Err: ErrBadRequest, Result: testResult(6),
		}},
		{"Forward", &Forward{
			Volume: 4, Epoch: 5, Updates: []Update{testUpdate(1, 10), testUpdate(2, 1), testUpdate(300, 200)},
		}},
		{"Ack", &Ack{Volume: 1, Epoch: 2, SN: 1 << 50, Shipped: 77, ShippedTo: Vector{{Site: 2, N: 80}, {Site: 3, N: 77}}, Relayed: Vector{{Site: 3, N: 5}}}},
		{"Ship", &Ship{Volume: 7, Origin: 3, OriginVolume: 9, Updates: []Update{testUpdate(4, 3), testUpdate(5, 1)}, Cluster: "prod", Sender: 2}},
		{"ShipAck", &ShipAck{Volume: 7, Site: 3, Err: ErrNotHead, Received: 12, Stable: 10, Config: &cfg}},
		{"ShipAck/wrongcluster", &ShipAck{Volume: 7, Site: 3, Err: ErrWrongCluster}},
		{"ShipAck/noconfig", &ShipAck{Volume: 7, Site: 3, Received: 12, Stable: 10, Origin: 1}},
		{"Fetch", &Fetch{Volume: 7, Site: 3, OriginVolume: 9, Keys: []string{"src/a", "src/b"}, Cluster: "prod"}},
		{"Fetched", &Fetched{Volume: 9, Site: 1, Objects: []KeyValue{{Key: "src/a", Value: []byte("v"), Stamp: Stamp{Origin: 2, N: 4, TS: 9}},
			{Key: "src/b", Deleted: true}}, Vector: Vector{{Site: 2, N: 4}}}},
		{"Moved", &Moved{Site: 2, Config: cfg}},
		{"SyncRequest", &SyncRequest{Volume: 1, Epoch: 2, AppliedSN: 30, CommittedSN: 20, NeedSnapshot: true, AppliedEpoch: 2, Transfer: TransferID{Incarnation: 1_700_000_000_000_000, Attempt: 3}}},
		{"SyncReply", &SyncReply{Volume: 1, Epoch: 2, PredecessorAppliedSN: 99, PredecessorComplete: true, CatchUp: true, Transfer: TransferID{Incarnation: 5, Attempt: 1}, PredecessorDurableSN: 98}},
		{"Durable", &Durable{Volume: 1, Epoch: 2, SN: 1 << 40}},
		{"VersionRequest", &VersionRequest{Finalize: 2}},
		{"VersionRequest/query", &VersionRequest{}},
		{"VersionReply", &VersionReply{Release: "0.1.0", MinProtocol: 1, MaxProtocol: 2, ClusterVersion: 1, Leader: "m1:7100"}},
		{"VersionReply/refused", &VersionReply{Err: "server s3 speaks protocol 1", Release: "0.2.0", MinProtocol: 1, MaxProtocol: 2, ClusterVersion: 1}},
		{"SnapshotChunk", &SnapshotChunk{
			Volume: 3, Epoch: 4, SnapshotSN: 500, Seq: 12,
			Objects: []KeyValue{{Key: "a", Value: []byte("1"), Stamp: Stamp{Origin: 1, N: 2, TS: 3}},
				{Key: "b", Value: []byte("22"), Deleted: true, Stamp: Stamp{Origin: 2, N: 1, TS: 4}}},
			Sessions: []SessionRecord{
				{Client: 1, AckedBelow: 2, LastSN: 3, Outcomes: []Outcome{
					{ReqNo: 2, Result: testResult(3)}, {ReqNo: 3, Result: testResult(4)},
				}},
				{Client: 2, AckedBelow: 5, LastSN: 6, Outcomes: []Outcome{
					{ReqNo: 5, Result: testResult(6)}, {ReqNo: 6, Result: testResult(7)},
				}},
			},
			Last:    true,
			Vector:  Vector{{Site: 1, N: 10}, {Site: 2, N: 20}},
			ShipLog: []Update{testUpdate(8, 2), testUpdate(9, 2)},
		}},
		{"SnapshotChunk/negative-seq", &SnapshotChunk{Volume: 3, Epoch: 4, SnapshotSN: 5, Seq: -1}},
		{"Heartbeat", &Heartbeat{
			Incarnation: 77, SentAt: 123 * Second,
			Volumes: []VolumeStatus{testVolumeStatus(1), testVolumeStatus(2)},
			Heard:   122 * Second, AuthVersion: 9, MinProtocol: 1, MaxProtocol: 2,
		}},
		{"Heartbeat/control", &Heartbeat{Incarnation: 1, Volumes: []VolumeStatus{{Volume: 2, Epoch: 3,
			Control: []PathControl{{Path: "b/src/", Site: 3, Deep: true}, {Path: "b/x", Site: 1}}}}}},
		{"HeartbeatReply", &HeartbeatReply{
			SentAt: -5 * Millisecond, LeaseGranted: true, LeaseFor: 2 * Second,
			Configs: []Config{testConfig(1), testConfig(2)}, Keyspaces: []Keyspace{testKeyspace(0)},
			Sites:   []Site{{ID: 1, Name: "lisbon", Masters: []NodeID{"a:1", "b:1"}}, {ID: 2, Name: "oslo", Masters: []NodeID{"c:1"}}},
			Stable:  []VolumeVector{{Volume: 3, Vector: Vector{{Site: 1, N: 5}}}, {Volume: 4, Vector: Vector{{Site: 1, N: 1}, {Site: 2, N: 8}}}},
			Cluster: "prod", Auth: &auth, ClusterVersion: 2,
		}},
		{"HeartbeatReply/empty-auth", &HeartbeatReply{SentAt: 1, Auth: &AuthTable{}}},
		{"NewConfig", &NewConfig{Config: testConfig(5)}},
		{"NewConfig/moved", &NewConfig{Config: func() Config { c := testConfig(5); c.Moved, c.K, c.Sites = true, 0, nil; return c }()}},
		{"NewConfig/fresh", &NewConfig{Config: func() Config { c := testConfig(5); c.Fresh, c.Joining = true, ""; return c }()}},
		{"ConfigRequest", &ConfigRequest{}},
		{"ConfigRequest/cluster", &ConfigRequest{Cluster: "prod"}},
		{"ConfigReply", &ConfigReply{Configs: []Config{testConfig(1), testConfig(2), testConfig(3)},
			Masters: []NodeID{"m1", "m2"}, Leader: "m2", Keyspaces: []Keyspace{testKeyspace(0), testKeyspace(4)}, Cluster: "prod"}},
		{"StatusRequest", &StatusRequest{}},
		{"StatusReply", &StatusReply{
			Configs: []Config{testConfig(1), testConfig(2)},
			Servers: []ServerStatus{
				{ID: "s1", Alive: true, Incarnation: 4, Volumes: []VolumeStatus{testVolumeStatus(1), testVolumeStatus(2)}, MinProtocol: 1, MaxProtocol: 3},
				{ID: "s2", Alive: true, Incarnation: 5, Volumes: []VolumeStatus{testVolumeStatus(3), testVolumeStatus(4)}},
			},
			Masters: []NodeID{"m1"}, Leader: "m1", Keyspaces: []Keyspace{testKeyspace(0)},
			Site: 2, Sites: []Site{{ID: 1, Name: "lisbon", Masters: []NodeID{"a:1", "b:1"}}, {ID: 2, Name: "oslo", Masters: []NodeID{"c:1"}}},
			ClusterVersion: 1,
		}},
		{"Hello", &Hello{From: "10.0.0.1:7000", MinProtocol: 1, MaxProtocol: 300}},
		{"PeerReset", &PeerReset{Peer: "10.0.0.2:7000"}},
		{"RaftMessage", &RaftMessage{Data: []byte{8, 3, 16, 1, 24, 2}}},
		{"KeyspaceRequest", &KeyspaceRequest{Create: testKeyspace(4)}},
		{"KeyspaceRequest/hierarchical", &KeyspaceRequest{Create: Keyspace{Name: "builds", Prefix: "b/", Mode: ModeHierarchical,
			ReplicationFactor: 3, Volumes: 8, Sites: []SiteID{1, 2, 3}, PartitionDepth: 2, Relaxed: true, Idle: 100 * Millisecond}}},
		{"KeyspaceRequest/grace", &KeyspaceRequest{Override: &OverrideRequest{Keyspace: "builds", Override: Override{Generation: 2, Sites: []SiteID{1, 3}}}}},
		{"KeyspaceRequest/reassign", &KeyspaceRequest{Override: &OverrideRequest{Keyspace: "builds", Reassign: true, Override: Override{Generation: 1, Sites: []SiteID{2}}}}},
		{"KeyspaceReply/grace", &KeyspaceReply{Keyspaces: []Keyspace{{Name: "builds", Prefix: "b/", Mode: ModeHierarchical, ReplicationFactor: 3, Volumes: 2,
			Sites: []SiteID{1, 2, 3}, PartitionDepth: 1, Relaxed: true, Grace: Override{Generation: 2, Sites: []SiteID{1, 3}}, Reassign: Override{Generation: 1, Sites: []SiteID{2}}}}}},
		{"KeyspaceReply", &KeyspaceReply{Err: "prefix overlaps", Keyspaces: []Keyspace{testKeyspace(0), testKeyspace(4)}}},
		{"KeyspaceRequest/split", &KeyspaceRequest{Split: "sessions", Create: Keyspace{Splits: 1}}},
		{"KeyspaceReply/split", &KeyspaceReply{Keyspaces: []Keyspace{testKeyspace(0).Split([]VolumeID{9, 10, 11, 12})}}},
		{"NewConfig/split", &NewConfig{Config: func() Config {
			c := testConfig(5)
			c.Split = Split{Into: 12, Epoch: 7, Modulus: 8, Keep: 3}
			return c
		}()}},
		{"NewConfig/from-split", &NewConfig{Config: func() Config { c := testConfig(12); c.Epoch, c.FromSplit, c.Joining = 1, true, ""; return c }()}},
		{"Heartbeat/split", &Heartbeat{Incarnation: 1, Volumes: []VolumeStatus{{Volume: 2, Epoch: 3, AppliedSN: 40,
			Split: SplitPoint{Into: 9, SN: 31, Epoch: 3}}}}},
		{"Heartbeat/watches", &Heartbeat{Incarnation: 1, Volumes: []VolumeStatus{{Volume: 2, Epoch: 3, AppliedSN: 40, Watches: 7},
			{Volume: 9, Epoch: 1, AppliedSN: 31, Split: SplitPoint{Into: 9, SN: 31, Epoch: 3}, Watches: 300}}}},
		{"SnapshotChunk/split", &SnapshotChunk{Volume: 2, Epoch: 5, SnapshotSN: 44, Last: true, SnapshotEpoch: 4,
			Split: SplitPoint{Into: 9, SN: 31, Epoch: 3}}},
		{"QueryUp", &QueryUp{Volume: 3, Epoch: 4, ReplyTo: "client-1:5000", Request: ClientRequest{
			Volume: 3, Epoch: 4, Client: 5, ReqNo: 6, AckedBelow: 6, Op: Op{Kind: OpGet, Key: "k"}, MinVersion: 77,
		}}},
		{"AuthRequest", &AuthRequest{ID: 1 << 60, Change: AuthChange{Op: AuthUserAdd, User: "alice", Role: "readers",
			PasswordHash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", Roles: []string{"a", "b"},
			Grant: Grant{Keyspace: "orders", Prefix: "o/", Access: AccessReadWrite}}}},
		{"AuthRequest/unknown-op", &AuthRequest{Change: AuthChange{Op: 250, Grant: Grant{Access: 200}}}},
		{"AuthReply", &AuthReply{ID: 7, Err: "no such user", Table: auth}},
		{"NewAuth", &NewAuth{Table: auth}},
		{"NewAuth/empty", &NewAuth{}},
		{"Control", &Control{Kind: ControlVote, Keyspace: "builds", Domain: 7, From: 2, To: 3, Ballot: Ballot{N: 1 << 40, Site: 2},
			Path: "src/ssh/", Deep: true, Holder: 3, HolderBallot: Ballot{N: 9, Site: 3}, Err: ErrBadRequest}},
		{"Control/lease", &Control{Kind: ControlLease, Keyspace: "builds", From: 2, To: 3, Ballot: Ballot{N: 1 << 40}, Path: ViewPath,
			View: View{N: 2, Members: []SiteID{2, 3}}, Vector: Vector{{Site: 1, N: 7}, {Site: 2, N: 1 << 40}}}},
		{"Control/unknown-kind", &Control{Kind: 250, Granted: true}},
		{"Control/view", &Control{Kind: ControlPropose, Keyspace: "builds", From: 1, To: 3, Ballot: Ballot{N: 5, Site: 1},
			Path: ViewPath, View: View{N: 1 << 33, Members: []SiteID{1, 3, 1 << 31}}}},
		{"Control/accept", &Control{Kind: ControlAccept, Keyspace: "builds", From: 2, To: 3, Ballot: Ballot{N: 9, Site: 2},
			Path: ViewPath, View: View{N: 4, Members: []SiteID{1, 2}}}},
		{"Control/promise", &Control{Kind: ControlVote, From: 3, To: 2, Ballot: Ballot{N: 9, Site: 2}, Path: ViewPath,
			Granted: true, HolderBallot: Ballot{N: 7, Site: 1}, View: View{N: 4, Members: []SiteID{1, 3}}}},
		{"Control/accepted-refused", &Control{Kind: ControlAccepted, From: 3, To: 2, Ballot: Ballot{N: 9, Site: 2}, Path: ViewPath,
			Holder: 5, HolderBallot: Ballot{N: 12, Site: 5}, View: View{N: 4, Members: []SiteID{1, 2}}}},
		{"Control/stale-view", &Control{Kind: ControlVote, From: 3, To: 1, Ballot: Ballot{N: 5, Site: 1},
			Path: ViewPath, Err: ErrStaleView, View: View{N: 2, Members: []SiteID{1, 2, 3}}}},
		// Empty but non-nil slices decode as nil: the normaliser equates them.
		{"Forward/empty", &Forward{Volume: 1, Epoch: 1, Updates: []Update{}}},
		{"ClientReply/empty-config", &ClientReply{Config: &Config{Chain: []NodeID{}}, Result: Result{Value: []byte{}}}},
		{"StatusReply/empty", &StatusReply{Servers: []ServerStatus{{Volumes: []VolumeStatus{}}}}},
		// Fields appended after release 0.1.0 (protocol 2: expiry).
		{"ClientRequest/expiry", &ClientRequest{Volume: 1, Epoch: 2, Client: 3, ReqNo: 4,
			Op: Op{Kind: OpExpire, Key: "session:1", Expires: 1_800_000_000_000_000_000, TTL: -5 * Second, Expiry: ExpiryGT | ExpiryXX}}},
		{"ClientRequest/keepttl", &ClientRequest{Volume: 1, Epoch: 2, Client: 3, ReqNo: 5,
			Op: Op{Kind: OpPut, Key: "k", Value: []byte("v"), Expiry: ExpiryKeep}}},
		{"ClientReply/expires", &ClientReply{Volume: 9, Client: 8, ReqNo: 7,
			Result: Result{Status: StatusOK, Found: true, Value: []byte("v"), SN: 6, Expires: 1_800_000_000_123_456_789}}},
		{"Forward/expires", &Forward{Volume: 4, Epoch: 5, Updates: []Update{func() Update {
			u := testUpdate(3, 20)
			u.Expires, u.Result.Expires = 1<<62, 1<<62
			return u
		}()}}},
		{"SnapshotChunk/expires", &SnapshotChunk{Volume: 3, Epoch: 4, SnapshotSN: 5, Seq: 0, Last: true,
			Objects: []KeyValue{{Key: "a", Value: []byte("1"), Expires: 77 * Second}, {Key: "b", Value: []byte("2")}}}},
		{"HeartbeatReply/walltime", &HeartbeatReply{SentAt: 3, LeaseGranted: true, LeaseFor: 2 * Second, ClusterVersion: 2, WallTime: 1_800_000_000_000_000_000}},
		{"ConfigReply/version", &ConfigReply{Masters: []NodeID{"m1"}, Leader: "m1", ClusterVersion: 2}},
		// Hashes (protocol 2, docs/adr/0029).
		{"ClientRequest/hset", &ClientRequest{Volume: 1, Epoch: 2, Client: 3, ReqNo: 6,
			Op: Op{Kind: OpHashSet, Key: "user:1", Value: []byte("\x02\x04name\x03ada\x03age\x0236")}}},
		{"ClientReply/hash", &ClientReply{Volume: 9, Client: 8, ReqNo: 7,
			Result: Result{Status: StatusOK, Found: true, Value: []byte("\x01\x01f\x01v"), SN: 6, Type: TypeHash}}},
		{"ClientReply/wrongtype", &ClientReply{Volume: 9, Client: 8, ReqNo: 8, Result: Result{Status: StatusWrongType, Found: true, SN: 6}}},
		{"Forward/hash", &Forward{Volume: 4, Epoch: 5, Updates: []Update{{SN: 9, Key: "user:1", Changed: true, Value: []byte("\x01\x01f\x01v"),
			Client: 3, ReqNo: 6, Result: Result{Status: StatusOK, Found: true, Value: []byte("1"), SN: 9}, Epoch: 5, Type: TypeHash}}}},
		{"SnapshotChunk/hash", &SnapshotChunk{Volume: 3, Epoch: 4, SnapshotSN: 5, Last: true,
			Objects: []KeyValue{{Key: "h", Value: []byte("\x00"), Type: TypeHash, Expires: 9 * Second}, {Key: "h2", Value: []byte("\x00"), Type: TypeHash}}}},
		// Exports, a backup's reads (protocol 2, docs/adr/0030).
		{"ClientRequest/export", &ClientRequest{Volume: 2, Epoch: 3, Client: 4, ReqNo: 5, Op: Op{Kind: OpExport, Key: "k\x00", Delta: 77}}},
		{"ClientReply/export", &ClientReply{Volume: 2, Client: 4, ReqNo: 5, Result: Result{Status: StatusOK, Found: true, SN: 9,
			Value: EncodeExportPage(ExportPage{SN: 9, Objects: []ExportObject{{Key: "a", Value: []byte("1"), Expires: 3 * Second, Type: TypeHash}}, More: true})}}},
		// Watches (protocol 2, docs/adr/0032): a watch of a prefix from a
		// revision, of one key from now, and their pages.
		{"ClientRequest/watch", &ClientRequest{Volume: 2, Epoch: 3, Client: 4, ReqNo: 6, Keyspaces: 2, Op: Op{Kind: OpWatch, Key: "cfg/", Delta: 77, TTL: WatchHoldMax}}},
		{"ClientRequest/watch-key-now", &ClientRequest{Volume: 2, Epoch: 3, Client: 4, ReqNo: 7,
			Op: Op{Kind: OpWatch, Key: "cfg/a", Value: []byte{WatchExactKey}, Delta: WatchFromNow, TTL: Second}}},
		{"ClientReply/watch", &ClientReply{Volume: 2, Client: 4, ReqNo: 6, Epoch: 3, Position: 1, Result: Result{Status: StatusOK, Found: true, SN: 31,
			Value: EncodeWatchPage(WatchPage{Events: []WatchEvent{
				{SN: 78, Kind: WatchPut, Key: "cfg/a", Value: []byte("1"), Expires: 3 * Second},
				{SN: 79, Kind: WatchPut, Key: "cfg/h", Value: []byte("\x01\x01f\x01v"), Type: TypeHash},
				{SN: 80, Kind: WatchDelete, Key: "cfg/a"},
				{SN: 81, Kind: WatchExpire, Key: "cfg/h"},
			}, Through: 90, Split: SplitPoint{Into: 9, SN: 85, Epoch: 4}, SplitModulus: 4})}}},
		{"ClientReply/watch-compacted", &ClientReply{Volume: 2, Client: 4, ReqNo: 7, Result: Result{Status: StatusOK, Found: true, SN: 77,
			Value: EncodeWatchPage(WatchPage{Through: 77, Compacted: true, Oldest: 1000})}}},
	}
}

// withoutAppendedFields returns m without the fields appended at its end
// after release 0.1.0, or nil if it has none set: what a release that
// did not know them encodes.
func withoutAppendedFields(m Message) Message {
	switch m := m.(type) {
	case *HeartbeatReply:
		if m.WallTime != 0 {
			c := *m
			c.WallTime = 0
			return &c
		}
	case *ConfigReply:
		if m.ClusterVersion != 0 {
			c := *m
			c.ClusterVersion = 0
			return &c
		}
	case *KeyspaceRequest:
		if m.Split != "" {
			c := *m
			c.Split = ""
			return &c
		}
	case *SnapshotChunk:
		if !m.Split.IsZero() {
			c := *m
			c.Split = SplitPoint{}
			return &c
		}
	}
	return nil
}

// withAppendedFields returns m with the fields appended at its end after
// release 0.1.0 set where they are zero: bytes after such a message are
// a newer release's fields, not these.
func withAppendedFields(m Message) Message {
	switch m := m.(type) {
	case *HeartbeatReply:
		c := *m
		c.WallTime = max(c.WallTime, 1)
		return &c
	case *ConfigReply:
		c := *m
		c.ClusterVersion = max(c.ClusterVersion, 1)
		return &c
	case *KeyspaceRequest:
		c := *m
		c.Split = cmp.Or(c.Split, "k")
		return &c
	case *SnapshotChunk:
		c := *m
		if c.Split.IsZero() {
			c.Split = SplitPoint{Into: 1, SN: 2, Epoch: 3}
		}
		return &c
	}
	return m
}

// normalise returns a deep copy of v with every empty slice replaced by
// nil, the form Unmarshal produces.
func normalise(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(normalise(v.Elem()))
		return n
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(normalise(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			n.Field(i).Set(normalise(v.Field(i)))
		}
		return n
	case reflect.Slice:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(normalise(v.Index(i)))
		}
		return n
	default:
		return v
	}
}

func normalised(m Message) Message {
	return normalise(reflect.ValueOf(&m).Elem()).Interface().(Message)
}

func equalMessages(a, b Message) bool {
	return reflect.DeepEqual(normalised(a), normalised(b))
}

func mustMarshal(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Marshal(m)
	if err != nil {
		t.Fatalf("Marshal(%T): %v", m, err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range testMessages() {
		t.Run(tc.name, func(t *testing.T) {
			b := mustMarshal(t, tc.msg)
			got, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !equalMessages(got, tc.msg) {
				t.Fatalf("round trip:\n got  %#v\n want %#v", got, tc.msg)
			}
			// The fully populated values need no normalising.
			if !strings.Contains(tc.name, "/empty") && !reflect.DeepEqual(got, tc.msg) {
				t.Fatalf("round trip not exact:\n got  %#v\n want %#v", got, tc.msg)
			}
			// The decoded message must not alias the input.
			for i := range b {
				b[i] = 0xa5
			}
			if !equalMessages(got, tc.msg) {
				t.Fatalf("decoded message aliases the input")
			}
			// AppendMessage appends after existing bytes.
			prefix := []byte("prefix")
			b2, err := AppendMessage(prefix, tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b2[:len(prefix)], []byte("prefix")) || !bytes.Equal(b2[len(prefix):], mustMarshal(t, tc.msg)) {
				t.Fatalf("AppendMessage = %x", b2)
			}
		})
	}
}

// TestEveryMessageTypeCovered parses wire.go for the types implementing
// Message and checks each has a distinct type byte, in declaration order,
// and a value in the test table.
func TestEveryMessageTypeCovered(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "wire.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var methods = map[string]bool{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "messageName" || fd.Recv == nil {
			continue
		}
		star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
		if !ok {
			t.Fatalf("messageName on a non-pointer receiver")
		}
		methods[star.X.(*ast.Ident).Name] = true
	}
	var declared []string // message types in declaration order
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			if name := spec.(*ast.TypeSpec).Name.Name; methods[name] {
				declared = append(declared, name)
			}
		}
	}
	if len(declared) != len(methods) || len(declared) == 0 {
		t.Fatalf("found %d message types but %d messageName methods", len(declared), len(methods))
	}
	inTable := map[string]bool{}
	for _, tc := range testMessages() {
		name := MessageName(tc.msg)
		inTable[name] = true
		if b := mustMarshal(t, tc.msg); msgNames[b[0]] != name {
			t.Errorf("%s encodes with type byte %d (%q)", name, b[0], msgNames[b[0]])
		}
	}
	for i, name := range declared {
		if !inTable[name] {
			t.Errorf("message type %s has no value in testMessages", name)
		}
		if int(i+1) >= len(msgNames) || msgNames[i+1] != name {
			t.Errorf("message type %s (#%d in wire.go) has no type byte %d", name, i+1, i+1)
		}
	}
	if len(msgNames) != len(declared)+1 {
		t.Errorf("msgNames has %d entries for %d message types", len(msgNames)-1, len(declared))
	}
}

// TestGolden pins the exact encoding of a few messages: a failure here
// means the wire format changed.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		msg  Message
		want string
	}{
		{&Ack{Volume: 1, Epoch: 300, SN: 2}, "04 01 ac02 02 00 00 00"},
		{&Ship{Volume: 1, Origin: 2, OriginVolume: 3}, "15 01 02 03 00 00 00 00"},
		{&Ship{Volume: 1, Origin: 2, OriginVolume: 3, Cluster: "c", Sender: 2, View: 300}, "15 01 02 03 00 01 63 02 ac02"},
		{&Hello{From: "ab", MinProtocol: 1, MaxProtocol: 2}, "0f 02 6162 01 02"},
		{&ConfigRequest{}, "0b 00"},
		{&ConfigRequest{Cluster: "c"}, "0b 01 63"},
		{&ConfigReply{Leader: "m", Cluster: "c"}, "0c 00 00 01 6d 00 01 63"},
		{&StatusRequest{}, "0d"},
		{&StatusReply{Servers: []ServerStatus{{ID: "s", Volumes: []VolumeStatus{{Volume: 1, Shipped: Vector{{Site: 2, N: 3}}}}}},
			Site: 1, Sites: []Site{{ID: 1, Name: "a", Masters: []NodeID{"m"}}}},
			"0e00011601730000010e0100000000000001020203000000000000000001010601016101016d0000"},
		// StalledFor is a zigzag varint after the Shipped vector; then
		// the paths some site controls (a head of a hierarchical volume),
		// then the shipping age per site (a geo volume's tail).
		{&Heartbeat{Incarnation: 1, SentAt: 2, Volumes: []VolumeStatus{{Volume: 3, StalledFor: -1}, {Volume: 4, StalledFor: 64}}, Heard: 1},
			"080104020b03000000000000000100000c0400000000000000800100000200000000"},
		{&Heartbeat{Incarnation: 1, Volumes: []VolumeStatus{{Volume: 3, Control: []PathControl{{Path: "b/", Site: 2, Deep: true}}}}},
			"0801000111030000000000000000010502622f0201000000000000"},
		{&PeerReset{Peer: "p"}, "10 01 70"},
		{&HeartbeatReply{SentAt: -1, LeaseGranted: true, LeaseFor: 1}, "090101020000000000000000"},
		{&HeartbeatReply{SentAt: -1, LeaseGranted: true, LeaseFor: 1, Cluster: "c"}, "09010102000000000163000000"},
		{&HeartbeatReply{SentAt: -1, Returning: true}, "090100000000000000000100"},
		{&HeartbeatReply{SentAt: -1, Auth: &AuthTable{Version: 2, Users: []User{{Name: "u", Roles: []string{"r"}}},
			Roles: []Role{{Name: "r", Grants: []Grant{{Prefix: "p", Access: AccessRead}}}}}},
			"0901000000000000000113020106017500010172010801720104000170010000"},
		{&Heartbeat{Incarnation: 1, SentAt: 2, Heard: 3, AuthVersion: 4}, "080104000604000000"},
		{&Heartbeat{Incarnation: 1, NewDataDir: true}, "080100000000010000"},
		// A client's request ends with FromSite 0, one byte (a forwarded
		// one: the forwarding site), then Sites (0: this site's).
		{&ClientRequest{Volume: 1, Epoch: 2, Client: 3, ReqNo: 4, Op: Op{Kind: OpGet, Key: "k"}, User: "u"},
			"010102030400000701016b000000000000000001750000"},
		{&ClientRequest{Volume: 1, Epoch: 2, Client: 3, ReqNo: 4, Op: Op{Kind: OpPut, Key: "k"}, FromSite: 300, Sites: 3},
			"010102030400000702016b000000000000000000ac0203"},
		{&AuthRequest{ID: 5, Change: AuthChange{Op: AuthRoleGrant, Role: "r", Grant: Grant{Keyspace: "ks", Access: AccessReadWrite}}},
			"17050c0a000172000005026b730002"},
		{&AuthReply{ID: 5, Err: "e"}, "1805016503000000"},
		{&NewAuth{Table: AuthTable{Version: 3}}, "1903030000"},
		{&Control{Kind: ControlPropose, Keyspace: "k", Domain: 1, From: 2, To: 3, Ballot: Ballot{N: 4, Site: 2}, Path: "a/", Deep: true},
			"1a01016b01020302040202612f0100000200000002000000"},
		// The view is last: its number, then its members in increasing order.
		{&Control{Kind: ControlView, From: 1, To: 2, Path: ViewPath, View: View{N: 3, Members: []SiteID{1, 2}}},
			"1a0600000102020000052f7669657700000002000000040302010200"},
		{&Control{Kind: ControlVote, From: 2, To: 1, Path: ViewPath, Err: ErrStaleView, View: View{N: 1, Members: []SiteID{2}}},
			"1a0200000201020000052f76696577000000020000100301010200"},
		// Paxos's phase 2 of a view change: accept and its answer, kinds 9
		// and 10; a refusal names the promise in Holder and HolderBallot.
		{&Control{Kind: ControlAccept, From: 1, To: 2, Ballot: Ballot{N: 5, Site: 1}, Path: ViewPath, View: View{N: 3, Members: []SiteID{1, 2}}},
			"1a0900000102020501052f7669657700000002000000040302010200"},
		{&Control{Kind: ControlAccepted, From: 2, To: 1, Ballot: Ballot{N: 5, Site: 1}, Path: ViewPath, Holder: 3, HolderBallot: Ballot{N: 6, Site: 3},
			View: View{N: 3, Members: []SiteID{1, 2}}},
			"1a0a00000201020501052f7669657700000302060300040302010200"},
		// A promise carries the ballot and view accepted before.
		{&Control{Kind: ControlVote, From: 2, To: 1, Ballot: Ballot{N: 5, Site: 1}, Path: ViewPath, Granted: true, HolderBallot: Ballot{N: 4, Site: 3},
			View: View{N: 3, Members: []SiteID{2, 3}}},
			"1a0200000201020501052f7669657700010002040300040302020300"},
		// The error codes are one byte each, numbered in declaration order.
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrDenied}, "020102030c0800000000030000000000000000"},
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrUnauthenticated}, "020102030d0800000000030000000000000000"},
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrInFlightLimit}, "020102030e0800000000030000000000000000"},
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrTooManySites}, "02010203110800000000030000000000000000"},
		// A reply ends with the sites that lack the keyspace (ErrKeyspaceMissing).
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Err: ErrKeyspaceMissing, Sites: []SiteID{2, 3}}, "020102031208000000000300000000000000020203"},
		{&ClientReply{Volume: 2, Client: 3, ReqNo: 4, Err: ErrWrongEpoch,
			Result: Result{Status: StatusOK, Found: true, Value: []byte("v"), SN: 5},
			Config: &Config{Volume: 2, Epoch: 6, Chain: []NodeID{"a", "b"}}},
			"020203040109000101760503000000010b020602016101620000000000000000"},
		// A configuration's mode is in bits 2 and 3 of its flags (a
		// strong one's are 0, as before configurations named it): causal 1.
		{&NewConfig{Config: Config{Volume: 2, Epoch: 6, Chain: []NodeID{"a"}, Fresh: true, Mode: ModeCausal, K: 1}},
			"0a09020601016100050200"},
		// Statuses are one byte each, numbered in declaration order.
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Result: Result{Status: StatusOverflow, Found: true, SN: 4}},
			"02010203000804010004030000000000000000"},
		{&ClientReply{Volume: 1, Client: 2, ReqNo: 3, Result: Result{Status: StatusValueTooLarge, SN: 4}},
			"02010203000803000004030000000000000000"},
		{&Forward{Volume: 1, Epoch: 2, Updates: []Update{{SN: 3, Key: "k", Changed: true, Value: []byte("v"),
			Client: 4, ReqNo: 5, AckedBelow: 5, ReplyTo: "c", Result: Result{Found: true, SN: 3}}}},
			"030102011b03016b010001760405050163080001000303000000030000000000"},
		// An update ends with the epoch that sequenced it; a joining
		// server's SyncRequest with the epoch of its last update, and
		// the answer that it catches up instead of taking a snapshot.
		{&Forward{Volume: 1, Epoch: 2, Updates: []Update{{SN: 3, Epoch: 2}}},
			"0301020118030000000000000000080000000003000000030000000002"},
		{&SyncRequest{Volume: 1, Epoch: 7, AppliedSN: 5, NeedSnapshot: true, AppliedEpoch: 4, Transfer: TransferID{Incarnation: 2, Attempt: 3}}, "05010705000104020203"},
		{&SyncReply{Volume: 1, Epoch: 7, PredecessorAppliedSN: 9, CatchUp: true}, "06010709000102000000"},
		// A pipelined chain's durability report (chain/durable.go).
		{&Durable{Volume: 1, Epoch: 7, SN: 300}, "1e 01 07 ac02"},
	} {
		want := strings.ReplaceAll(tc.want, " ", "")
		if got := mustMarshal(t, tc.msg); want != hexString(got) {
			t.Errorf("%s encodes as %s, want %s", MessageName(tc.msg), hexString(got), want)
		}
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	s := make([]byte, 0, 2*len(b))
	for _, c := range b {
		s = append(s, digits[c>>4], digits[c&15])
	}
	return string(s)
}

// TestMinSizes checks the minimum element sizes used to bound slice counts
// against the encoding of zero values: too large a minimum would reject
// valid input, too small would weaken the allocation bound.
func TestMinSizes(t *testing.T) {
	sr := func(n int) int {
		return len(appendSessionRecord(nil, &SessionRecord{Outcomes: make([]Outcome, n)}))
	}
	servers := func(n int) int {
		return len(mustMarshal(t, &StatusReply{Servers: make([]ServerStatus, n)}))
	}
	objects := func(n int) int {
		return len(mustMarshal(t, &SnapshotChunk{Objects: make([]KeyValue, n)}))
	}
	for _, tc := range []struct {
		name      string
		got, want int
	}{
		{"NodeID", len(appendString(nil, "")), minNodeID},
		{"Config", len(appendConfig(nil, &Config{})), minConfig},
		{"Result", len(appendResult(nil, &Result{})), minResult},
		{"Update", len(appendUpdate(nil, &Update{})), minUpdate},
		{"KeyValue", objects(1) - objects(0), minKeyValue},
		{"Outcome", sr(1) - sr(0), minOutcome},
		{"SessionRecord", sr(0), minSessionRecord},
		{"VolumeStatus", len(appendVolumeStatuses(nil, make([]VolumeStatus, 1))) - 1, minVolumeStatus},
		{"ServerStatus", servers(1) - servers(0), minServerStatus},
		{"string", len(appendStrings(nil, []string{""})) - 1, minString},
		{"User", len(appendAuthTable(nil, &AuthTable{Users: make([]User, 1)})) - 4, minUser},
		{"Role", len(appendAuthTable(nil, &AuthTable{Roles: make([]Role, 1)})) - 4, minRole},
		{"Grant", len(appendGrant(nil, &Grant{})), minGrant},
	} {
		if tc.got != tc.want {
			t.Errorf("zero %s encodes in %d bytes, min constant is %d", tc.name, tc.got, tc.want)
		}
	}
}

func wantMalformed(t *testing.T, b []byte, what string) {
	t.Helper()
	m, err := Unmarshal(b)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("%s: Unmarshal(%x) = %#v, %v; want ErrMalformed", what, b, m, err)
	}
	if m != nil {
		t.Fatalf("%s: Unmarshal returned a message with an error", what)
	}
}

func TestMalformedPrefixes(t *testing.T) {
	for _, tc := range testMessages() {
		b := mustMarshal(t, tc.msg)
		base := withoutAppendedFields(tc.msg)
		for n := range len(b) {
			if m, err := Unmarshal(b[:n:n]); err == nil && base != nil && equalMessages(m, base) {
				continue // the prefix an older release writes: without the appended fields
			}
			wantMalformed(t, b[:n:n], tc.name+" prefix")
		}
	}
}

// TestAppendedFieldsSkipped: bytes after the fields this release knows,
// at the end of a message or inside a framed struct, are a newer
// release's appended fields: decoding skips them (docs/adr/0026).
func TestAppendedFieldsSkipped(t *testing.T) {
	for _, tc := range testMessages() {
		msg := withAppendedFields(tc.msg)
		b := mustMarshal(t, msg)
		for _, extra := range []string{"\x00", "garbage"} {
			m, err := Unmarshal(append(slices.Clone(b), extra...))
			if err != nil || !equalMessages(m, msg) {
				t.Errorf("%s with %q appended: %v, %v", tc.name, extra, m, err)
			}
		}
	}
	// A newer release's Update, Config and Stamp, each with a field
	// appended inside its frame.
	u := testUpdate(7, 300)         // over 127 bytes: a two-byte length
	u.Expires, u.Type = 9, TypeHash // (the last fields this release knows)
	fwd := slices.Concat([]byte{msgForward, 1, 2, 1}, extendStruct(appendUpdate(nil, &u), 0x05, 'x'))
	m, err := Unmarshal(fwd)
	if err != nil || !reflect.DeepEqual(m, &Forward{Volume: 1, Epoch: 2, Updates: []Update{u}}) {
		t.Errorf("a Forward of an extended Update: %v, %v", m, err)
	}
	c := Config{Volume: 2, Epoch: 6, Chain: []NodeID{"a"}, K: 1, Split: Split{Into: 5, Epoch: 4, Modulus: 4, Keep: 1}} // (the last fields this release knows)
	m, err = Unmarshal(slices.Concat([]byte{msgNewConfig}, extendStruct(appendConfig(nil, &c), 1, 2, 3)))
	if err != nil || !reflect.DeepEqual(m, &NewConfig{Config: c}) {
		t.Errorf("a NewConfig of an extended Config: %v, %v", m, err)
	}
	kv := KeyValue{Key: "k", Value: []byte("v"), Stamp: Stamp{Origin: 1, N: 2, TS: 3}}
	stamp := extendStruct(appendStamp(nil, &kv.Stamp), 9)
	kvFields := slices.Concat(appendString(nil, kv.Key), appendBytes(nil, kv.Value), []byte{0}, stamp)
	fetched := slices.Concat([]byte{msgFetched, 1, 2, 1, byte(len(kvFields))}, kvFields, []byte{0})
	m, err = Unmarshal(fetched)
	if err != nil || !reflect.DeepEqual(m, &Fetched{Volume: 1, Site: 2, Objects: []KeyValue{kv}}) {
		t.Errorf("a Fetched of an extended Stamp: %v, %v", m, err)
	}
	// An older release's struct, ending before a field this release
	// has had since the base release, is malformed.
	base := c
	base.Split = Split{}
	short := appendConfig(nil, &base)
	short = append([]byte{msgNewConfig, short[0] - 1}, short[1:len(short)-1]...)
	if _, err := Unmarshal(short); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "NewConfig.Config.Sites:") {
		t.Errorf("a Config without its last field: %v", err)
	}
}

// extendStruct returns the framed struct enc with the bytes extra
// appended to its fields, as a newer release that added a field writes
// it.
func extendStruct(enc []byte, extra ...byte) []byte {
	n, k := binary.Uvarint(enc)
	fields := append(slices.Clone(enc[k:k+int(n)]), extra...)
	return append(binary.AppendUvarint(nil, uint64(len(fields))), fields...)
}

// unknownTypeBytes returns type bytes that no message type has, taken from
// the codec's table so they stay unknown when types are added: 0, the first
// number after the last type, and the highest byte.
func unknownTypeBytes(t *testing.T) []byte {
	t.Helper()
	out := []byte{0, byte(len(msgNames)), 0xff}
	for _, b := range out {
		if int(b) < len(msgNames) && msgNames[b] != "" {
			t.Fatalf("type byte %d is %s, not unknown", b, msgNames[b])
		}
	}
	return out
}

// A type byte this version does not know (a newer release's message) is
// ErrUnknownMessage, not malformed input: refused for its type, whatever
// follows it, and a stream of frames reads on past it.
func TestUnknownTypeByte(t *testing.T) {
	for _, b := range unknownTypeBytes(t) {
		for _, input := range [][]byte{{b}, {b, 0, 0, 0}} {
			m, err := Unmarshal(input)
			if !errors.Is(err, ErrUnknownMessage) || errors.Is(err, ErrMalformed) || m != nil {
				t.Errorf("Unmarshal(%x) = %v, %v; want ErrUnknownMessage alone", input, m, err)
			}
		}
	}
	var stream bytes.Buffer
	stream.Write([]byte{0, 0, 0, 4, 0xff, 1, 2, 3})
	w := bufio.NewWriter(&stream)
	if err := WriteFrame(w, &Ack{SN: 7}); err != nil || w.Flush() != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&stream)
	if _, _, err := ReadFrame(r, nil); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("first frame: %v, want ErrUnknownMessage", err)
	}
	if m, _, err := ReadFrame(r, nil); err != nil || m.(*Ack).SN != 7 {
		t.Fatalf("the frame after an unknown one: %v, %v; want the Ack", m, err)
	}
}

func TestMalformedErrorNamesField(t *testing.T) {
	// The last update's Deps, cut short: the update's frame says it is
	// one byte shorter and the Forward ends there.
	u := testUpdate(2, 10)
	enc := appendUpdate(nil, &u)
	epochLen := len(binary.AppendUvarint(nil, uint64(u.Epoch)))
	fields := enc[1 : len(enc)-epochLen-1] // one byte into the last Dep's N... and no Epoch
	fwd := slices.Concat([]byte{msgForward, 1, 2, 1, byte(len(fields))}, fields)
	_, err := Unmarshal(fwd)
	if err == nil || !strings.Contains(err.Error(), "Forward.Updates.Deps:") {
		t.Fatalf("error %v does not name the field", err)
	}
	// Complete, a bool of a server's volume's status, set to 2.
	vs := appendVolumeStatuses(nil, make([]VolumeStatus, 1)) // count, length, fields
	vs[1+1+5] = 2                                            // Volume Epoch AppliedSN CommittedSN JoinerReady, then Complete
	server := slices.Concat(appendString(nil, "s"), []byte{0, 0}, vs)
	reply := slices.Concat([]byte{msgStatusReply, 0, 1, byte(len(server))}, server, []byte{0, 0, 0, 0, 0, 0})
	_, err = Unmarshal(reply)
	if err == nil || !strings.Contains(err.Error(), "StatusReply.Servers.Volumes.Complete:") {
		t.Fatalf("error %v does not name the field", err)
	}
	// A volume status's frame longer than its server's.
	server = slices.Concat(appendString(nil, "s"), []byte{0, 0, 1, 20}, make([]byte, 11))
	reply = slices.Concat([]byte{msgStatusReply, 0, 1, byte(len(server))}, server, []byte{0, 0, 0, 0, 0, 0})
	_, err = Unmarshal(reply)
	if err == nil || !strings.Contains(err.Error(), "StatusReply.Servers.Volumes: length 20") {
		t.Fatalf("error %v does not name the field", err)
	}
	// StalledFor, a varint field of a volume's status: one that
	// overflows, and one cut short.
	before := []byte{1, 0, 0, 0, 0, 0, 0, 0} // Volume 1 Epoch AppliedSN CommittedSN JoinerReady Complete, two empty vectors
	for _, stalled := range [][]byte{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0x80, 0x80, 0x80}} {
		status := slices.Concat(before, stalled)
		hb := slices.Concat([]byte{msgHeartbeat, 1, 0, 1, byte(len(status))}, status, []byte{0, 0, 0})
		_, err = Unmarshal(hb)
		if err == nil || !strings.Contains(err.Error(), "Heartbeat.Volumes.StalledFor:") {
			t.Fatalf("StalledFor %x: error %v does not name the field", stalled, err)
		}
	}
}

func TestMalformedValues(t *testing.T) {
	uv := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	// fr frames fields as a struct: their length, then them.
	fr := func(fields ...[]byte) []byte {
		b := slices.Concat(fields...)
		return append(uv(nil, uint64(len(b))), b...)
	}
	bs := func(b ...byte) []byte { return b }
	zeroUpdate := appendUpdate(nil, &Update{})
	zeroVolume := appendVolumeStatuses(nil, make([]VolumeStatus, 1))[1:]
	zeroUser := bs(3, 0, 0, 0)
	zeroGrant := bs(3, 0, 0, 0)
	statusReplyEnd := bs(0, 0, 0, 0, 0, 0, 0) // Masters Leader Keyspaces Site Sites Cluster ClusterVersion
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"huge string length", uv([]byte{msgHello}, math.MaxUint64)},
		{"string length 1<<40", uv([]byte{msgHello}, 1<<40)},
		{"string length one over", append(uv([]byte{msgHello}, 4), "abc"...)},
		{"huge bytes length", slices.Concat(bs(msgForward, 1, 1, 1), fr(bs(1, 0, 0, 0), uv(nil, math.MaxInt64), make([]byte, 10)))},
		{"struct length one over", slices.Concat(bs(msgForward, 1, 1, 1, zeroUpdate[0]+1), zeroUpdate[1:])},
		{"huge slice count", uv([]byte{msgForward, 1, 1}, math.MaxUint64)},
		{"slice count 1<<62", append(uv([]byte{msgConfigReply}, 1<<62), make([]byte, 100)...)},
		// Two zero Updates' bytes cannot hold 3 of them.
		{"slice count one over", slices.Concat(bs(msgForward, 1, 1, 3), zeroUpdate, zeroUpdate)},
		{"nested count one over", slices.Concat(bs(msgStatusReply, 0, 1), fr(bs(0, 0, 0, 2), zeroVolume, bs(0, 0)), statusReplyEnd)},
		{"uvarint overflow", append([]byte{msgAck}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1)},
		{"uvarint truncated", []byte{msgAck, 1, 1, 0x80}},
		{"volume over 32 bits", append(uv([]byte{msgAck}, 1<<32), 1, 1)},
		{"bool 2", []byte{msgSyncRequest, 1, 1, 1, 1, 2}},
		// NewConfig: Volume, Epoch, no members, Joining "", flags, K, no sites.
		{"config flag unknown", slices.Concat(bs(msgNewConfig), fr(bs(1, 1, 0, 0, 0x20, 0, 0)))},
		{"config mode unknown", slices.Concat(bs(msgNewConfig), fr(bs(1, 1, 0, 0, 0x0c, 0, 0)))},
		{"presence byte 2", slices.Concat(bs(msgClientReply, 1, 1, 1, 0), fr(bs(0, 0, 0, 0), fr(bs(0, 0, 0))), bs(2))},
		// HeartbeatReply: SentAt LeaseGranted LeaseFor Configs Keyspaces Sites, then one VolumeVector.
		{"vector sites not increasing", slices.Concat(bs(msgHeartbeatReply, 0, 0, 0, 0, 0, 0, 1), fr(bs(1, 2), fr(bs(2, 5)), fr(bs(1, 5))))},
		{"vector zero count", slices.Concat(bs(msgHeartbeatReply, 0, 0, 0, 0, 0, 0, 1), fr(bs(1, 1), fr(bs(1, 0))))},
		{"keyspace sites repeated", slices.Concat(bs(msgKeyspaceRequest), fr(bs(0, 0, 0, 0, 0, 0, 0, 2, 4, 4, 0, 0, 0, 0, 0, 0, 0)), bs(0))},
		{"varint overflow", append([]byte{msgHeartbeat, 1}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0)},
		{"auth presence byte 2", []byte{msgHeartbeatReply, 0, 0, 0, 0, 0, 0, 0, 0, 2}},
		// One zero User's bytes (and the Roles count) cannot hold 2.
		{"auth users count one over", slices.Concat(bs(msgNewAuth), fr(bs(0, 2), zeroUser, bs(0)))},
		{"auth grants count one over", slices.Concat(bs(msgNewAuth), fr(bs(0, 0, 1), fr(bs(0, 2), zeroGrant)))},
		{"auth roles count huge", slices.Concat(bs(msgAuthReply, 0, 0), fr(bs(0, 0), uv(nil, 1<<40), make([]byte, 16)))},
		{"auth change roles cut short", slices.Concat(bs(msgAuthRequest, 0), fr(bs(1, 0, 0, 0, 2, 0), zeroGrant))},
		{"auth change truncated grant", slices.Concat(bs(msgAuthRequest, 0), fr(bs(1, 0, 0, 0, 0), fr(bs(0, 0))))},
	} {
		wantMalformed(t, tc.b, tc.name)
	}
	// Sanity: the "one over" and "cut short" inputs are valid with the
	// count decremented.
	for _, ok := range [][]byte{
		slices.Concat(bs(msgForward, 1, 1, 2), zeroUpdate, zeroUpdate),
		slices.Concat(bs(msgStatusReply, 0, 1), fr(bs(0, 0, 0, 1), zeroVolume, bs(0, 0)), statusReplyEnd),
		slices.Concat(bs(msgNewAuth), fr(bs(0, 1), zeroUser, bs(0))),
		slices.Concat(bs(msgNewAuth), fr(bs(0, 0, 1), fr(bs(0, 1), zeroGrant))),
		slices.Concat(bs(msgAuthRequest, 0), fr(bs(1, 0, 0, 0, 1, 0), zeroGrant)),
		slices.Concat(bs(msgNewConfig), fr(bs(1, 1, 0, 0, 0x04, 0, 0))),
	} {
		if _, err := Unmarshal(ok); err != nil {
			t.Fatalf("%x with its count decremented: %v", ok, err)
		}
	}
}

func TestHugeCountDoesNotAllocate(t *testing.T) {
	b := binary.AppendUvarint([]byte{msgForward, 1, 1}, 1<<40)
	b = append(b, make([]byte, 64)...)
	allocs := testing.AllocsPerRun(10, func() { _, _ = Unmarshal(b) })
	if allocs > 10 {
		t.Fatalf("rejecting a huge count made %v allocations", allocs)
	}
}

func TestTooLarge(t *testing.T) {
	big := &Hello{From: NodeID(strings.Repeat("x", FrameSizeMax))}
	if _, err := Marshal(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Marshal of an oversized message: %v", err)
	}
	dst := []byte("keep")
	if out, err := AppendMessage(dst, big); !errors.Is(err, ErrTooLarge) || string(out) != "keep" {
		t.Fatalf("AppendMessage of an oversized message = %q, %v", out, err)
	}
	// Exactly at the limit is fine: 1 type byte, 4 length bytes, the
	// two protocol versions (0: one byte each).
	exact := &Hello{From: NodeID(strings.Repeat("x", FrameSizeMax-7))}
	b, err := Marshal(exact)
	if err != nil || len(b) != FrameSizeMax {
		t.Fatalf("Marshal at the limit: %d bytes, %v", len(b), err)
	}
	if m, err := Unmarshal(b); err != nil || !reflect.DeepEqual(m, exact) {
		t.Fatalf("Unmarshal at the limit: %v", err)
	}
	if _, err := Unmarshal(append(b, 0)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Unmarshal over the limit: %v", err)
	}
}

func TestMarshalNil(t *testing.T) {
	for _, m := range []Message{nil, (*Ack)(nil), (*ConfigRequest)(nil), (*ClientReply)(nil)} {
		if b, err := Marshal(m); err == nil {
			t.Errorf("Marshal(%#v) = %x, want an error", m, b)
		}
	}
}

func TestFrames(t *testing.T) {
	var msgs []Message
	for _, tc := range testMessages() {
		msgs = append(msgs, tc.msg)
	}
	// One frame larger than both bufio buffers.
	msgs = append(msgs, &Forward{Volume: 1, Epoch: 1, Updates: []Update{testUpdate(1, 10000), testUpdate(2, 5000)}})
	for _, size := range []int{16, 4096} {
		var stream bytes.Buffer
		w := bufio.NewWriterSize(&stream, size)
		for _, m := range msgs {
			if err := WriteFrame(w, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReaderSize(&stream, size)
		var buf []byte
		var got []Message
		for {
			m, b, err := ReadFrame(r, buf)
			buf = b
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("ReadFrame #%d: %v", len(got), err)
			}
			got = append(got, m)
		}
		// Compare only now: every message outlived reuses of buf.
		if len(got) != len(msgs) {
			t.Fatalf("read %d frames, wrote %d", len(got), len(msgs))
		}
		for i := range msgs {
			if !equalMessages(got[i], msgs[i]) {
				t.Errorf("frame %d: got %#v, want %#v", i, got[i], msgs[i])
			}
		}
	}
}

func TestWriteFrameTooLarge(t *testing.T) {
	var stream bytes.Buffer
	w := bufio.NewWriter(&stream)
	err := WriteFrame(w, &Hello{From: NodeID(strings.Repeat("x", FrameSizeMax))})
	if !errors.Is(err, ErrTooLarge) || w.Buffered() != 0 || stream.Len() != 0 {
		t.Fatalf("WriteFrame of an oversized message: %v, %d bytes buffered", err, w.Buffered())
	}
	if err := WriteFrame(w, nil); err == nil || w.Buffered() != 0 {
		t.Fatalf("WriteFrame(nil): %v, %d bytes buffered", err, w.Buffered())
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame := func(n uint32, payload ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), payload...)
	}
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"zero length", frame(0, msgConfigRequest), ErrMalformed},
		{"over the limit", frame(FrameSizeMax + 1), ErrTooLarge},
		{"max uint32", frame(math.MaxUint32), ErrTooLarge},
		{"partial header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"truncated payload", frame(10, msgHello, 8, 'a'), io.ErrUnexpectedEOF},
		{"header only", frame(1), io.ErrUnexpectedEOF},
		{"bad payload", frame(2, msgHello, 1), ErrMalformed},
		{"unknown type", frame(1, unknownTypeBytes(t)[1]), ErrUnknownMessage},
		{"empty stream", nil, io.EOF},
	} {
		m, buf, err := ReadFrame(bufio.NewReader(bytes.NewReader(tc.input)), nil)
		if !errors.Is(err, tc.want) || m != nil {
			t.Errorf("%s: ReadFrame = %v, %v; want %v", tc.name, m, err, tc.want)
		}
		if cap(buf) > 1024 {
			t.Errorf("%s: ReadFrame allocated %d bytes", tc.name, cap(buf))
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, tc := range testMessages() {
		b, err := Marshal(tc.msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if m != nil || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnknownMessage)) {
				t.Fatalf("Unmarshal = %#v, %v", m, err)
			}
			return
		}
		b2, err := Marshal(m)
		if err != nil {
			t.Fatalf("Marshal of a decoded %T: %v", m, err)
		}
		// Decoding accepts only non-minimal varints beyond what Marshal
		// writes, so the canonical form is never longer.
		if len(b2) > len(data) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(data), len(b2))
		}
		m2, err := Unmarshal(b2)
		if err != nil {
			t.Fatalf("Unmarshal of a re-encoded %T: %v", m, err)
		}
		if !equalMessages(m, m2) {
			t.Fatalf("re-decoding differs:\n%#v\n%#v", m, m2)
		}
		b3, err := Marshal(m2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b2, b3) {
			t.Fatalf("re-encoding is not canonical:\n%x\n%x", b2, b3)
		}
	})
}

func benchForward() *Forward {
	f := &Forward{Volume: 1, Epoch: 3, Updates: make([]Update, 64)}
	for i := range f.Updates {
		f.Updates[i] = testUpdate(SN(1000+i), 100)
	}
	return f
}

func BenchmarkMarshalForward(b *testing.B) {
	m := benchForward()
	buf := mustMarshal(b, m)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = AppendMessage(buf[:0], m)
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalForward(b *testing.B) {
	buf := mustMarshal(b, benchForward())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNonMinimalVarints: decoding accepts varints in non-minimal form, and
// re-encoding gives the canonical form.
func TestNonMinimalVarints(t *testing.T) {
	m, err := Unmarshal([]byte{msgAck, 0x81, 0x00, 0x82, 0x80, 0x00, 0x03, 0x80, 0x00, 0x80, 0x00, 0x80, 0x00})
	if err != nil {
		t.Fatal(err)
	}
	want := &Ack{Volume: 1, Epoch: 2, SN: 3}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v, want %#v", m, want)
	}
	if b := mustMarshal(t, m); !bytes.Equal(b, []byte{msgAck, 1, 2, 3, 0, 0, 0}) {
		t.Fatalf("re-encoded as %x", b)
	}
}

// The Caller of a request is the receiving transport's to set: it is
// not encoded, so a sender cannot claim one.
func TestCallerNotEncoded(t *testing.T) {
	req := &ClientRequest{Volume: 1, Op: Op{Kind: OpGet, Key: "k"}, User: "bob", Caller: Caller{Name: "mallory", Proxy: true}}
	b := mustMarshal(t, req)
	m, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*ClientRequest)
	if got.Caller != (Caller{}) || got.User != "bob" {
		t.Fatalf("decoded Caller %+v, User %q; want none and bob", got.Caller, got.User)
	}
	if want := mustMarshal(t, &ClientRequest{Volume: 1, Op: Op{Kind: OpGet, Key: "k"}, User: "bob"}); !bytes.Equal(b, want) {
		t.Fatalf("a Caller changed the encoding: %x vs %x", b, want)
	}
	ar := &AuthRequest{ID: 1, Change: AuthChange{Op: AuthList}, Caller: Caller{Name: "root"}}
	m, err = Unmarshal(mustMarshal(t, ar))
	if err != nil {
		t.Fatal(err)
	}
	if m.(*AuthRequest).Caller != (Caller{}) {
		t.Fatalf("AuthRequest's Caller was decoded: %+v", m.(*AuthRequest).Caller)
	}
}

// A proxy's certificate may name the user it sends for; a client's may
// not; no certificate is no user.
func TestCallerPrincipal(t *testing.T) {
	for _, tc := range []struct {
		caller  Caller
		claimed string
		want    string
	}{
		{Caller{Name: "alice"}, "", "alice"},
		{Caller{Name: "alice"}, "root", "alice"},
		{Caller{Name: "proxy1", Proxy: true}, "bob", "bob"},
		{Caller{Name: "proxy1", Proxy: true}, "", "proxy1"},
		{Caller{}, "root", ""},
	} {
		if got := tc.caller.Principal(tc.claimed); got != tc.want {
			t.Errorf("%+v.Principal(%q) = %q, want %q", tc.caller, tc.claimed, got, tc.want)
		}
	}
}

// benchRequest is a client's write as the client core sends it: a
// strong keyspace's put of a 100-byte value.
func benchRequest() *ClientRequest {
	return &ClientRequest{Volume: 3, Epoch: 7, Client: 1 << 40, ReqNo: 12345, AckedBelow: 12340,
		Op: Op{Kind: OpPut, Key: "user6284781860667377211", Value: bytes.Repeat([]byte{'v'}, 100)}}
}

// benchReply is a read's answer: a found 100-byte value.
func benchReply() *ClientReply {
	return &ClientReply{Volume: 3, Client: 1 << 40, ReqNo: 12345, Epoch: 7,
		Result: Result{Status: StatusOK, Found: true, Value: bytes.Repeat([]byte{'v'}, 100), SN: 99999}}
}

func benchmarkCodec(b *testing.B, m Message) {
	b.Run("Marshal", func(b *testing.B) {
		buf := mustMarshal(b, m)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = AppendMessage(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		buf := mustMarshal(b, m)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Unmarshal(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkClientRequest(b *testing.B) { benchmarkCodec(b, benchRequest()) }
func BenchmarkClientReply(b *testing.B)   { benchmarkCodec(b, benchReply()) }
