package sim

import "testing"

// Three sites under hierarchical replication control without faults:
// clients at every site share keys under three directories, and the
// whole history is linearizable, final reads at every site included
// (durable and relaxed: seeds 1 and 33 draw each).
func TestHierarchicalSitesWithoutFaults(t *testing.T) {
	for _, seed := range []uint64{1, 33} {
		r := Run(Options{Seed: seed, Sites: 3, Hierarchical: true})
		if r.Err != nil {
			t.Fatalf("seed %d: %v", seed, r.Err)
		}
		if r.Operations < 100 {
			t.Fatalf("seed %d: %d operations", seed, r.Operations)
		}
		t.Logf("seed %d: %d operations linearizable", seed, r.Operations)
	}
}
