package sim

import (
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/wire"
)

// cutTailFromMaster is a fault script: the tail stays reachable by clients
// and its predecessor but not by the master, so it is removed while alive.
func cutTailFromMaster(c *Cluster) {
	c.At(c.Now()+300*wire.Millisecond, func() {
		c.Partition(c.Config().Tail(), c.Master(), "false suspicion of the tail", 2*wire.Second)
	})
}

// The checkers must catch deliberately broken protocols: each mutation
// makes some run of its scenario fail, with the kind of failure expected.
func TestCheckersCatchMutations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutation chain.Mutations
		script   func(*Cluster)
		seeds    int
		want     string // a substring of the failure
	}{
		{
			name:     "head answers before the tail processed the update",
			mutation: chain.Mutations{HeadRepliesEarly: true},
			seeds:    3, want: "linearizable",
		},
		{
			name:     "predecessor does not resend Sent to a new successor",
			mutation: chain.Mutations{SkipResendOnSync: true},
			seeds:    3, want: "liveness",
		},
		{
			name:     "removed tail keeps serving without a lease",
			mutation: chain.Mutations{IgnoreLease: true},
			script:   cutTailFromMaster,
			seeds:    3, want: "not linearizable",
		},
		{
			name:     "joiner made tail while the old tail keeps applying",
			mutation: chain.Mutations{NoHandoffPause: true},
			seeds:    8, want: "INVARIANT inprocess requests",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs []string
			for seed := uint64(1); seed <= uint64(tc.seeds); seed++ {
				r := Run(Options{Seed: seed, Faults: tc.script == nil, Script: tc.script, Mutations: tc.mutation})
				if r.Err != nil {
					errs = append(errs, r.Err.Error())
					if strings.Contains(r.Err.Error(), tc.want) {
						return
					}
				}
			}
			t.Fatalf("no run of %d seeds failed with %q; failures: %q", tc.seeds, tc.want, errs)
		})
	}
}

// The same broken-lease scenario passes with the real protocol.
func TestCutTailFromMasterPasses(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		if r := Run(Options{Seed: seed, Script: cutTailFromMaster}); r.Err != nil {
			t.Fatalf("seed %d: %v", seed, r.Err)
		}
	}
}

// Same seed, same run; another seed, another run.
func TestDeterminism(t *testing.T) {
	a := Run(Options{Seed: 7, Faults: true})
	b := Run(Options{Seed: 7, Faults: true})
	if a.Err != nil || b.Err != nil {
		t.Fatalf("seed 7 failed: %v / %v", a.Err, b.Err)
	}
	if a.Trace != b.Trace || a.Operations != b.Operations || strings.Join(a.Faults, ";") != strings.Join(b.Faults, ";") {
		t.Fatalf("two runs of seed 7 differ: trace %x/%x, %d/%d operations, faults %q / %q",
			a.Trace, b.Trace, a.Operations, b.Operations, a.Faults, b.Faults)
	}
	if c := Run(Options{Seed: 8, Faults: true}); c.Trace == a.Trace {
		t.Fatalf("seeds 7 and 8 produced the same trace %x", a.Trace)
	}
}

// A short many-seed run with faults, as `catena sim --faults` does; the
// 300-seed run is part of .ci/run.
func TestRandomFaults(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		if r := Run(Options{Seed: seed, Faults: true}); r.Err != nil {
			t.Errorf("seed %d: %v\nfaults: %q\nreplay: go run ./cmd/catena sim -seed %d -faults", seed, r.Err, r.Faults, seed)
		}
	}
}
