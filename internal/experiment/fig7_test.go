package experiment

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/placement"
)

func fig7CSV(t *testing.T, c Fig7Config) []byte {
	t.Helper()
	points, err := RunFig7(c)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFig7CSV(&b, points); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The same seed gives the same CSV, however many workers share the
// replications; another seed gives another.
func TestFig7SameSeedSameCSV(t *testing.T) {
	small := Fig7Config{Seed: 3, Servers: []int{10, 20}, Replicas: []int{1, 2, 3}, Replications: 4}
	a := fig7CSV(t, small)
	small.Workers = 3
	b := fig7CSV(t, small)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different CSV:\n%s\n%s", a, b)
	}
	small.Seed = 4
	if c := fig7CSV(t, small); bytes.Equal(a, c) {
		t.Fatalf("seeds 3 and 4 gave the same CSV:\n%s", a)
	}
	rows, err := csv.NewReader(bytes.NewReader(a)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows[0], ","); got != "strategy,servers,t,mtbu_hours,ci_low_hours,ci_high_hours,replications,censored" {
		t.Errorf("header %q", got)
	}
	if len(rows) != 1+3*2*3 {
		t.Errorf("%d rows, want a header and 18 points", len(rows))
	}
}

// The paper's claims (CR §5.4) that Catena's placement policy keeps, on
// the --quick grid (20 and 100 servers, 20 replications per point):
// ring's MTBU falls as servers are added; for t > 1 rndseq has a lower
// MTBU than ring; at 100 servers rndpar outperforms rndseq and ring for
// t ≥ 3. With 20 replications each compared difference is 3.6 to 6.8
// standard errors (estimated from the full run's intervals), and every
// check held for seeds 1-20 of the --quick grid, the closest by a factor
// of 1.4 (docs/experiments.md). See there too for the claims Catena's
// policy does not keep (rndpar improving with the number of servers,
// rndpar above ring at t = 2).
func TestFig7QuickShowsThePapersOrdering(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates many failures; skipped with -short")
	}
	points, err := RunFig7(Fig7Config{Seed: 1, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	checkFig7Claims(t, points)

	dir := t.TempDir()
	png := filepath.Join(dir, "fig7.png")
	if err := PlotFig7(png, points, "test"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("fig7.png: not a PNG (%v)", err)
	}
}

// checkFig7Claims checks TestFig7QuickShowsThePapersOrdering's claims on
// the points of a --quick run.
func checkFig7Claims(t testing.TB, points []Fig7Point) {
	t.Helper()
	mtbu := map[placement.Strategy]map[[2]int]float64{}
	for _, p := range points {
		if mtbu[p.Strategy] == nil {
			mtbu[p.Strategy] = map[[2]int]float64{}
		}
		mtbu[p.Strategy][[2]int{p.Servers, p.Replicas}] = p.Mean
		if p.N != fig7QuickReplications || p.Censored != 0 {
			t.Errorf("%+v: want %d uncensored replications", p, fig7QuickReplications)
		}
	}
	ring, rndseq, rndpar := placement.Ring, placement.RandomSeq, placement.Random
	at := func(s placement.Strategy, n, tt int) float64 { return mtbu[s][[2]int{n, tt}] }
	below := func(what string, a, b float64) {
		if a >= b {
			t.Errorf("%s: %.2f h not below %.2f h", what, a, b)
		}
	}
	small, large := fig7QuickServers[0], fig7QuickServers[len(fig7QuickServers)-1]
	for tt := 2; tt <= 4; tt++ {
		below(fmt.Sprintf("ring t=%d, N=%d vs %d", tt, large, small), at(ring, large, tt), at(ring, small, tt))
		below(fmt.Sprintf("N=%d t=%d, rndseq vs ring", large, tt), at(rndseq, large, tt), at(ring, large, tt))
	}
	for tt := 3; tt <= 4; tt++ {
		below(fmt.Sprintf("N=%d t=%d, rndseq vs rndpar", large, tt), at(rndseq, large, tt), at(rndpar, large, tt))
		below(fmt.Sprintf("N=%d t=%d, ring vs rndpar", large, tt), at(ring, large, tt), at(rndpar, large, tt))
	}
}

func TestRunRejectsUnknownExperimentAndMissingOut(t *testing.T) {
	if err := Run("fig8", Options{Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `unknown experiment "fig8"`) || !strings.Contains(err.Error(), "fig7") {
		t.Errorf("Run(fig8): %v, want an error naming fig8 and the known experiments", err)
	}
	if err := Run("fig7", Options{}); err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("Run without --out: %v, want an error asking for --out", err)
	}
}
