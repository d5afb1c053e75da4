package sim

import (
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

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

// A causal chain's first k members hold an answered update the rest of
// the chain lacks, and both are cut off from the master for longer than
// the failure timeout, while they still hold it. The master may remove
// the first of them (the second holds everything answered) but not the
// second: without it the chain would go on from a member that never
// received the update, and the update would be lost when the partition
// heals. The chain waits for it instead, and the update survives.
func TestCausalUpdateOnFirstKMembersSurvivesTheirPartition(t *testing.T) {
	s := newScenario(t, Options{ChainLength: 3, Causal: true, K: 2})
	s.put("k", "a")
	s.runUntil(wire.Second, "s3 to apply the first put", func() bool { return s.applied("s3") == 1 })

	s.holdForwards("s2", "s3")
	s.put("k", "b") // answered by s2, the k-th member; s3 never receives it
	master := s.c.Master()
	for _, id := range []wire.NodeID{"s1", "s2"} {
		s.c.Partition(master, id, string(id)+" cut off from the master", 5*wire.Second)
	}
	s.run(4 * wire.Second)
	if c := s.c.Config(); c.Index("s2") != 0 {
		t.Fatalf("during the partition the chain is %v: s2, the last member holding the answered put, must stay its head", c.Chain)
	}
	s.holdBack(nil)
	s.run(2 * wire.Second) // the partition heals
	if got := s.get("k"); got != "b" {
		t.Fatalf("k = %q after the partition healed, want b (answered before it)", got)
	}
	s.runUntil(5*wire.Second, "s3 to hold the answered put", func() bool { return s.applied("s3") >= 2 })
}
