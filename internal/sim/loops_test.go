package sim

import (
	"testing"

	"github.com/catena-kv/catena/internal/chain"
)

// Servers whose volumes run on several event loops (chain.SteppedLoops,
// the loops' own code) keep every guarantee: with random faults, and
// with every member of a chain crashing at once between the loops'
// commits, no acknowledged write is lost and every history stays
// linearizable.
func TestLoopsKeepEveryGuarantee(t *testing.T) {
	opened, looped := 0, 0
	crash := func(c *Cluster) {
		if _, ok := c.server(c.Config().Head()).(*chain.SteppedLoops); ok {
			looped++
		}
		crashWholeChainIn(c, &opened)
	}
	for seed := uint64(1); seed <= 6; seed++ {
		o := Options{Seed: seed, Volumes: 5, Loops: 3}
		if seed%2 == 0 {
			o.Faults = true
		} else {
			o.Durable, o.Script, o.Network = true, crash, slowDisks
		}
		r := Run(o)
		if r.Err != nil {
			t.Fatalf("seed %d: %v", seed, r.Err)
		}
		if r.Operations == 0 {
			t.Fatalf("seed %d: no operations: the run tests nothing", seed)
		}
	}
	if looped != 3 {
		t.Fatalf("%d of 3 crash runs had servers of several loops", looped)
	}
	if opened == 0 {
		t.Fatal("no crash fell while the tail held an update the head's disk lacked: the script tests nothing")
	}
}
