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

// Seeds with faults that found liveness bugs of hierarchical control, each
// failing before its fix (catena sim --seed N --faults --mode
// hierarchical): 1, a member re-admitted and removed at once (its lease
// silence counted from before its removal); 2, a tail's lease requests
// sent to another site's old head for ever; 3, a member silent to a
// joining site's handshake removed, and a refused restored election
// asked for ever; 12, a returning site's Fetch never re-routed; 17, a
// Fetch at a server no longer the tail taken for a protocol error; 19, a
// view decided by the proposer it excluded ignored by the others, and a
// site that missed it never learning it; 25, a restored deep election
// turned into a malformed shallow one; 27, reads forwarded for ever to a
// server that left its chain; 33, control messages sent to an old head
// dropped silently; 38, a vote an excluded site granted outliving the
// election; 11, a history porcupine could not check in 30 s for its
// unknown writes; 43 and 85, votes whose release was lost refusing the
// next proposers for ever; 134, held control messages never sent after
// a resynchronisation; 370, a site that accepted a view removing
// another still granting it leases; 857, a returning site's Fetch
// re-sent long after it learned the member's new tail.
func TestHierarchicalSitesFaultSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("several simulated runs with faults")
	}
	for _, seed := range []uint64{1, 2, 3, 11, 12, 17, 19, 25, 27, 33, 38, 43, 85, 134, 370, 857} {
		if r := Run(Options{Seed: seed, Faults: true, Sites: 3, Hierarchical: true}); r.Err != nil {
			t.Errorf("seed %d: %v", seed, r.Err)
		}
	}
}
