package experiment

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// The bound of one chain of three: 20 updates/s (50 ms at the head), 200
// queries/s (5 ms at the tail); a server in two chains does both shares.
func TestScaleoutBound(t *testing.T) {
	one := []wire.Config{{Volume: 0, Chain: []wire.NodeID{"s1", "s2", "s3"}}}
	for _, tc := range []struct {
		pct  int
		want float64
	}{{100, 20}, {0, 200}, {50, 1 / (0.5 * 0.050)}} {
		if got := ScaleoutBound(one, 100, tc.pct); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("one chain, %d%% updates: bound %v, want %v", tc.pct, got, tc.want)
		}
	}
	// Two volumes rotated on two servers: each server heads one and
	// forwards the other's half, whatever the hash's split of 1000
	// objects: (50+20)/2 ms per update at best, so no more than 1/35 ms.
	two := []wire.Config{{Volume: 0, Chain: []wire.NodeID{"s1", "s2"}}, {Volume: 1, Chain: []wire.NodeID{"s2", "s1"}}}
	if got := ScaleoutBound(two, 1000, 100); got > 1000.0/35+1e-9 || got < 25 {
		t.Errorf("two rotated chains: bound %v, want a little under %v", got, 1000.0/35)
	}
}

// The quick run does what the experiment is about: the servers that join
// take chains and raise the throughput a little; only the split spreads
// the work over all six, and its throughput passes the run without one.
// Until the split the two runs are the same run.
func TestScaleoutQuickSplitBeatsNoSplit(t *testing.T) {
	p := scaleoutParams(true)
	runs, err := runScaleoutParams(Options{Seed: 1, Workers: 2, Progress: &bytes.Buffer{}}, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want the two scenarios", len(runs))
	}
	none, split := runs[0], runs[1]
	if none.Scenario != ScaleoutNoSplit || split.Scenario != ScaleoutSplit {
		t.Fatalf("scenarios %s, %s", none.Scenario, split.Scenario)
	}
	for k := range 2 {
		if none.Phases[k].Throughput != split.Phases[k].Throughput || !slices.Equal(none.Phases[k].Chains, split.Phases[k].Chains) {
			t.Errorf("phase %s differs before the split: %+v, %+v", scaleoutPhases[k], none.Phases[k], split.Phases[k])
		}
	}
	a, b := none.Phases[0], none.Phases[1]
	if b.Throughput <= a.Throughput {
		t.Errorf("servers added: %.1f requests/s, not above %.1f", b.Throughput, a.Throughput)
	}
	for i, n := range b.Chains {
		if n == 0 {
			t.Errorf("server s%d holds no chain after the servers joined: %v", i+1, b.Chains)
		}
	}
	for k := 2; k < 4; k++ {
		ns, s := none.Phases[k], split.Phases[k]
		if s.Throughput <= 1.05*ns.Throughput {
			t.Errorf("phase %s: split %.1f requests/s, no split %.1f: want the split's higher", scaleoutPhases[k], s.Throughput, ns.Throughput)
		}
		for i, n := range s.Chains {
			if n != s.Volumes*p.T/len(s.Chains) {
				t.Errorf("phase %s: s%d holds %d chains, want %d each: %v", scaleoutPhases[k], i+1, n, s.Volumes*p.T/len(s.Chains), s.Chains)
			}
		}
	}
	var table, csv bytes.Buffer
	if err := WriteScaleoutTable(&table, runs); err != nil {
		t.Fatal(err)
	}
	if err := WriteScaleoutCSV(&csv, runs); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(csv.String(), "\n"); lines != 1+2*len(scaleoutPhases) {
		t.Errorf("%d CSV lines, want a header and one per run and phase:\n%s", lines, csv.String())
	}
	if !strings.Contains(table.String(), "| 100% | d: second split | 6 | 3 / 12 |") {
		t.Errorf("table:\n%s", table.String())
	}
}
