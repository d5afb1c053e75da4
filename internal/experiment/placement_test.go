package experiment

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func newTestSimulator(t *testing.T, m Model, seed uint64) *simulator {
	t.Helper()
	s, err := newSimulator(m, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// failNow fails server f at the current time, as a failure event would.
func failNow(t *testing.T, s *simulator, f int32) {
	t.Helper()
	if lost := s.step(event{at: s.now, kind: eventFailure, id: f, gen: s.servers[f].incarnation}); lost >= 0 {
		t.Fatalf("failing server %d made volume %d unavailable", f, lost)
	}
}

// With t = 1 the first failure makes its volumes unavailable, so the MTBU
// is the mean of the minimum of N exponential lifetimes: MTBF/N.
func TestSingleReplicaMTBUIsMTBFOverServers(t *testing.T) {
	for _, c := range []struct {
		s Strategy
		n int
	}{{Ring, 10}, {RndSeq, 25}, {RndPar, 40}} {
		s, n := c.s, c.n
		{
			const reps = 1500
			xs := make([]float64, reps)
			for r := range reps {
				o, err := Simulate(PaperModel(s, n, 1), rand.New(rand.NewPCG(42, uint64(r))))
				if err != nil {
					t.Fatal(err)
				}
				if o.Failures != 1 || o.Censored {
					t.Fatalf("%s N=%d: %d failures before the first unavailability, want 1", s, n, o.Failures)
				}
				xs[r] = o.Hours()
			}
			sum := Summarize(xs)
			want := 24.0 / float64(n)
			if math.Abs(sum.Mean-want)/want > 0.08 || sum.Low > want || sum.High < want {
				t.Errorf("%s N=%d t=1: MTBU %.3f h [%.3f, %.3f], want MTBF/N = %.3f h", s, n, sum.Mean, sum.Low, sum.High, want)
			}
		}
	}
}

func TestRingPlacesReplicasOnConsecutiveServers(t *testing.T) {
	for _, n := range []int{4, 10, 37} {
		for tt := 1; tt <= 4; tt++ {
			m := PaperModel(Ring, n, tt)
			s := newTestSimulator(t, m, 1)
			if len(s.volumes) != n*100/tt {
				t.Fatalf("N=%d t=%d: %d volumes, want %d", n, tt, len(s.volumes), n*100/tt)
			}
			for v := range s.volumes {
				vol := &s.volumes[v]
				for k := range tt {
					if want := int32((v + k) % n); vol.holders[k] != want {
						t.Fatalf("N=%d t=%d: volume %d on %v, want consecutive servers from %d", n, tt, v, vol.holders[:vol.nHolders], v%n)
					}
				}
			}
			for i := range s.servers {
				if l := len(s.servers[i].volumes); l < 100-tt || l > 100+tt {
					t.Errorf("N=%d t=%d: server %d holds %d volumes, want about 100", n, tt, i, l)
				}
			}
			s.checkInvariants()
		}
	}
}

func TestRandomPlacementIsBalanced(t *testing.T) {
	for _, s := range []Strategy{RndSeq, RndPar} {
		for tt := 1; tt <= 4; tt++ {
			sim := newTestSimulator(t, PaperModel(s, 20, tt), 3)
			total := 0
			for i := range sim.servers {
				l := len(sim.servers[i].volumes)
				total += l
				if l > 100 || l < 100-tt {
					t.Errorf("%s t=%d: server %d holds %d volumes, want 100 (a few fewer when t does not divide 2000)", s, tt, i, l)
				}
			}
			if total != len(sim.volumes)*tt {
				t.Errorf("%s t=%d: %d replicas for %d volumes", s, tt, total, len(sim.volumes))
			}
			sim.checkInvariants() // replicas of a volume on distinct servers
		}
	}
}

// After one failure on the ring, each chain that lost a replica extends
// to the next server clockwise past its end: the failed server's t
// successors receive its data, one volume at a time each, so recovery runs
// t transfers in parallel and takes about ServerCopy/t. The failed server
// comes back empty; the next failure of a chain around it refills it.
func TestRingRecoveryGoesToTheNextServers(t *testing.T) {
	const n, tt, f = 10, 3, 4
	m := PaperModel(Ring, n, tt)
	m.RepairDelay = 10 * time.Minute // the failed server is not a target
	s := newTestSimulator(t, m, 1)
	s.noFailures = true
	s.afterEvent = s.checkInvariants
	before := make([][]int32, len(s.volumes))
	for v := range s.volumes {
		before[v] = slices.Clone(s.volumes[v].holders[:s.volumes[v].nHolders])
	}
	targets := map[int32]bool{}
	s.onStart = func(tr *transfer) { targets[tr.target] = true }
	failNow(t, s, f)
	if o := s.run(); !o.Censored || o.Transfers != 100 || o.ActiveMax != tt {
		t.Fatalf("recovery: %+v, want 100 transfers, %d at once, no unavailability", o, tt)
	}
	if want := map[int32]bool{5: true, 6: true, 7: true}; !mapsEqual(targets, want) {
		t.Errorf("recovery targets %v, want the failed server's %d successors %v", targets, tt, want)
	}
	// 100 volumes over 3 targets: the busiest receives 34, one after another.
	if got, want := time.Duration(s.now)*time.Millisecond, 34*m.TransferTime(); got != want {
		t.Errorf("recovery took %v, want %v", got, want)
	}
	for v := range s.volumes {
		got := slices.Clone(s.volumes[v].holders[:s.volumes[v].nHolders])
		want := before[v]
		if i := slices.Index(want, f); i >= 0 {
			next := (want[len(want)-1] + 1) % n
			want = append(slices.Delete(slices.Clone(want), i, i+1), next)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("volume %d on %v after recovery, want %v (was %v)", v, got, want, before[v])
		}
	}
}

func mapsEqual(a, b map[int32]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// One failure with random placement: rndseq recovers t volumes at a time,
// rndpar as many as the 40% limit allows.
func TestRandomRecoveryParallelism(t *testing.T) {
	for _, c := range []struct {
		s    Strategy
		n    int
		want int
	}{{RndSeq, 50, 3}, {RndPar, 50, 20}, {RndPar, 10, 4}} {
		m := PaperModel(c.s, c.n, 3)
		s := newTestSimulator(t, m, 5)
		s.noFailures = true
		s.afterEvent = s.checkInvariants
		failNow(t, s, 0)
		o := s.run()
		if o.Transfers != 100 || o.ActiveMax != c.want {
			t.Errorf("%s N=%d: %d transfers, %d at most at once; want 100 and %d", c.s, c.n, o.Transfers, o.ActiveMax, c.want)
		}
	}
}

// Under random failures, checked after every event: every volume has t
// replicas counting queued and running recoveries, on distinct servers; a
// server sends and receives one volume at a time; at most 40% of the
// servers' count of recoveries run at once, and for ring and rndseq at
// most t of one failure's.
func TestRecoveryLimitsUnderFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates many failures; skipped with -short")
	}
	for _, s := range Strategies {
		for _, n := range []int{10, 30} {
			for _, tt := range []int{2, 3, 4} {
				for seed := range uint64(2) {
					m := PaperModel(s, n, tt)
					m.RepairDelay = 10 * time.Minute
					m.Horizon = 200 * time.Hour
					sim := newTestSimulator(t, m, seed)
					for i := range sim.servers {
						sim.scheduleFailure(int32(i))
					}
					// The full check costs O(volumes): run it every 8th event.
					events := 0
					sim.afterEvent = func() {
						if events++; events%8 == 0 {
							sim.checkInvariants()
						}
					}
					limit := m.TransfersMax()
					sim.onStart = func(tr *transfer) {
						if sim.active > limit {
							t.Fatalf("%s N=%d t=%d: %d recoveries running, limit %d", s, n, tt, sim.active, limit)
						}
					}
					o := sim.run()
					if o.ActiveMax > limit {
						t.Errorf("%s N=%d t=%d: %d recoveries at once, limit %d", s, n, tt, o.ActiveMax, limit)
					}
					if s != RndPar && o.GroupActiveMax > tt {
						t.Errorf("%s N=%d t=%d: %d recoveries of one failure at once, limit t", s, n, tt, o.GroupActiveMax)
					}
				}
			}
		}
	}
}

func TestSameSeedSameOutcome(t *testing.T) {
	for _, s := range Strategies {
		m := PaperModel(s, 30, 3)
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
		PaperModel(Ring, 2, 3),
		PaperModel(Strategy(9), 10, 2),
		func() Model { m := PaperModel(RndPar, 10, 2); m.RecoveryShareMax = 0; return m }(),
		func() Model { m := PaperModel(RndPar, 10, 2); m.MTBF = 0; return m }(),
	} {
		if _, err := Simulate(m, rand.New(rand.NewPCG(1, 1))); err == nil {
			t.Errorf("Simulate(%+v) accepted an invalid model", m)
		}
	}
}

func TestPaperParameters(t *testing.T) {
	m := PaperModel(RndPar, 100, 3)
	if got := m.TransferTime(); got != 144*time.Second {
		t.Errorf("a volume's transfer takes %v, want 4h/100 = 144s", got)
	}
	if got := m.TransfersMax(); got != 40 {
		t.Errorf("%d recoveries at once on 100 servers, want 40", got)
	}
	m.ServerCopy = 100 * time.Second
	if got := m.TransferTime(); got != 10*time.Second {
		t.Errorf("a tiny volume's transfer takes %v, want the 10 s minimum", got)
	}
	if got := PaperModel(Ring, 100, 3).GroupTransfersMax(); got != 3 {
		t.Errorf("ring runs %d of one failure's recoveries at once, want t = 3", got)
	}
	if got := PaperModel(RndSeq, 100, 3).GroupTransfersMax(); got != 3 {
		t.Errorf("rndseq runs %d of one failure's recoveries at once, want t = 3", got)
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

// A server that came back empty inside a chain is the chain's next target:
// the ring's chains stay on consecutive servers.
func TestRingRefillsAReturnedServer(t *testing.T) {
	const n, tt = 10, 3
	m := PaperModel(Ring, n, tt)
	m.RepairDelay = 10 * time.Minute
	s := newTestSimulator(t, m, 1)
	s.noFailures = true
	s.afterEvent = s.checkInvariants
	failNow(t, s, 4)
	s.run() // recovery onto 5, 6, 7; server 4 back, empty
	if !s.servers[4].up || len(s.servers[4].volumes) != 0 {
		t.Fatalf("server 4: up %v with %d volumes, want up and empty", s.servers[4].up, len(s.servers[4].volumes))
	}
	failNow(t, s, 3)
	s.run()
	// Volumes starting at 2 were on 2, 3, 4, then 2, 3, 5: losing 3 refills 4.
	for v := range s.volumes {
		if s.volumes[v].start != 2 {
			continue
		}
		got := slices.Sorted(slices.Values(s.volumes[v].holders[:s.volumes[v].nHolders]))
		if !slices.Equal(got, []int32{2, 4, 5}) {
			t.Fatalf("volume %d on %v, want [2 4 5]", v, got)
		}
	}
}
