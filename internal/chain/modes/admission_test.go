package modes_test

import (
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/chain/chaintest"
	"github.com/catena-kv/catena/internal/chain/modes"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// putFor sends a put asking for sites to the head of the key's volume
// at site, and returns the answer.
func putFor(t *testing.T, n *chaintest.Sites, site wire.SiteID, reqNo uint64, key string, sites uint32) *wire.ClientReply {
	t.Helper()
	v, _ := placement.Route(n.Keyspaces, key)
	n.Replies = nil
	n.Queue = append(n.Queue, chaintest.Msg{From: "client", To: n.Configs[site][v].Head(), Msg: &wire.ClientRequest{
		Volume: v, Epoch: n.Configs[site][v].Epoch, Client: 7, ReqNo: reqNo, AckedBelow: reqNo, Keyspaces: uint32(len(n.Keyspaces)),
		Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v")}, Sites: sites,
	}})
	n.Run()
	r := n.Reply(7, reqNo)
	for i := 0; r == nil && i < 50; i++ { // (a hierarchical write waits for an election)
		n.Tick()
		r = n.Reply(7, reqNo)
	}
	if r == nil {
		t.Fatalf("put %s asking for %d sites: no answer", key, sites)
	}
	return r
}

// A write that asks for more sites than replicate its keyspace is
// refused by the head (ErrTooManySites) and applied nowhere, in causal
// and hierarchical keyspaces alike; one that asks for all of them is
// admitted.
func TestHeadRefusesMoreSitesThanTheKeyspaceHas(t *testing.T) {
	for _, k := range []int{1, 0} { // causal, hierarchical
		n := chaintest.NewSites(t, chaintest.SitesOptions{Modes: modes.New, K: k, Sites: 3})
		key := n.KeyIn(0)
		if r := putFor(t, n, 1, 1, key, 4); r.Err != wire.ErrTooManySites {
			t.Fatalf("k=%d: a put asking for 4 of 3 sites: %v, want %v", k, r.Err, wire.ErrTooManySites)
		}
		for site := wire.SiteID(1); site <= 3; site++ {
			if v, st := n.Object(site, key); v != "" || !st.IsZero() {
				t.Fatalf("k=%d: the refused put is at site %d: %q %v", k, site, v, st)
			}
		}
		if r := putFor(t, n, 1, 2, key, 3); r.Err != wire.ErrNone {
			t.Fatalf("k=%d: a put asking for all 3 sites: %v", k, r.Err)
		}
	}
}

// On a deployment of one site (a configuration naming no sites) a write
// asking for 2 or more sites is refused; asking for 1 is the default.
func TestHeadRefusesSitesOnOneSite(t *testing.T) {
	s := chain.NewServer(chain.ServerOptions{ID: "s", Masters: []wire.NodeID{"m"}, Incarnation: 1, HeartbeatInterval: wire.Second,
		Limits: chain.DefaultLimits, Engine: storage.NewMemoryEngine(), Modes: modes.New})
	s.Step(0, "m", &wire.HeartbeatReply{SentAt: 0, LeaseGranted: true, LeaseFor: 1000 * wire.Second,
		Configs: []wire.Config{{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"s"}}}})
	put := func(reqNo uint64, sites uint32, key string) wire.ErrCode {
		t.Helper()
		req := &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 9, ReqNo: reqNo, AckedBelow: reqNo,
			Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v")}, Sites: sites}
		for _, env := range s.Step(1, "c", req) {
			if r, ok := env.Msg.(*wire.ClientReply); ok && r.ReqNo == reqNo {
				return r.Err
			}
		}
		t.Fatalf("no answer to put %s asking for %d sites", key, sites)
		return 0
	}
	if code := put(1, 3, "a"); code != wire.ErrTooManySites {
		t.Fatalf("put asking for 3 sites on one: %v, want %v", code, wire.ErrTooManySites)
	}
	if code := put(2, 1, "b"); code != wire.ErrNone {
		t.Fatalf("put asking for 1 site: %v", code)
	}
	req := &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 9, ReqNo: 3, AckedBelow: 3, Op: wire.Op{Kind: wire.OpGet, Key: "a"}}
	for _, env := range s.Step(2, "c", req) {
		if r, ok := env.Msg.(*wire.ClientReply); ok && r.ReqNo == 3 && (r.Err != wire.ErrNone || r.Result.Found) {
			t.Fatalf("after the refused put, get a = %+v, want absent", r)
		}
	}
}
