package experiment

import (
	"bytes"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// The per-request demands of BCRDemand's busiest processor. With a
// process per chain it is a chain's tail: cr's executes every request
// (0.9 reads + 0.1 forwarded writes), each of bcr's half of them, each of
// rotated4's a quarter. With one process per server it is cr's tail, a
// BCR end server (0.55) or any rotated4 server (0.325).
func TestBCRDemand(t *testing.T) {
	for _, tc := range []struct {
		m    BCRModel
		v    BCRVariant
		want float64
	}{
		{BCRProcessPerChain, BCRChain, 1}, {BCRProcessPerChain, BCRBidirectional, 0.5}, {BCRProcessPerChain, BCRRotated4, 0.25},
		{BCROneProcess, BCRChain, 1}, {BCROneProcess, BCRBidirectional, 0.55}, {BCROneProcess, BCRRotated4, 0.325},
	} {
		got, err := bcrMaxDemand(tc.v, tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s %s: bottleneck demand %.4f per request, want %.4f", tc.m, tc.v, got, tc.want)
		}
		// Every request is executed once at its head or tail, and each
		// write once more at every other member.
		d, _ := BCRDemand(tc.v, tc.m)
		sum := 0.0
		for _, x := range d {
			sum += x
		}
		if want := 1 + 3*bcrUpdateFraction; math.Abs(sum-want) > 1e-9 {
			t.Errorf("%s %s: demands sum to %.4f per request, want %.4f", tc.m, tc.v, sum, want)
		}
	}
	if _, err := BCRDemand(BCRChain, "two-process"); err == nil {
		t.Error("an unknown model gave no error")
	}
}

// The same seed gives the same CSVs, however many workers share the runs;
// bcr.csv has exactly the three columns.
func TestBCRSameSeedSameCSV(t *testing.T) {
	csvOf := func(workers int, seed uint64) ([]byte, []byte) {
		points, err := RunBCR(Options{Seed: seed, Workers: workers, Progress: &bytes.Buffer{}}, BCRModels, BCRVariants, []int{10, 20}, 2)
		if err != nil {
			t.Fatal(err)
		}
		var b, d bytes.Buffer
		if err := WriteBCRCSV(&b, points); err != nil {
			t.Fatal(err)
		}
		if err := WriteBCRDetailCSV(&d, points); err != nil {
			t.Fatal(err)
		}
		return b.Bytes(), d.Bytes()
	}
	a, ad := csvOf(1, 5)
	b, bd := csvOf(3, 5)
	if !bytes.Equal(a, b) || !bytes.Equal(ad, bd) {
		t.Fatalf("same seed, different CSV:\n%s\n%s\n%s\n%s", a, b, ad, bd)
	}
	if _, cd := csvOf(2, 6); bytes.Equal(ad, cd) {
		t.Fatalf("seeds 5 and 6 gave the same CSV:\n%s", ad)
	}
	rows, err := csv.NewReader(bytes.NewReader(a)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0], []string{"clients", "variant", "throughput"}) {
		t.Errorf("bcr.csv header %q, want exactly clients,variant,throughput", rows[0])
	}
	if len(rows) != 1+2*len(BCRVariants) {
		t.Errorf("bcr.csv: %d rows, want a header and %d points", len(rows), 2*len(BCRVariants))
	}
	detail, err := csv.NewReader(bytes.NewReader(ad)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(detail[0], BCRDetailHeader) || detail[0][0] != "model" {
		t.Errorf("bcr_detail.csv header %q", detail[0])
	}
	if len(detail) != 1+2*len(BCRModels)*len(BCRVariants) {
		t.Errorf("bcr_detail.csv: %d rows, want a header and %d points", len(detail), 2*len(BCRModels)*len(BCRVariants))
	}
	// bcr.csv's rows are bcr_detail.csv's for the paper's model.
	var paper [][]string
	for _, r := range detail[1:] {
		if r[0] == string(BCRPaperModel) {
			paper = append(paper, r[1:4])
		}
	}
	if !slices.EqualFunc(paper, rows[1:], slices.Equal) {
		t.Errorf("bcr.csv %q is not bcr_detail.csv's %s rows %q", rows[1:], BCRPaperModel, paper)
	}
}

// BCR §5's claims on the --quick grid (200 and 500 clients, 4 paired
// replications, seed 1), for both server models.
//
// With a process per chain (the paper's servers) the uniform-cost bound
// is 1/0.5 = 2 and we assert the BCR/CR ≥ 1.8. With one process
// per server the bound is 1/0.55 = 1.818 and the random imbalance between
// LP1 and LP2 costs about 1–1.5%, so the expected ratio is 1.79–1.80 and
// a mean of a few replications falls on either side of 1.8 by chance
// (docs/experiments.md): we assert the mean ratio is within 3% of that
// bound. For both, each run is exactly as long as its busiest
// processor's work.
func TestBCRQuickShowsThePapersClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 48 load runs; skipped with -short")
	}
	clients, reps := bcrGrid(true)
	points, err := RunBCR(Options{Seed: 1, Workers: 0, Progress: &bytes.Buffer{}}, BCRModels, BCRVariants, clients, reps)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		m BCRModel
		v BCRVariant
		c int
	}
	at := map[key]BCRPoint{}
	for _, p := range points {
		at[key{p.Model, p.Variant, p.Clients}] = p
		t.Logf("%-17s %3d clients %-8s %7.1f req/s [%.1f, %.1f]  x%.3f cr [%.3f, %.3f]  exec %.3f s",
			p.Model, p.Clients, p.Variant, p.Mean, p.Low, p.High, p.Ratio.Mean, p.Ratio.Low, p.Ratio.High, p.Exec.Mean)
		for r, run := range p.Runs {
			// Throughput is bottleneck-bound: the busiest processor is
			// busy 1 ms per message it executes and almost never idle.
			busy := wire.Time(run.Bottleneck) * BCRCosts.Query
			if run.Exec < busy || run.Exec > busy+busy/100+5*wire.Millisecond {
				t.Errorf("%s %s %d clients rep %d: executed in %v, its busiest processor works %v", p.Model, p.Variant, p.Clients, r, run.Exec, busy)
			}
		}
	}
	if len(at) != len(BCRModels)*len(BCRVariants)*len(clients) {
		t.Fatalf("%d points, want %d", len(at), len(BCRModels)*len(BCRVariants)*len(clients))
	}
	for _, m := range BCRModels {
		for _, c := range clients {
			cr, bcr, rot := at[key{m, BCRChain, c}], at[key{m, BCRBidirectional, c}], at[key{m, BCRRotated4, c}]
			// "BCR outperforms CR ... by approximately 85%".
			switch m {
			case BCRProcessPerChain:
				// The paper's servers: at least the 1.8, at most
				// the bound 1/0.5 = 2.
				if bcr.Ratio.Mean < 1.8 || bcr.Ratio.Mean > 2 {
					t.Errorf("%s %d clients: bcr/cr = %.3f, want in [1.8, 2]", m, c, bcr.Ratio.Mean)
				}
			case BCROneProcess:
				// Within 3% below the bound 1/0.55.
				if bound := 1 / 0.55; bcr.Ratio.Mean < 0.97*bound || bcr.Ratio.Mean > 1.01*bound {
					t.Errorf("%s %d clients: bcr/cr = %.3f, want within 3%% below %.3f", m, c, bcr.Ratio.Mean, bound)
				}
			}
			// "BCR execution time is less than CR execution time by a
			// factor of approximately two."
			if f := cr.Exec.Mean / bcr.Exec.Mean; f < 1.7 {
				t.Errorf("%s %d clients: cr's execution time only %.2f× bcr's", m, c, f)
			}
			// rotated4 spreads heads and tails over every server: above
			// bcr, intervals disjoint.
			if rot.Ratio.Low <= bcr.Ratio.High {
				t.Errorf("%s %d clients: rotated4/cr %.3f [%.3f, %.3f] not above bcr/cr %.3f [%.3f, %.3f]",
					m, c, rot.Ratio.Mean, rot.Ratio.Low, rot.Ratio.High, bcr.Ratio.Mean, bcr.Ratio.Low, bcr.Ratio.High)
			}

			// Tables 3-6. cr: s1 executes only writes, s4 only reads, and
			// together every request.
			total := c * bcrRequestsPerClient
			for r, run := range cr.Runs {
				h := run.Handled
				if h[0][0] != 0 || h[0][1] == 0 || h[3][1] != 0 || h[3][0] == 0 || h[0][1]+h[3][0] != total {
					t.Errorf("%s cr %d clients rep %d: s1 executed %d reads, %d writes; s4 %d reads, %d writes", m, c, r, h[0][0], h[0][1], h[3][0], h[3][1])
				}
			}
			// bcr: s1 and s4 both execute reads and writes, in near-equal
			// amounts, and together every request; s2 and s3 none.
			for r, run := range bcr.Runs {
				h := run.Handled
				if h[0][0] == 0 || h[0][1] == 0 || h[3][0] == 0 || h[3][1] == 0 || h[0][0]+h[0][1]+h[3][0]+h[3][1] != total ||
					h[1] != [2]int{} || h[2] != [2]int{} {
					t.Errorf("%s bcr %d clients rep %d: executed (reads, writes) %v", m, c, r, h)
				}
			}
			near := func(what string, a, b, tol float64) {
				if math.Abs(a-b) > tol*(a+b)/2 {
					t.Errorf("%s bcr %d clients: s1 executed %.1f %s, s4 %.1f: not within %.0f%%", m, c, a, what, b, 100*tol)
				}
			}
			near("reads", bcr.MeanHandled(0, 0), bcr.MeanHandled(3, 0), 0.10)
			near("writes", bcr.MeanHandled(0, 1), bcr.MeanHandled(3, 1), 0.25)
		}
	}

	dir := t.TempDir()
	png := filepath.Join(dir, "bcr.png")
	if err := PlotBCR(png, points, "test"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("bcr.png: not a PNG (%v)", err)
	}
}
