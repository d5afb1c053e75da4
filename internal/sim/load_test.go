package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

var paperCosts = Costs{Query: 5 * wire.Millisecond, Update: 50 * wire.Millisecond, Forward: 20 * wire.Millisecond}

// TestLoadLatencyMatchesPaper replays CR §5.1's worked example with one
// closed-loop client: on a chain of three, an update takes 94 ms (1 ms to
// the head, 50 ms there, 20 ms at each other replica, three more 1 ms
// hops) and a query 7 ms. Primary/backup updates take 1+50+1+20+1+1 =
// 74 ms: the backups work in parallel.
func TestLoadLatencyMatchesPaper(t *testing.T) {
	for _, tc := range []struct {
		protocol Protocol
		update   bool
		latency  wire.Time
	}{
		{ProtocolChain, true, 94 * wire.Millisecond},
		{ProtocolChain, false, 7 * wire.Millisecond},
		{ProtocolWeakChain, false, 7 * wire.Millisecond},
		{ProtocolPB, true, 74 * wire.Millisecond},
		{ProtocolPB, false, 7 * wire.Millisecond},
		{ProtocolWeakPB, false, 7 * wire.Millisecond},
	} {
		fraction := 0.0
		if tc.update {
			fraction = 1
		}
		const window = 100
		res, err := RunLoad(LoadOptions{
			Seed: 1, Protocol: tc.protocol, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}},
			Objects: 10, Clients: 1, UpdateFraction: func(int) float64 { return fraction },
			RequestsPerClient: window, Duration: 20 * wire.Second, Bucket: wire.Second,
			Latency: wire.Millisecond, Costs: paperCosts,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != window {
			t.Fatalf("%s update=%v: %d of %d requests completed", tc.protocol, tc.update, res.Completed, window)
		}
		if got := (res.Last - res.First) / window; got != tc.latency {
			t.Errorf("%s update=%v: %v per request, want %v", tc.protocol, tc.update, got, tc.latency)
		}
	}
}

// TestLoadQueriesGoWhereTheProtocolSays checks which servers execute
// queries: the tail (chain), the primary (pb), every member (weak).
func TestLoadQueriesGoWhereTheProtocolSays(t *testing.T) {
	for _, tc := range []struct {
		protocol Protocol
		queried  []wire.NodeID
	}{
		{ProtocolChain, []wire.NodeID{"s3"}},
		{ProtocolPB, []wire.NodeID{"s1"}},
		{ProtocolWeakChain, []wire.NodeID{"s1", "s2", "s3"}},
		{ProtocolWeakPB, []wire.NodeID{"s1", "s2", "s3"}},
		{ProtocolCRAQ, []wire.NodeID{"s1", "s2", "s3"}}, // a dirty key's query is refused, then goes to the tail
	} {
		res, err := RunLoad(LoadOptions{
			Seed: 2, Protocol: tc.protocol, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}},
			Objects: 100, Clients: 5, UpdateFraction: func(int) float64 { return 0.2 },
			Duration: 5 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []wire.NodeID{"s1", "s2", "s3"} {
			h := res.Handled[id]
			want := false
			for _, q := range tc.queried {
				want = want || q == id
			}
			if (h[0] > 0) != want {
				t.Errorf("%s: %s executed %d queries", tc.protocol, id, h[0])
			}
			if head := id == "s1"; (h[1] > 0) != head {
				t.Errorf("%s: %s executed %d updates", tc.protocol, id, h[1])
			}
		}
	}
}

// TestLoadIsDeterministic: the same options give the same measurements.
func TestLoadIsDeterministic(t *testing.T) {
	run := func() LoadResult {
		res, err := RunLoad(LoadOptions{
			Seed: 3, Protocol: ProtocolChain, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2"}, 1: {"s2", "s1"}},
			Objects: 50, Clients: 8, UpdateFraction: func(int) float64 { return 0.3 },
			Duration: 3 * wire.Second, Bucket: 100 * wire.Millisecond, Latency: wire.Millisecond, Costs: paperCosts,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(), run()
	if a.Completed != b.Completed || a.Events != b.Events || a.Last != b.Last {
		t.Fatalf("two runs differ: %d/%d completed, %d/%d events", a.Completed, b.Completed, a.Events, b.Events)
	}
}

// TestLoadProcessPerVolume: a server whose two volumes each run on their
// own processor answers twice the queries of one that runs both on one.
func TestLoadProcessPerVolume(t *testing.T) {
	throughput := func(perVolume bool) float64 {
		res, err := RunLoad(LoadOptions{
			Seed: 4, Protocol: ProtocolChain, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1"}, 1: {"s1"}},
			Objects: 100, VolumeOf: func(i int) wire.VolumeID { return wire.VolumeID(i % 2) },
			Clients: 10, UpdateFraction: func(int) float64 { return 0 },
			Duration: 5 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts,
			ProcessPerVolume: perVolume,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Throughput(wire.Second, wire.Second, 5*wire.Second)
	}
	one, two := throughput(false), throughput(true)
	if one != 200 {
		t.Errorf("one processor: %.1f queries/s, want 200 (5 ms each)", one)
	}
	if two < 1.8*one || two > 2*one {
		t.Errorf("a processor per volume: %.1f queries/s, want about twice %.1f", two, one)
	}
}

// TestLoadCausal runs ChainReaction's causal mode: the head takes the
// updates, every member answers reads, and the dependency waits go to
// the head (in one site it knows last that a version is committed); the
// clients' outstanding requests are sampled.
func TestLoadCausal(t *testing.T) {
	const clients = 5
	res, err := RunLoad(LoadOptions{
		Seed: 5, Protocol: ProtocolCausal, K: 2, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}},
		Objects: 100, Clients: clients, UpdateFraction: func(int) float64 { return 0.2 },
		Duration: 5 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts, CountOutstanding: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed == 0 {
		t.Fatal("nothing completed")
	}
	for _, id := range []wire.NodeID{"s1", "s2", "s3"} {
		l := res.Servers[id]
		if l.Reads == 0 {
			t.Errorf("%s handled no reads", id)
		}
		if head := id == "s1"; (l.Updates > 0) != head {
			t.Errorf("%s handled %d client updates", id, l.Updates)
		}
		if head := id == "s1"; (l.Waits > 0) != head {
			t.Errorf("%s handled %d dependency waits", id, l.Waits)
		}
		if l.Busy <= 0 {
			t.Errorf("%s was never busy", id)
		}
	}
	if len(res.Outstanding) != 5 {
		t.Fatalf("%d samples of outstanding requests, want one per bucket", len(res.Outstanding))
	}
	for i, n := range res.Outstanding {
		// Closed loop: a client's next request starts as its last ends.
		if sum := n[OutstandingQuery] + n[OutstandingDependencies] + n[OutstandingUpdate]; sum != clients {
			t.Errorf("sample %d: %v outstanding, want %d in all", i, n, clients)
		}
	}
	if res.UpdateLatency <= 0 || res.QueryLatency <= 0 {
		t.Errorf("latencies: queries %v, updates %v", res.QueryLatency, res.UpdateLatency)
	}
}

// TestLoadSpareReplacesAFailedMember: the master extends a chain that
// lost a member onto a spare server.
func TestLoadSpareReplacesAFailedMember(t *testing.T) {
	res, err := RunLoad(LoadOptions{
		Seed: 6, Protocol: ProtocolCRAQ, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}}, Spares: []wire.NodeID{"s4"},
		Objects: 10, Clients: 4, UpdateFraction: func(int) float64 { return 0.5 },
		Duration: 6 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts,
		AttemptTimeout: 500 * wire.Millisecond, Failures: []ServerFailure{{At: wire.Second, Server: "s2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Configs) != 1 || fmt.Sprint(res.Configs[0].Chain) != "[s1 s3 s4]" {
		t.Fatalf("configurations at the end: %v, want s4 in place of s2", res.Configs)
	}
	if res.Updates[len(res.Updates)-1] == 0 {
		t.Error("no updates in the last second")
	}
}

// TestLoadRefusesABadK: k belongs to the causal protocol and lies in
// 1..t.
func TestLoadRefusesABadK(t *testing.T) {
	for _, tc := range []struct {
		protocol Protocol
		k        int
	}{{ProtocolCausal, 0}, {ProtocolCausal, 4}, {ProtocolChain, 1}, {ProtocolCRAQ, 2}} {
		_, err := RunLoad(LoadOptions{
			Seed: 1, Protocol: tc.protocol, K: tc.k, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}},
			Objects: 1, Clients: 1, UpdateFraction: func(int) float64 { return 0 },
			Duration: wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts,
		})
		if err == nil || !strings.Contains(err.Error(), "k=") {
			t.Errorf("%s with k=%d: %v, want an error about k", tc.protocol, tc.k, err)
		}
	}
}

// TestLoadServersJoinAndASplit: servers added during a run register with
// their first heartbeat and take chains from the placement policy; a
// split doubles the volumes, and the new chains spread onto them.
func TestLoadServersJoinAndASplit(t *testing.T) {
	res, err := RunLoad(LoadOptions{
		Seed: 7, Protocol: ProtocolChain,
		Chains:  map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}, 1: {"s2", "s3", "s1"}, 2: {"s3", "s1", "s2"}},
		Objects: 300, Clients: 20, UpdateFraction: func(int) float64 { return 1 }, PeersFirst: true,
		Duration: 12 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts,
		Events: []LoadEvent{{At: 3 * wire.Second, Join: "s4"}, {At: 3 * wire.Second, Join: "s5"}, {At: 3 * wire.Second, Join: "s6"},
			{At: 6 * wire.Second, Split: wire.DefaultKeyspace}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Configs) != 6 {
		t.Fatalf("%d volumes at the end, want 6: %v", len(res.Configs), res.Configs)
	}
	chains := map[wire.NodeID]int{}
	for _, c := range res.Configs {
		if len(c.Chain) != 3 || c.Joining != "" {
			t.Errorf("volume %d at the end: %v joining %q, want 3 members", c.Volume, c.Chain, c.Joining)
		}
		for _, id := range c.Chain {
			chains[id]++
		}
	}
	for _, id := range []wire.NodeID{"s1", "s2", "s3", "s4", "s5", "s6"} {
		if chains[id] != 3 {
			t.Errorf("%s is in %d chains at the end, want 3 (18 replicas over 6 servers): %v", id, chains[id], chains)
		}
		if res.Servers[id].Applied == 0 {
			t.Errorf("%s applied no updates", id)
		}
	}
	if res.Updates[len(res.Updates)-1] == 0 {
		t.Error("no updates in the last second")
	}
}

// TestLoadRefusesBadEvents: an event is a join or a split, a joining
// server is new, a split needs clients that route by the keyspaces, and
// a split the master refuses fails the run.
func TestLoadRefusesBadEvents(t *testing.T) {
	for _, tc := range []struct {
		events   []LoadEvent
		volumeOf func(int) wire.VolumeID
		want     string
	}{
		{[]LoadEvent{{At: wire.Second}}, nil, "exactly one"},
		{[]LoadEvent{{At: wire.Second, Join: "s4", Split: wire.DefaultKeyspace}}, nil, "exactly one"},
		{[]LoadEvent{{At: wire.Second, Join: "s2"}}, nil, "joining server s2"},
		{[]LoadEvent{{At: wire.Second, Join: "s4"}, {At: wire.Second + 1, Join: "s4"}}, nil, "joining server s4"},
		{[]LoadEvent{{At: 9 * wire.Second, Join: "s4"}}, nil, "outside"},
		{[]LoadEvent{{At: wire.Second, Split: wire.DefaultKeyspace}}, func(int) wire.VolumeID { return 0 }, "VolumeOf"},
		{[]LoadEvent{{At: wire.Second, Split: "nosuch"}}, nil, "refused"},
	} {
		_, err := RunLoad(LoadOptions{
			Seed: 1, Protocol: ProtocolChain, Chains: map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}},
			Objects: 10, VolumeOf: tc.volumeOf, Clients: 1, UpdateFraction: func(int) float64 { return 0 },
			Duration: 2 * wire.Second, Bucket: wire.Second, Latency: wire.Millisecond, Costs: paperCosts, Events: tc.events,
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("events %+v: %v, want an error about %q", tc.events, err, tc.want)
		}
	}
}
