package sim

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/clientcore"
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

// TestLoadSitesGetTransactions runs GET-TRANSACTIONs among reads and
// writes on two sites of the causal mode: every request ends (completed,
// or a transaction that gave up on contention), transactions complete at
// both sites and count once each in the series, each took at least two
// rounds of reads (the client core's rule) and was answered in its site
// (well under a WAN crossing).
func TestLoadSitesGetTransactions(t *testing.T) {
	o := sitesLoad(ProtocolCausal, 2)
	o.Workload = &Workload{Read: 0.5, Update: 0.25, Transaction: 0.25, TransactionKeysMin: 2, TransactionKeysMax: 5, Distribution: DistributionZipfian}
	res, err := RunLoad(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := o.Clients * o.RequestsPerClient; res.Completed+res.Contended != want || res.Abandoned != 0 {
		t.Fatalf("%d completed, %d contended, %d abandoned, want %d ended", res.Completed, res.Contended, res.Abandoned, want)
	}
	txns, contended := 0, 0
	for _, site := range []string{"a/", "b/"} {
		l := res.Latencies[site]
		if l == nil || len(l.Transactions) == 0 || len(l.TransactionRounds) != len(l.Transactions) {
			t.Fatalf("site %s: latencies %+v", site, l)
		}
		for i, s := range l.Transactions {
			if r := l.TransactionRounds[i]; r < 2 || r > clientcore.DefaultTxnRoundsMax {
				t.Errorf("site %s: a transaction of %d rounds", site, r)
			}
			if s.D >= o.WAN {
				t.Errorf("site %s: a transaction took %v, more than the WAN's one way", site, s.D)
			}
		}
		txns += len(l.Transactions)
		contended += len(l.Contended)
	}
	counted := 0
	for _, n := range res.Transactions {
		counted += n
	}
	if counted != txns || contended != res.Contended {
		t.Errorf("%d transactions in the series, %d measured; %d contended, %d measured", counted, txns, res.Contended, contended)
	}
	if got := res.Throughput(o.Bucket, 0, o.Duration) * float64(o.Duration) / float64(wire.Second); int(got+0.5) != res.Completed {
		t.Errorf("throughput counts %.0f requests, %d completed", got, res.Completed)
	}
}

// TestLoadRefusesBadTransactions: GET-TRANSACTIONs of a strong chain, of
// no key or of more keys than objects are refused.
func TestLoadRefusesBadTransactions(t *testing.T) {
	txns := func(lo, hi int) *Workload {
		return &Workload{Read: 0.5, Transaction: 0.5, TransactionKeysMin: lo, TransactionKeysMax: hi, Distribution: DistributionUniform}
	}
	o := sitesLoad(ProtocolChain, 0)
	o.Workload = txns(2, 5)
	if _, err := RunLoad(o); err == nil || !strings.Contains(err.Error(), "causal") {
		t.Errorf("transactions on strong chains: %v", err)
	}
	for _, keys := range [][2]int{{0, 2}, {3, 2}, {2, 51}} {
		o = sitesLoad(ProtocolCausal, 2)
		o.Workload = txns(keys[0], keys[1])
		if _, err := RunLoad(o); err == nil || !strings.Contains(err.Error(), "transaction's keys") {
			t.Errorf("transactions of %d..%d keys of %d objects: %v", keys[0], keys[1], o.Objects, err)
		}
	}
}
