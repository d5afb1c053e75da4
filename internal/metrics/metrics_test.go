package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/wire"
)

func TestOutcome(t *testing.T) {
	req := &wire.ClientRequest{Client: 7, ReqNo: 3, Op: wire.Op{Kind: wire.OpPut, Key: "k"}}
	reply := func(to wire.NodeID, client wire.ClientID, reqNo uint64, code wire.ErrCode, status wire.Status) wire.Envelope {
		return wire.Envelope{To: to, Msg: &wire.ClientReply{Client: client, ReqNo: reqNo, Err: code, Result: wire.Result{Status: status}}}
	}
	forward := wire.Envelope{To: "s2", Msg: &wire.Forward{}}
	for _, tc := range []struct {
		name string
		out  []wire.Envelope
		want string
	}{
		{"answered", []wire.Envelope{reply("c", 7, 3, wire.ErrNone, wire.StatusOK)}, "ok"},
		{"status", []wire.Envelope{reply("c", 7, 3, wire.ErrNone, wire.StatusCompareFailed)}, "compare-failed"},
		{"refused", []wire.Envelope{reply("c", 7, 3, wire.ErrNotHead, wire.StatusOK)}, "not-head"},
		{"sent down the chain", []wire.Envelope{forward}, OutcomeForwarded},
		{"nothing emitted", nil, OutcomeForwarded},
		{"reply to another request", []wire.Envelope{forward, reply("c", 7, 2, wire.ErrNone, wire.StatusOK)}, OutcomeForwarded},
		{"reply to another client", []wire.Envelope{reply("d", 7, 3, wire.ErrNone, wire.StatusOK)}, OutcomeForwarded},
		{"its reply among others", []wire.Envelope{reply("c", 7, 2, wire.ErrNone, wire.StatusOK), forward, reply("c", 7, 3, wire.ErrDirty, wire.StatusOK)}, "dirty"},
	} {
		if got := Outcome(req, "c", tc.out); got != tc.want {
			t.Errorf("%s: Outcome = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	cfg := func(epoch wire.Epoch, joining wire.NodeID, chain ...wire.NodeID) wire.Config {
		return wire.Config{Volume: 4, Epoch: epoch, Chain: chain, Joining: joining}
	}
	for _, tc := range []struct {
		name       string
		prev, next wire.Config
		kind       string
		removed    string
	}{
		{"tail failed", cfg(1, "", "a", "b", "c"), cfg(2, "", "a", "b"), KindRemove, "c"},
		{"head failed", cfg(1, "", "a", "b", "c"), cfg(2, "", "b", "c"), KindRemove, "a"},
		{"member and joiner removed", cfg(3, "d", "a", "b"), cfg(4, "", "a"), KindRemove, "b,d"},
		{"extension starts", cfg(2, "", "a", "b"), cfg(3, "d", "a", "b"), KindExtend, ""},
		{"joiner becomes the tail", cfg(3, "d", "a", "b"), cfg(4, "", "a", "b", "d"), KindPromote, ""},
		{"a member moves to the tail", cfg(4, "", "a", "b", "d"), func() wire.Config { c := cfg(5, "a", "b", "d"); c.Moved = true; return c }(), KindMove, ""},
		{"extension abandoned", cfg(3, "d", "a", "b"), cfg(4, "", "a", "b"), KindAbort, ""},
		{"same chain, new epoch", cfg(1, "", "a"), cfg(2, "", "a"), KindOther, ""},
		{"the keyspace splits", cfg(2, "", "a", "b"), func() wire.Config {
			c := cfg(3, "", "a", "b")
			c.Split = wire.Split{Into: 9, Epoch: 3, Modulus: 2, Keep: 0}
			return c
		}(), KindSplit, ""},
	} {
		r := Classify(tc.prev, tc.next)
		if r.Kind != tc.kind || strings.Join(r.Removed, ",") != tc.removed || r.Epoch != uint64(tc.next.Epoch) || r.Volume != 4 {
			t.Errorf("%s: Classify(%v, %v) = %+v, want kind %s, removed %q", tc.name, tc.prev, tc.next, r, tc.kind, tc.removed)
		}
	}
}

// A server's loop counts each client request once its batch is sent, by
// operation and outcome, with its latency; and the state it transfers.
func TestServerLoop(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := NewServerLoop(reg)
	began := time.Now()
	get := &wire.ClientRequest{Client: 1, ReqNo: 1, Op: wire.Op{Kind: wire.OpGet, Key: "k"}}
	put := &wire.ClientRequest{Client: 1, ReqNo: 2, Op: wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}}
	l.Stepped(began, "c", get, []wire.Envelope{{To: "c", Msg: &wire.ClientReply{Client: 1, ReqNo: 1}}})
	l.Stepped(began, "c", put, []wire.Envelope{{To: "s2", Msg: &wire.Forward{}}})
	l.Stepped(began, "s1", &wire.SnapshotChunk{Objects: []wire.KeyValue{{Key: "ab", Value: []byte("cde")}, {Key: "f"}}}, nil)
	if n := testutil.ToFloat64(l.requests.WithLabelValues("get", "ok")); n != 0 {
		t.Fatalf("a request was counted before its batch was sent: %v", n)
	}
	l.BatchSent()
	for _, tc := range []struct {
		op, outcome string
	}{{"get", "ok"}, {"put", OutcomeForwarded}} {
		if n := testutil.ToFloat64(l.requests.WithLabelValues(tc.op, tc.outcome)); n != 1 {
			t.Errorf("requests_total{op=%s,outcome=%s} = %v, want 1", tc.op, tc.outcome, n)
		}
	}
	if n := testutil.CollectAndCount(l.requestSeconds); n != 2 {
		t.Errorf("%d latency histograms, want 2", n)
	}
	if n := testutil.ToFloat64(l.transferReceived[0]); n != 6 {
		t.Errorf("state transfer bytes received = %v, want 6", n)
	}
	if n := testutil.ToFloat64(l.received.WithLabelValues("ClientRequest")); n != 2 {
		t.Errorf("ClientRequest messages received = %v, want 2", n)
	}
	l.BatchSent()
	if n := testutil.ToFloat64(l.requests.WithLabelValues("get", "ok")); n != 1 {
		t.Errorf("after an empty batch, requests_total{op=get,outcome=ok} = %v, want 1", n)
	}
}

// inline runs f at once: the collectors' Inspect for a machine no other
// goroutine uses.
func inline(_ context.Context, f func(now wire.Time)) error { f(0); return nil }

// The master collector follows a real master: a server silent past the
// failure timeout is removed (a lease expired, a reconfiguration of kind
// remove), and the status page's list shows it.
func TestMasterWatchesReconfigurations(t *testing.T) {
	m, err := master.New("m", master.Options{
		Settings:       master.Settings{ReplicationFactor: 3},
		Chains:         map[wire.VolumeID][]wire.NodeID{0: {"a", "b", "c"}},
		FailureTimeout: 400 * wire.Millisecond, LeaseDuration: 300 * wire.Millisecond,
		ClockDriftMax: 0.01, ExtensionTimeout: 3 * wire.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := NewMaster(reg, m, MasterOptions{Inspect: inline})
	if ch := c.AfterBatch(time.Now()); len(ch.Reconfigurations) != 0 || ch.LeaderChanged {
		t.Fatalf("first batch: %+v, want no change", ch)
	}
	// a and b heartbeat and hear the master's replies (Heartbeat.Heard).
	heard := map[wire.NodeID]wire.Time{}
	hear := func(out []wire.Envelope) {
		for _, e := range out {
			if r, ok := e.Msg.(*wire.HeartbeatReply); ok {
				heard[e.To] = max(heard[e.To], r.SentAt)
			}
		}
	}
	for now := wire.Time(0); now <= wire.Second; now += 100 * wire.Millisecond {
		for _, id := range []wire.NodeID{"a", "b"} {
			hear(m.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: heard[id], Volumes: []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch}}}))
		}
		hear(m.Tick(now))
	}
	ch := c.AfterBatch(time.Now())
	if len(ch.Reconfigurations) != 1 || ch.Reconfigurations[0].Kind != KindRemove || strings.Join(ch.Reconfigurations[0].Removed, ",") != "c" {
		t.Fatalf("after c fell silent: %+v, want c removed", ch)
	}
	if short, extending := c.Recovery(); short != 1 || extending != 0 {
		t.Errorf("Recovery() = %d short, %d extending; want 1, 0", short, extending)
	}
	if got := c.Recent(); len(got) != 1 || got[0].Epoch != 2 {
		t.Errorf("Recent() = %+v", got)
	}
	if n := testutil.ToFloat64(c.reconfigurations.WithLabelValues(KindRemove)); n != 1 {
		t.Errorf("reconfigurations_total{kind=remove} = %v, want 1", n)
	}
	want := `
# HELP catena_master_leases_expired_total Servers this member, leading, removed because it had not heard from them within the failure timeout (their leases had run out).
# TYPE catena_master_leases_expired_total counter
catena_master_leases_expired_total 1
# HELP catena_master_chains_short Volumes whose chain has fewer members than their keyspace's replication factor (recovery pending or in progress).
# TYPE catena_master_chains_short gauge
catena_master_chains_short 1
# HELP catena_volume_chain_length Members of the volume's chain (the joining server not counted).
# TYPE catena_volume_chain_length gauge
catena_volume_chain_length{keyspace="default",volume="0"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "catena_master_leases_expired_total", "catena_master_chains_short", "catena_volume_chain_length"); err != nil {
		t.Error(err)
	}
}

// The list of recent reconfigurations keeps the newest recentMax, newest
// first.
func TestRecentIsBounded(t *testing.T) {
	c := &Master{}
	for i := range 3 * recentMax {
		c.record([]Reconfiguration{{Epoch: uint64(i)}})
	}
	got := c.Recent()
	if len(got) != recentMax || got[0].Epoch != 3*recentMax-1 || got[recentMax-1].Epoch != 2*recentMax {
		t.Fatalf("kept %d, from epoch %d to %d", len(got), got[0].Epoch, got[len(got)-1].Epoch)
	}
}

// BenchmarkServerLoop measures what a server's metrics add per client
// request: Stepped on the request and its reply, and its share of
// BatchSent in batches of 64.
func BenchmarkServerLoop(b *testing.B) {
	l := NewServerLoop(prometheus.NewRegistry())
	req := &wire.ClientRequest{Client: 1, Op: wire.Op{Kind: wire.OpGet, Key: "k"}}
	out := []wire.Envelope{{To: "c", Msg: &wire.ClientReply{Client: 1}}}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req.ReqNo = uint64(i)
		out[0].Msg.(*wire.ClientReply).ReqNo = uint64(i)
		l.Stepped(now, "c", req, out)
		if i%64 == 63 {
			l.BatchSent()
		}
	}
}

// A split shows as its own kind for the volume split, and the new
// volume's start as another (docs/adr/0031).
func TestMasterWatchesASplit(t *testing.T) {
	m, err := master.New("m", master.Options{
		Settings:       master.Settings{ReplicationFactor: 3},
		Chains:         map[wire.VolumeID][]wire.NodeID{0: {"a", "b", "c"}},
		FailureTimeout: 400 * wire.Millisecond, LeaseDuration: 300 * wire.Millisecond,
		ClockDriftMax: 0.01, ExtensionTimeout: 3 * wire.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := NewMaster(prometheus.NewRegistry(), m, MasterOptions{Inspect: inline})
	heartbeat := func(now wire.Time, point wire.SplitPoint) {
		for _, id := range []wire.NodeID{"a", "b", "c"} {
			volumes := []wire.VolumeStatus{{Volume: 0, Epoch: m.Config(0).Epoch, AppliedSN: 9, CommittedSN: 9, Split: point}}
			if !point.IsZero() { // (each member seeded the new volume: wire.VolumeStatus.Seed)
				volumes = append(volumes, wire.VolumeStatus{Volume: point.Into, AppliedSN: point.SN - 1, CommittedSN: point.SN - 1, Split: point})
			}
			m.Step(now, id, &wire.Heartbeat{Incarnation: 1, SentAt: now, Heard: now, Volumes: volumes})
		}
	}
	heartbeat(0, wire.SplitPoint{})
	c.AfterBatch(time.Now())
	m.Step(1, "admin", &wire.KeyspaceRequest{Split: wire.DefaultKeyspace})
	if ch := c.AfterBatch(time.Now()); len(ch.Reconfigurations) != 1 || ch.Reconfigurations[0].Kind != KindSplit || ch.Reconfigurations[0].Volume != 0 {
		t.Fatalf("after the split: %+v, want volume 0 split", ch.Reconfigurations)
	}
	heartbeat(2, wire.SplitPoint{Into: 1, SN: 8, Epoch: m.Config(0).Epoch})
	m.Tick(3)
	if ch := c.AfterBatch(time.Now()); len(ch.Reconfigurations) != 1 || ch.Reconfigurations[0].Kind != KindStart || ch.Reconfigurations[0].Volume != 1 {
		t.Fatalf("after every member split: %+v, want volume 1 started", ch.Reconfigurations)
	}
}
