package experiment

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRFig3QuickHasTheFiguresShape runs chainreaction-fig3's quick
// grid and checks the shape of its result, not its numbers: a point for
// every workload and variant with both sites' clients measured, shipping
// lags for the variants that ship and none for the others, causal writes
// answered in local time and spanning chains' in WAN time, and the files.
func TestCRFig3QuickHasTheFiguresShape(t *testing.T) {
	if testing.Short() {
		t.Skip("load simulations of two sites and 200 clients; skipped with -short")
	}
	points, err := RunCRFig3(Options{Quick: true, Seed: 1, Workers: 2, Progress: io.Discard, ProgressEvery: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	workloads, _, _, _ := crFig3Grid(true)
	if len(points) != len(workloads)*len(CRFig3Variants) {
		t.Fatalf("%d points, want %d workloads × %d variants", len(points), len(workloads), len(CRFig3Variants))
	}
	for _, p := range points {
		if p.Throughput <= 0 || p.Abandoned != 0 {
			t.Errorf("%s on %s: %.0f requests/s, %d abandoned", p.Variant, p.Workload, p.Throughput, p.Abandoned)
		}
		if len(p.Sites) != crGeoSites {
			t.Fatalf("%s on %s: %d sites measured", p.Variant, p.Workload, len(p.Sites))
		}
		writes := p.Workload != "C"
		for _, s := range p.Sites {
			if s.Reads == 0 || (s.Writes > 0) != writes {
				t.Errorf("%s on %s, site %s: %d reads, %d writes", p.Variant, p.Workload, s.Site, s.Reads, s.Writes)
			}
			if !writes {
				continue
			}
			switch p.Variant {
			case CRGeo, CRGeoLinearizable, CRGeoLinearizableTail, CRLocalChains:
				// A write is answered in its site: faster than a message to the other.
				if s.WriteLatency.P50 >= crGeoWAN {
					t.Errorf("%s on %s, site %s: writes p50 %v, want local time (under %v)", p.Variant, p.Workload, s.Site, s.WriteLatency.P50, crGeoWAN)
				}
			case CRSpanning:
				// A write crosses the WAN in the chain, and to or from its client.
				if s.WriteLatency.P50 < 2*(crGeoWAN-crGeoWANJitter) {
					t.Errorf("%s on %s, site %s: writes p50 %v, want a WAN round trip", p.Variant, p.Workload, s.Site, s.WriteLatency.P50)
				}
			}
		}
		ships := writes && (p.Variant == CRGeo || p.Variant == CRGeoLinearizable || p.Variant == CRGeoLinearizableTail)
		if (p.VisibleLag.N > 0) != ships || (p.ShipLag.N > 0) != ships {
			t.Errorf("%s on %s: %d shipped and %d visible writes measured, want some: %v", p.Variant, p.Workload, p.ShipLag.N, p.VisibleLag.N, ships)
		}
		if ships && (p.ShipLag.P50 < crGeoWAN-crGeoWANJitter || p.VisibleLag.P50 < p.ShipLag.P50) {
			t.Errorf("%s on %s: shipped %v, visible %v: want at least the WAN's one way, visible after shipped", p.Variant, p.Workload, p.ShipLag, p.VisibleLag)
		}
	}
	// Without writes the two causal variants do the same work; the
	// paper's CR-L, reading each key at one member, does less (the
	// paper: ChainReaction 1.53× CR-L on C).
	if r := CRFig3Ratio(points, "C", CRGeo, CRGeoLinearizable); r != 1 {
		t.Errorf("workload C: causal-geo %.3f× cr-l, want the same", r)
	}
	if r := CRFig3Ratio(points, "C", CRGeo, CRGeoLinearizableTail); r < 1.2 {
		t.Errorf("workload C: causal-geo %.3f× cr-l-tail, want reads at every member to beat reads at the tail", r)
	}

	dir := t.TempDir()
	var csv, latency bytes.Buffer
	if err := WriteCRFig3CSV(&csv, points); err != nil {
		t.Fatal(err)
	}
	if err := WriteCRFig3LatencyCSV(&latency, points); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csv.String(), "\n"); n != 1+len(points) {
		t.Errorf("chainreaction-fig3.csv has %d lines, want a header and %d rows", n, len(points))
	}
	if n := strings.Count(latency.String(), "\n"); n != 1+crGeoSites*len(points) {
		t.Errorf("chainreaction-fig3_latency.csv has %d lines, want a header and %d rows", n, crGeoSites*len(points))
	}
	png := filepath.Join(dir, "chainreaction-fig3.png")
	if err := PlotCRFig3(png, points); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}
