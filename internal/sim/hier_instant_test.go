package sim

import "testing"

// A hierarchical tail whose relay log was trimmed through everything it
// still had to relay to a site (every site held those updates stable)
// stopped relaying with a protocol error instead of moving its cursor
// on: seed 21 with commits that take no time (ADR 17's disk model).
func TestHierarchicalRelayPastAWhollyTrimmedLog(t *testing.T) {
	if r := Run(Options{Seed: 21, Faults: true, Sites: 3, Hierarchical: true, Network: instantCommits()}); r.Err != nil {
		t.Fatalf("seed 21, instant commits: %v", r.Err)
	}
}
