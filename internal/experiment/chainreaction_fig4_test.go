package experiment

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRFig4QuickHasTheFiguresShape runs chainreaction-fig4's quick grid
// and checks the shape of its result, not its numbers: a run of each
// mix with its GET-TRANSACTIONs and one with their share read instead,
// GET-TRANSACTIONs measured exactly in the first, each of at least two
// rounds and answered in its site (under the WAN's one way), reads and
// writes measured in both, both sites' clients, and the files.
func TestCRFig4QuickHasTheFiguresShape(t *testing.T) {
	if testing.Short() {
		t.Skip("load simulations of two sites and 200 clients; skipped with -short")
	}
	points, err := RunCRFig4(Options{Quick: true, Seed: 1, Workers: 2, Progress: io.Discard, ProgressEvery: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	mixes, distributions, _, _ := crFig4Grid(true)
	if len(points) != 2*len(mixes)*len(distributions) {
		t.Fatalf("%d points, want 2 × %d mixes × %d distributions", len(points), len(mixes), len(distributions))
	}
	for _, p := range points {
		if p.Throughput <= 0 || p.Abandoned != 0 {
			t.Errorf("%s %s: %.0f requests/s, %d abandoned", p.Run, p.Distribution, p.Throughput, p.Abandoned)
		}
		if p.Baseline != (p.Run.Txn == 0) || p.Run.Write != p.Mix.Write || p.Run.Read+p.Run.Txn != p.Mix.Read+p.Mix.Txn {
			t.Errorf("mix %s ran as %s (baseline %v)", p.Mix, p.Run, p.Baseline)
		}
		if p.ReadLatency.N == 0 || (p.WriteLatency.N > 0) != (p.Run.Write > 0) {
			t.Errorf("%s: %d reads, %d writes measured", p.Run, p.ReadLatency.N, p.WriteLatency.N)
		}
		if len(p.Sites) != crGeoSites {
			t.Fatalf("%s: %d sites measured", p.Run, len(p.Sites))
		}
		for _, s := range p.Sites {
			if s.ReadLatency.N == 0 || (s.TxnLatency.N > 0) != !p.Baseline {
				t.Errorf("%s, site %s: %d reads, %d GET-TRANSACTIONs", p.Run, s.Site, s.ReadLatency.N, s.TxnLatency.N)
			}
		}
		completed := 0
		for r, n := range p.Rounds {
			if r < 2 && n > 0 {
				t.Errorf("%s: %d GET-TRANSACTIONs of %d rounds", p.Run, n, r)
			}
			completed += n
		}
		if completed != p.TxnLatency.N {
			t.Errorf("%s: %d GET-TRANSACTIONs by rounds, %d measured", p.Run, completed, p.TxnLatency.N)
		}
		if p.Baseline {
			if p.TxnThroughput != 0 || p.Contended != 0 {
				t.Errorf("%s: %.0f GET-TRANSACTIONs/s, %d contended without any", p.Run, p.TxnThroughput, p.Contended)
			}
			continue
		}
		if p.TxnThroughput <= 0 || p.TxnThroughput >= p.Throughput {
			t.Errorf("%s: %.0f GET-TRANSACTIONs/s of %.0f requests/s", p.Run, p.TxnThroughput, p.Throughput)
		}
		// Two rounds of local reads: under a message to the other site.
		if p.TxnLatency.P50 >= crGeoWAN || p.TxnLatency.P50 < p.ReadLatency.P50 {
			t.Errorf("%s: GET-TRANSACTIONs %s, reads %s: want between a read and the WAN's one way", p.Run, p.TxnLatency, p.ReadLatency)
		}
	}

	dir := t.TempDir()
	var csv, latency bytes.Buffer
	if err := WriteCRFig4CSV(&csv, points); err != nil {
		t.Fatal(err)
	}
	if err := WriteCRFig4LatencyCSV(&latency, points); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	if len(lines) != 1+len(points) {
		t.Errorf("chainreaction-fig4.csv has %d lines, want a header and %d rows", len(lines), len(points))
	}
	for _, l := range lines[1:] {
		if c, want := strings.Count(l, ","), strings.Count(lines[0], ","); c != want {
			t.Errorf("chainreaction-fig4.csv row %q has %d commas, the header %d", l, c, want)
		}
	}
	if n := strings.Count(latency.String(), "\n"); n != 1+crGeoSites*len(points) {
		t.Errorf("chainreaction-fig4_latency.csv has %d lines, want a header and %d rows", n, crGeoSites*len(points))
	}
	png := filepath.Join(dir, "chainreaction-fig4.png")
	if err := PlotCRFig4(png, points); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}
