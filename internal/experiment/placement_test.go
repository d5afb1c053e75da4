package experiment

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

func newTestSimulator(t *testing.T, m Model, seed uint64) *simulator {
	t.Helper()
	s, err := newSimulator(m, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// failNow fails server f at the current time, as a failure event would,
// and runs the policy.
func failNow(t *testing.T, s *simulator, f int32) {
	t.Helper()
	if lost := s.step(event{at: s.now, kind: eventFailure, id: f, gen: s.servers[f].incarnation}); lost >= 0 {
		t.Fatalf("failing server %d made volume %d unavailable", f, lost)
	}
}

// fig7 places volumes with placement.Initial itself: the same chains, head
// first, for the same random numbers.
func TestFig7PlacesWithPlacementInitial(t *testing.T) {
	for _, s := range fig7Strategies {
		for _, tc := range []struct{ n, t int }{{10, 1}, {10, 3}, {37, 2}, {50, 4}} {
			sim := newTestSimulator(t, PaperModel(s, tc.n, tc.t), 5)
			want, err := placement.Initial(s, fig7ServerIDs(tc.n), tc.n*100/tc.t, tc.t, rand.New(rand.NewPCG(5, 0)))
			if err != nil {
				t.Fatal(err)
			}
			if len(sim.chains) != len(want) {
				t.Fatalf("%s %+v: %d volumes, placement.Initial places %d", s, tc, len(sim.chains), len(want))
			}
			for v, ch := range sim.chains {
				var got []wire.NodeID
				for _, i := range ch.Members {
					got = append(got, fig7ServerIDs(tc.n)[i])
				}
				if !slices.Equal(got, want[wire.VolumeID(v)]) {
					t.Fatalf("%s %+v: volume %d on %v, placement.Initial puts it on %v", s, tc, v, got, want[wire.VolumeID(v)])
				}
			}
			sim.checkInvariants()
		}
	}
}

// After a failure, fig7 starts exactly the extensions the placement
// policy decides on the whole cluster's chains (its counts, kept up to
// date event by event, and its list of candidate chains do not change the
// decision).
func TestFig7RecoversAsThePolicyDecides(t *testing.T) {
	for _, s := range fig7Strategies {
		m := PaperModel(s, 30, 3)
		m.RepairDelay = 10 * time.Minute
		m.RecoveryPerServerMax = 2
		sim := newTestSimulator(t, m, 3)
		sim.noFailures = true
		sim.decide()
		sim.run() // the initial rebalancing, if any
		decided := 0
		// The second failure comes while the first one's recovery runs.
		for k, f := range []int32{4, 20, 5} {
			if lost := sim.fail(f); lost >= 0 {
				t.Fatalf("%s: failing %d lost volume %d", s, f, lost)
			}
			cluster := placement.NewCluster(s, m.Replicas, m.RecoveryPerServerMax, m.Servers)
			copy(cluster.Live, sim.cluster.Live)
			chains := make([]placement.Chain, len(sim.chains))
			for v, ch := range sim.chains {
				chains[v] = ch
				chains[v].Members = slices.Clone(ch.Members)
			}
			cluster.Count(chains)
			want := cluster.Recover(chains)
			var got []placement.Change
			sim.onStart = func(v int32, source, target int) {
				got = append(got, placement.Change{Kind: placement.Extend, Volume: wire.VolumeID(v), Server: target, Source: source})
			}
			sim.decide()
			sim.onStart = nil
			if !slices.Equal(got, want) {
				t.Fatalf("%s, server %d failed: fig7 started %v, the policy decides %v", s, f, got, want)
			}
			decided += len(want)
			if k == 0 {
				for range 20 {
					sim.step(sim.events.pop())
				}
			} else {
				sim.run()
			}
		}
		if decided < 6 {
			t.Errorf("%s: the policy started only %d extensions after three failures", s, decided)
		}
	}
}

// Under random failures, after every event: fig7's counts are the ones
// the chains give (placement.Cluster.Count), each server is in at most
// its budget of transfers, ring and random-seq run at most t extensions at
// once, replicas of a volume are on distinct live servers, and the
// candidate chains are exactly those the policy may change.
func TestFig7InvariantsUnderFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates many failures; skipped with -short")
	}
	for _, s := range fig7Strategies {
		for _, n := range []int{10, 30} {
			for _, tt := range []int{2, 3, 4} {
				for _, budget := range []int{1, 4} {
					m := PaperModel(s, n, tt)
					m.VolumesPerServer = 20
					m.RepairDelay = 10 * time.Minute
					m.RecoveryPerServerMax = budget
					m.Horizon = 100 * time.Hour
					// Replications until 20 failures have been simulated.
					failures := 0
					for seed := uint64(0); seed < 50 && failures < 20; seed++ {
						sim := newTestSimulator(t, m, seed)
						sim.afterEvent = sim.checkInvariants
						for i := range sim.servers {
							sim.scheduleFailure(int32(i))
						}
						sim.decide()
						failures += sim.run().Failures
					}
					if failures < 20 {
						t.Errorf("%s N=%d t=%d budget %d: only %d failures in 50 replications", s, n, tt, budget, failures)
					}
				}
			}
		}
	}
}

// With t = 1 the first failure of a server holding a volume makes it
// unavailable, so the MTBU is the mean of the minimum of N exponential
// lifetimes: MTBF/N.
func TestSingleReplicaMTBUIsMTBFOverServers(t *testing.T) {
	for _, c := range []struct {
		s placement.Strategy
		n int
	}{{placement.Ring, 10}, {placement.RandomSeq, 25}, {placement.Random, 40}} {
		const reps = 1500
		xs := make([]float64, reps)
		m := PaperModel(c.s, c.n, 1)
		m.VolumesPerServer = 5 // every server holds one: fewer make it no faster
		for r := range reps {
			o, err := Simulate(m, rand.New(rand.NewPCG(42, uint64(r))))
			if err != nil {
				t.Fatal(err)
			}
			if o.Failures != 1 || o.Censored {
				t.Fatalf("%s N=%d: %d failures before the first unavailability, want 1", c.s, c.n, o.Failures)
			}
			xs[r] = o.Hours()
		}
		sum := Summarize(xs)
		want := 24.0 / float64(c.n)
		if math.Abs(sum.Mean-want)/want > 0.08 || sum.Low > want || sum.High < want {
			t.Errorf("%s N=%d t=1: MTBU %.3f h [%.3f, %.3f], want MTBF/N = %.3f h", c.s, c.n, sum.Mean, sum.Low, sum.High, want)
		}
	}
}

// One failure: ring and random-seq re-extend t chains at a time; random
// starts them all within the budgets, and the failed server's chains are
// whole again sooner. Each takes TransferTime once its source and target
// are free, one send and one receive at a time per server.
func TestOneFailureRecoveryParallelism(t *testing.T) {
	whole := map[placement.Strategy]time.Duration{}
	for _, s := range fig7Strategies {
		m := PaperModel(s, 50, 3)
		m.RepairDelay = 10 * time.Minute
		sim := newTestSimulator(t, m, 7)
		sim.noFailures = true
		sim.decide()
		sim.run()
		start, lost := sim.now, sim.cluster.Load[0]
		sim.afterEvent = func() {
			if _, ok := whole[s]; !ok && sim.cluster.Short == 0 {
				whole[s] = time.Duration(sim.now-start) * time.Millisecond
			}
		}
		var active []int
		sim.onStart = func(int32, int, int) { active = append(active, sim.cluster.Active) }
		failNow(t, sim, 0)
		sim.run()
		if len(active) < lost {
			t.Fatalf("%s: %d extensions for %d lost replicas", s, len(active), lost)
		}
		most := slices.Max(active[:lost])
		switch s {
		case placement.Ring, placement.RandomSeq:
			if most != 3 {
				t.Errorf("%s: %d extensions at once, want t = 3", s, most)
			}
			// 100 lost replicas, 3 at a time: at least 34 transfer times.
			if min := 34 * m.TransferTime(); whole[s] < min {
				t.Errorf("%s: whole again after %v, faster than 3 at a time allows (%v)", s, whole[s], min)
			}
		case placement.Random:
			if most <= 3*4 {
				t.Errorf("%s: at most %d extensions at once", s, most)
			}
		}
	}
	if whole[placement.Random] >= whole[placement.RandomSeq] {
		t.Errorf("random took %v to recover one failure, random-seq %v: want random faster", whole[placement.Random], whole[placement.RandomSeq])
	}
}

func TestSameSeedSameOutcome(t *testing.T) {
	for _, s := range fig7Strategies {
		m := PaperModel(s, 30, 3)
		m.RepairDelay = fig7RepairDelay
		a, err := Simulate(m, rand.New(rand.NewPCG(7, 1)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Simulate(m, rand.New(rand.NewPCG(7, 1)))
		c, _ := Simulate(m, rand.New(rand.NewPCG(8, 1)))
		if a != b {
			t.Errorf("%s: same seed, different outcomes %+v and %+v", s, a, b)
		}
		if a == c {
			t.Errorf("%s: different seeds, same outcome %+v", s, a)
		}
	}
}

func TestModelValidation(t *testing.T) {
	for _, m := range []Model{
		PaperModel(placement.Ring, 2, 3),
		PaperModel(placement.Bidirectional, 10, 2),
		func() Model { m := PaperModel(placement.Random, 10, 2); m.RecoveryPerServerMax = -1; return m }(),
		func() Model { m := PaperModel(placement.Random, 10, 2); m.MTBF = 0; return m }(),
	} {
		if _, err := Simulate(m, rand.New(rand.NewPCG(1, 1))); err == nil {
			t.Errorf("Simulate(%+v) accepted an invalid model", m)
		}
	}
}

func TestPaperParameters(t *testing.T) {
	m := PaperModel(placement.Random, 100, 3)
	if got := m.TransferTime(); got != 144*time.Second {
		t.Errorf("a volume's transfer takes %v, want 4h/100 = 144s", got)
	}
	if m.Volumes() != 3333 {
		t.Errorf("%d volumes, want 100·100/3 = 3333", m.Volumes())
	}
	m.ServerCopy = 100 * time.Second
	if got := m.TransferTime(); got != 10*time.Second {
		t.Errorf("a tiny volume's transfer takes %v, want the 10 s minimum", got)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{1, 2, 3, 4, 5})
	// Student t with 4 degrees of freedom: 0.995 quantile 4.604.
	half := 4.604 * math.Sqrt(2.5) / math.Sqrt(5)
	if s.N != 5 || s.Mean != 3 || math.Abs(s.High-(3+half)) > 1e-3 || s.Low != 0 {
		t.Errorf("Summarize: %+v, want mean 3, high %.3f, low clamped to 0", s, 3+half)
	}
	s = Summarize([]float64{10, 10, 10})
	if s.Low != 10 || s.High != 10 {
		t.Errorf("Summarize of equal samples: %+v", s)
	}
}
