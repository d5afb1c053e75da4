package sim

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// sitesLoad is a small load run of two sites.
func sitesLoad(protocol Protocol, k int) LoadOptions {
	return LoadOptions{
		Seed: 3, Protocol: protocol, K: k, Sites: 2,
		Chains:  map[wire.VolumeID][]wire.NodeID{0: {"s1", "s2", "s3"}, 1: {"s2", "s3", "s1"}},
		Objects: 50, Clients: 6, Workload: &Workload{Read: 0.5, Update: 0.25, ReadModifyWrite: 0.25, Distribution: DistributionZipfian},
		RequestsPerClient: 40, Duration: 6 * wire.Second, Bucket: wire.Second,
		Latency: wire.Millisecond, Costs: Costs{Query: wire.Millisecond, Update: wire.Millisecond, Forward: wire.Millisecond},
		WAN: 60 * wire.Millisecond, WANJitter: 5 * wire.Millisecond, KeepLatencies: true,
	}
}

// TestLoadSitesShipEveryWriteAndAnswerLocally runs two sites of the
// causal mode: each site's clients are answered by their own site's
// servers (a write well under a WAN crossing), every write reaches the
// other site (a lag for each, none pending once the clients are done),
// and no lag is shorter than the WAN.
func TestLoadSitesShipEveryWriteAndAnswerLocally(t *testing.T) {
	o := sitesLoad(ProtocolCausal, 2)
	res, err := RunLoad(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := o.Clients * o.RequestsPerClient; res.Completed != want || res.Abandoned != 0 {
		t.Fatalf("%d completed, %d abandoned, want %d completed", res.Completed, res.Abandoned, want)
	}
	writes := 0
	for _, site := range []string{"a/", "b/"} {
		l := res.Latencies[site]
		if l == nil || len(l.Reads) == 0 || len(l.Updates) == 0 {
			t.Fatalf("site %s: latencies %+v", site, l)
		}
		for _, s := range l.Updates {
			// A read-modify-write is two local round trips and a dependency wait at most.
			if s.D >= o.WAN {
				t.Errorf("site %s: a write took %v, more than the WAN's one way", site, s.D)
			}
		}
		for id, h := range res.Handled {
			if strings.HasPrefix(string(id), site) && h[0]+h[1] == 0 {
				t.Errorf("%s handled no client request", id)
			}
		}
		writes += len(l.Updates)
	}
	if len(res.ShipPending) != 0 || len(res.VisiblePending) != 0 {
		t.Errorf("%d writes not shipped, %d not visible at the end", len(res.ShipPending), len(res.VisiblePending))
	}
	if len(res.ShipLag) != writes || len(res.VisibleLag) != writes {
		t.Errorf("%d shipped and %d visible lags, want one per write (%d)", len(res.ShipLag), len(res.VisibleLag), writes)
	}
	for _, s := range res.VisibleLag {
		if s.D < o.WAN-o.WANJitter {
			t.Errorf("a write visible at the other site %v after its answer, faster than the WAN", s.D)
		}
	}
}

// TestLoadSitesOfStrongChainsAreIndependent: strong chains with sites
// are independent clusters; nothing crosses between them.
func TestLoadSitesOfStrongChainsAreIndependent(t *testing.T) {
	res, err := RunLoad(sitesLoad(ProtocolChain, 0))
	if err != nil {
		t.Fatal(err)
	}
	if res.Abandoned != 0 || len(res.ShipLag) != 0 {
		t.Fatalf("%d abandoned, %d shipped", res.Abandoned, len(res.ShipLag))
	}
	for _, l := range res.Latencies {
		for _, s := range append(l.Reads, l.Updates...) {
			if s.D >= 60*wire.Millisecond {
				t.Fatalf("a request took %v: it crossed the WAN", s.D)
			}
		}
	}
}

// TestLoadSitesRefuseBadOptions: a client site count that is not the
// sites', and prefixed server names with Sites, are refused.
func TestLoadSitesRefuseBadOptions(t *testing.T) {
	o := sitesLoad(ProtocolCausal, 2)
	o.ClientSites = 3
	if _, err := RunLoad(o); err == nil || !strings.Contains(err.Error(), "client sites") {
		t.Errorf("3 client sites of 2 sites: %v", err)
	}
	o = sitesLoad(ProtocolCausal, 2)
	o.Chains = map[wire.VolumeID][]wire.NodeID{0: {"a/s1", "a/s2", "a/s3"}}
	if _, err := RunLoad(o); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("prefixed servers with Sites: %v", err)
	}
	o = sitesLoad(ProtocolCausal, 2)
	o.Workload = &Workload{Read: 0.5, Distribution: DistributionZipfian}
	if _, err := RunLoad(o); err == nil || !strings.Contains(err.Error(), "sum to 1") {
		t.Errorf("shares summing to 0.5: %v", err)
	}
}
