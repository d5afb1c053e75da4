package sim

import "testing"

// Causal runs that once lost an answered update, each replayed with the
// options it failed with.
func TestCausalRegressionSeeds(t *testing.T) {
	for _, tc := range []struct {
		seed       uint64
		k, volumes int
		bug        string
	}{
		{12, 0, 2, "a rebalancing shrink removed the head of a k = 1 chain, the only member holding the updates it had just answered"},
		{21, 0, 0, "the same, with the volumes drawn per seed"},
		{14, 1, 3, "a false suspicion of a k = 1 head: it answered updates alone while cut off from the master, which then removed it"},
	} {
		o := Options{Seed: tc.seed, Faults: true, Causal: true, K: tc.k, Volumes: tc.volumes}
		if r := Run(o); r.Err != nil {
			t.Errorf("seed %d (k %d, volumes %d; was: %s): %v\nreplay: go run ./cmd/catena sim -seed %d -faults -mode causal -k %d -volumes %d",
				tc.seed, tc.k, tc.volumes, tc.bug, r.Err, tc.seed, tc.k, tc.volumes)
		}
	}
}
