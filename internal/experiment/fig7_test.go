package experiment

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// The paper's qualitative claims (CR §5.4), on the --quick grid (20 and
// 100 servers, 20 replications per point). See docs/experiments.md for the
// claims this model does not reproduce (rndseq vs ring at t = 4, rndpar vs
// ring at t = 2).
func TestFig7QuickShowsThePapersOrdering(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates many failures; skipped with -short")
	}
	points, err := RunFig7(Fig7Config{Seed: 1, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	mtbu := map[Strategy]map[[2]int]float64{}
	for _, p := range points {
		if mtbu[p.Strategy] == nil {
			mtbu[p.Strategy] = map[[2]int]float64{}
		}
		mtbu[p.Strategy][[2]int{p.Servers, p.Replicas}] = p.Mean
		if p.N != fig7QuickReplications || p.Censored != 0 {
			t.Errorf("%+v: want %d uncensored replications", p, fig7QuickReplications)
		}
	}
	at := func(s Strategy, n, tt int) float64 { return mtbu[s][[2]int{n, tt}] }
	for _, n := range fig7QuickServers {
		// "For t > 1, rndseq has lower MTBU than ring."
		for _, tt := range []int{2, 3} {
			if at(RndSeq, n, tt) >= at(Ring, n, tt) {
				t.Errorf("N=%d t=%d: rndseq MTBU %.2f h not below ring's %.2f h", n, tt, at(RndSeq, n, tt), at(Ring, n, tt))
			}
		}
		// Ring: MTBU falls as servers are added.
		if n > fig7QuickServers[0] {
			for tt := 1; tt <= 4; tt++ {
				if at(Ring, n, tt) >= at(Ring, fig7QuickServers[0], tt) {
					t.Errorf("ring t=%d: MTBU %.2f h at N=%d not below %.2f h at N=%d", tt, at(Ring, n, tt), n, at(Ring, fig7QuickServers[0], tt), fig7QuickServers[0])
				}
			}
		}
	}
	// At scale, rndpar outperforms rndseq, and ring too for t >= 3.
	large := fig7QuickServers[len(fig7QuickServers)-1]
	for tt := 2; tt <= 4; tt++ {
		if at(RndPar, large, tt) <= at(RndSeq, large, tt) {
			t.Errorf("N=%d t=%d: rndpar MTBU %.2f h not above rndseq's %.2f h", large, tt, at(RndPar, large, tt), at(RndSeq, large, tt))
		}
		if tt >= 3 && at(RndPar, large, tt) <= at(Ring, large, tt) {
			t.Errorf("N=%d t=%d: rndpar MTBU %.2f h not above ring's %.2f h", large, tt, at(RndPar, large, tt), at(Ring, large, tt))
		}
	}
	// rndpar's MTBU grows with the number of servers for t = 4.
	if at(RndPar, large, 4) <= at(RndPar, fig7QuickServers[0], 4) {
		t.Errorf("rndpar t=4: MTBU %.2f h at N=%d not above %.2f h at N=%d", at(RndPar, large, 4), large, at(RndPar, fig7QuickServers[0], 4), fig7QuickServers[0])
	}

	dir := t.TempDir()
	png := filepath.Join(dir, "fig7.png")
	if err := PlotFig7(png, points, "test"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("fig7.png: not a PNG (%v)", err)
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
