package experiment

import (
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// CRZone is where in the chain chainreaction-fig5 kills a server.
type CRZone string

// The paper's two scenarios (§VII-D).
const (
	// CREager: a server at a position from the head to k (1-based): the
	// updates' eager phase, which must reach k members before a write is
	// answered.
	CREager CRZone = "1..k"
	// CRLazy: a server after position k, up to the tail.
	CRLazy CRZone = "after-k"
)

// CRFig5Params describe chainreaction-fig5.
type CRFig5Params struct {
	Clients          int
	Duration, FailAt wire.Time
	Warmup           wire.Time // excluded from the pre-failure rates
	// Settle is how long after the failure the summary counts the
	// requests it cost; the rate after the failure is measured from then.
	Settle            wire.Time
	Bucket            wire.Time // the resolution of the measurements
	Spares            int       // servers beyond the chain's six: the paper has 9
	HeartbeatInterval wire.Time
	LeaseDuration     wire.Time
	FailureTimeout    wire.Time
}

// crFig5Params returns the paper's setup (100 clients, 140 s, a server
// killed at 60 s, 9 servers) with `catena master`'s and `catena server`'s
// default timing, or for quick a 12 s run with the failure at 4 s.
func crFig5Params(quick bool) CRFig5Params {
	p := CRFig5Params{
		Clients: 100, Duration: 140 * wire.Second, FailAt: 60 * wire.Second, Warmup: 5 * wire.Second, Settle: 10 * wire.Second,
		Bucket: 100 * wire.Millisecond, Spares: 3,
		HeartbeatInterval: 100 * wire.Millisecond, LeaseDuration: 600 * wire.Millisecond, FailureTimeout: wire.Second,
	}
	if quick {
		p.Duration, p.FailAt, p.Warmup, p.Settle = 12*wire.Second, 4*wire.Second, wire.Second, 4*wire.Second
	}
	return p
}

// CRFig5Variants are the variants chainreaction-fig5 runs: Catena's
// causal mode, and the ablation without the dependency wait.
var CRFig5Variants = []CRVariant{CRCausal, CRCausalNoWait}

// CRFig5Workloads are the paper's write percentages (50/50 and 5/95).
var CRFig5Workloads = []int{50, 5}

// CRFig5Run is one run: a workload, a zone, a variant.
type CRFig5Run struct {
	WritePct int
	Zone     CRZone
	Variant  CRVariant
	Victim   wire.NodeID
	Position int // the victim's 1-based position in the chain
	Params   CRFig5Params
	// Queries and Updates count completed requests per Params.Bucket;
	// Outstanding what the clients waited for at each bucket's end
	// (sim.LoadResult.Outstanding).
	Queries, Updates []int
	Outstanding      [][3]int
	// Removed is when the master removed the victim from the chain;
	// Repaired when the chain had R members again (0: never).
	Removed, Repaired wire.Time
	Configs           []string // the configurations the master installed, with their times
}

// crVictims draws the killed server of each zone from the seed, as the
// paper picks "a random node" in each.
func crVictims(seed uint64) map[CRZone]int {
	rng := rand.New(rand.NewPCG(seed, 0xc4a1))
	return map[CRZone]int{
		CREager: 1 + rng.IntN(crK),
		CRLazy:  crK + 1 + rng.IntN(crReplicas-crK),
	}
}

// RunCRFig5 runs every workload, zone and variant.
func RunCRFig5(o Options) ([]*CRFig5Run, error) {
	p := crFig5Params(o.Quick)
	victims := crVictims(o.Seed)
	var runs []*CRFig5Run
	for _, zone := range []CRZone{CREager, CRLazy} {
		for _, pct := range CRFig5Workloads {
			for _, v := range CRFig5Variants {
				pos := victims[zone]
				runs = append(runs, &CRFig5Run{WritePct: pct, Zone: zone, Variant: v, Position: pos,
					Victim: crServers(pos, 1)[0], Params: p})
			}
		}
	}
	progress := crProgress(o, "chainreaction-fig5")
	err := parallel(o, "chainreaction-fig5", len(runs), func(i int) error {
		r := runs[i]
		label := fmt.Sprintf("%s %d/%d, %s killed,", r.Variant, r.WritePct, 100-r.WritePct, r.Victim)
		return runCRFig5Once(o.Seed, r, func(now wire.Time) { progress(label, now, r.Params.Duration) })
	})
	return runs, err
}

func runCRFig5Once(seed uint64, r *CRFig5Run, progress func(now wire.Time)) error {
	p := r.Params
	// Both variants and both zones of a workload see the same requests.
	lo, err := crLoad(r.Variant, seed+uint64(r.WritePct))
	if err != nil {
		return err
	}
	pct := r.WritePct
	lo.Clients, lo.UpdateFraction = p.Clients, func(int) float64 { return float64(pct) / 100 }
	lo.Duration, lo.Bucket, lo.CountOutstanding = p.Duration, p.Bucket, true
	lo.Spares = crServers(crReplicas+1, p.Spares)
	lo.HeartbeatInterval, lo.LeaseDuration, lo.FailureTimeout = p.HeartbeatInterval, p.LeaseDuration, p.FailureTimeout
	lo.Failures = []sim.ServerFailure{{At: p.FailAt, Server: r.Victim}}
	lo.Progress, lo.ProgressEvery = progress, wire.Second
	lo.OnConfig = func(now wire.Time, c wire.Config) {
		r.Configs = append(r.Configs, fmt.Sprintf("%s %v", clock(now), c))
		if now >= p.FailAt && r.Removed == 0 && !c.Contains(r.Victim) {
			r.Removed = now
		}
		if r.Removed != 0 && r.Repaired == 0 && len(c.Chain) == crReplicas && c.Joining == "" {
			r.Repaired = now
		}
	}
	res, err := sim.RunLoad(lo)
	if err != nil {
		return fmt.Errorf("%s at %d%% writes, %s killed: %w", r.Variant, pct, r.Victim, err)
	}
	n := int(p.Duration / p.Bucket)
	r.Queries, r.Updates, r.Outstanding = res.Queries, res.Updates, res.Outstanding
	for len(r.Queries) < n {
		r.Queries = append(r.Queries, 0)
		r.Updates = append(r.Updates, 0)
	}
	return nil
}

// Rate returns the completed reads and writes per second in [from, to).
func (r *CRFig5Run) Rate(from, to wire.Time) (reads, writes float64) {
	q, u := 0, 0
	for i := int(from / r.Params.Bucket); i < int(to/r.Params.Bucket) && i < len(r.Queries); i++ {
		q += r.Queries[i]
		u += r.Updates[i]
	}
	secs := float64(to-from) / float64(wire.Second)
	return float64(q) / secs, float64(u) / secs
}

// WriteStall returns the longest stretch after the failure in which no
// write completed, to the resolution of a bucket.
func (r *CRFig5Run) WriteStall() wire.Time {
	longest, run := 0, 0
	for i := int(r.Params.FailAt / r.Params.Bucket); i < len(r.Updates); i++ {
		if r.Updates[i] == 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return wire.Time(longest) * r.Params.Bucket
}

// PeakOutstanding returns the most clients waiting for kind (sim.
// Outstanding...) at one bucket's end in [from, to).
func (r *CRFig5Run) PeakOutstanding(kind int, from, to wire.Time) int {
	peak := 0
	for i := int(from / r.Params.Bucket); i < int(to/r.Params.Bucket) && i < len(r.Outstanding); i++ {
		peak = max(peak, r.Outstanding[i][kind])
	}
	return peak
}

// CRFig5Summary is what the write-up reports of a run.
type CRFig5Summary struct {
	Pre        float64   // requests/s from the warm-up to the failure
	PreWrites  float64   // writes/s in the same stretch
	WriteStall wire.Time // the longest stretch without a completed write after the failure
	// Second is the throughput in the second after the failure, Lost the
	// requests the failure cost against the pre-failure rate over the
	// Settle after it.
	Second, Lost float64
	// Removed and Repaired are how long after the failure the master
	// removed the victim and restored the chain to R members.
	Removed, Repaired wire.Time
	// DepWaits and Sent are the most clients whose write waited for its
	// dependencies, or had been sent, at one bucket's end within 2 s of
	// the failure.
	DepWaits, Sent int
	Post           float64 // requests/s from Settle after the failure to the end
}

// Summary computes the run's summary.
func (r *CRFig5Run) Summary() CRFig5Summary {
	p := r.Params
	s := CRFig5Summary{}
	q, u := r.Rate(p.Warmup, p.FailAt)
	s.Pre, s.PreWrites = q+u, u
	s.WriteStall = r.WriteStall()
	q, u = r.Rate(p.FailAt, p.FailAt+wire.Second)
	s.Second = q + u
	q, u = r.Rate(p.FailAt, p.FailAt+p.Settle)
	s.Lost = (s.Pre - (q + u)) * seconds(p.Settle)
	if r.Removed > 0 {
		s.Removed = r.Removed - p.FailAt
	}
	if r.Repaired > 0 {
		s.Repaired = r.Repaired - p.FailAt
	}
	s.DepWaits = r.PeakOutstanding(sim.OutstandingDependencies, p.FailAt, p.FailAt+2*wire.Second)
	s.Sent = r.PeakOutstanding(sim.OutstandingUpdate, p.FailAt, p.FailAt+2*wire.Second)
	q, u = r.Rate(p.FailAt+p.Settle, p.Duration)
	s.Post = q + u
	return s
}

// String formats a run and its summary for the progress output.
func (r *CRFig5Run) String() string {
	s := r.Summary()
	sec := func(t wire.Time) string { return fmt.Sprintf("%.1fs", float64(t)/float64(wire.Second)) }
	return fmt.Sprintf("%s %d/%d, %s (position %d) killed (%s): before %.0f requests/s (%.0f writes/s); writes stalled %s; "+
		"first second after %.0f/s; %.0f requests lost over %s; removed after %s, chain of %d again after %s; "+
		"at most %d clients waiting for dependencies, %d with a write sent, within 2 s; from %s after: %.0f/s",
		r.Variant, r.WritePct, 100-r.WritePct, r.Victim, r.Position, r.Zone, s.Pre, s.PreWrites, sec(s.WriteStall),
		s.Second, s.Lost, sec(r.Params.Settle), sec(s.Removed), crReplicas, sec(s.Repaired), s.DepWaits, s.Sent, sec(r.Params.Settle), s.Post)
}

// WriteCRFig5CSV writes one row per run and second, with the header
// zone,victim,write_pct,variant,second,throughput,reads,writes,dependency_waits,writes_sent
// (requests per second; the clients waiting for dependencies and with a
// write sent are the means of the second's samples).
func WriteCRFig5CSV(w io.Writer, runs []*CRFig5Run) error {
	if _, err := fmt.Fprintln(w, "zone,victim,write_pct,variant,second,throughput,reads,writes,dependency_waits,writes_sent"); err != nil {
		return err
	}
	for _, r := range runs {
		p := r.Params
		per := int(wire.Second / p.Bucket)
		for t := wire.Time(0); t < p.Duration; t += wire.Second {
			q, u := r.Rate(t, t+wire.Second)
			var deps, sent float64
			first := int(t / p.Bucket)
			for i := first; i < first+per && i < len(r.Outstanding); i++ {
				deps += float64(r.Outstanding[i][sim.OutstandingDependencies]) / float64(per)
				sent += float64(r.Outstanding[i][sim.OutstandingUpdate]) / float64(per)
			}
			if _, err := fmt.Fprintf(w, "%s,%s,%d,%s,%d,%.0f,%.0f,%.0f,%.1f,%.1f\n", r.Zone, r.Victim, r.WritePct, r.Variant,
				t/wire.Second, q+u, q, u, deps, sent); err != nil {
				return err
			}
		}
	}
	return nil
}

// crFig5Colors: 50/50 blue, 5/95 red.
var crFig5Colors = map[int]color.Color{50: seriesColors[0], 5: seriesColors[1]}

// PlotCRFig5 draws, for each zone (columns), throughput over the whole
// run per second (top), and around the failure per bucket (middle), and
// the clients whose write waits for its dependencies (bottom). Solid:
// causal; dashed: causal without the dependency wait.
func PlotCRFig5(path string, runs []*CRFig5Run) error {
	zones := []CRZone{CREager, CRLazy}
	const rows = 3
	grid := make([][]*plot.Plot, rows)
	for row := range grid {
		grid[row] = make([]*plot.Plot, len(zones))
	}
	yMax := 0.0
	for _, r := range runs {
		for i := range r.Queries {
			yMax = max(yMax, float64(r.Queries[i]+r.Updates[i])*float64(wire.Second/r.Params.Bucket))
		}
	}
	for col, zone := range zones {
		var zr []*CRFig5Run
		for _, r := range runs {
			if r.Zone == zone {
				zr = append(zr, r)
			}
		}
		if len(zr) == 0 {
			return fmt.Errorf("chainreaction-fig5: no run for zone %s", zone)
		}
		p := zr[0].Params
		letter := "ab"[col]
		where := map[CRZone]string{CREager: "between the head and k", CRLazy: "after k"}[zone]
		titles := []string{
			fmt.Sprintf("(%c) %s (position %d of 6) killed at %gs: %s", letter, zr[0].Victim, zr[0].Position, seconds(p.FailAt), where),
			fmt.Sprintf("(%c) around the failure, per %gs", letter, seconds(p.Bucket)),
			fmt.Sprintf("(%c) clients whose write waits for its dependencies", letter),
		}
		zoomFrom, zoomTo := p.FailAt-2*wire.Second, p.FailAt+6*wire.Second
		for row := range rows {
			pl := plot.New()
			pl.Title.Text = titles[row]
			pl.X.Label.Text = "time (s); dashed grey: the failure, the repair"
			pl.Y.Label.Text = []string{"requests/s", "requests/s", "clients"}[row]
			pl.Add(plotter.NewGrid())
			for _, r := range zr {
				var xys plotter.XYs
				switch row {
				case 0:
					for t := wire.Time(0); t < p.Duration; t += wire.Second {
						q, u := r.Rate(t, t+wire.Second)
						xys = append(xys, plotter.XY{X: seconds(t) + 0.5, Y: q + u})
					}
				case 1:
					for t := zoomFrom; t < zoomTo; t += p.Bucket {
						q, u := r.Rate(t, t+p.Bucket)
						xys = append(xys, plotter.XY{X: seconds(t + p.Bucket/2), Y: q + u})
					}
				case 2:
					for i := int(zoomFrom / p.Bucket); i < int(zoomTo/p.Bucket) && i < len(r.Outstanding); i++ {
						xys = append(xys, plotter.XY{X: seconds(wire.Time(i+1) * p.Bucket), Y: float64(r.Outstanding[i][sim.OutstandingDependencies])})
					}
				}
				line, err := plotter.NewLine(xys)
				if err != nil {
					return err
				}
				line.Color = crFig5Colors[r.WritePct]
				line.Width = vg.Points(1.2)
				if r.Variant == CRCausalNoWait {
					line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				pl.Add(line)
				if row == 0 {
					pl.Legend.Add(fmt.Sprintf("%d/%d %s", r.WritePct, 100-r.WritePct, r.Variant), line)
				}
			}
			lo, hi := 0.0, seconds(p.Duration)
			yTop := yMax * 1.15
			if row > 0 {
				lo, hi = seconds(zoomFrom), seconds(zoomTo)
			}
			if row == 2 {
				yTop = float64(zr[0].Params.Clients) * 1.1
			}
			marks := []wire.Time{p.FailAt}
			if zr[0].Repaired > 0 {
				marks = append(marks, zr[0].Repaired)
			}
			for _, at := range marks {
				mark, err := plotter.NewLine(plotter.XYs{{X: seconds(at), Y: 0}, {X: seconds(at), Y: yTop}})
				if err != nil {
					return err
				}
				mark.Color = color.Gray{Y: 0x90}
				mark.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				pl.Add(mark)
			}
			pl.Legend.Top = true
			pl.Legend.XOffs, pl.Legend.YOffs = vg.Points(-6), vg.Points(-6)
			pl.X.Min, pl.X.Max = lo, hi
			pl.Y.Min, pl.Y.Max = 0, yTop
			grid[row][col] = pl
		}
	}
	const panelWidth, height = 6 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(panelWidth*vg.Length(len(zones)), height*rows)
	tiles := draw.Tiles{Rows: rows, Cols: len(zones), PadX: vg.Points(8), PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(grid, tiles, draw.New(img))
	for row := range grid {
		for col := range grid[row] {
			grid[row][col].Draw(canvases[row][col])
		}
	}
	return savePNG(path, img)
}

// seconds converts a simulated time to seconds.
func seconds(t wire.Time) float64 { return float64(t) / float64(wire.Second) }

func runCRFig5(o Options) error {
	runs, err := RunCRFig5(o)
	if err != nil {
		return err
	}
	for _, r := range runs {
		fmt.Fprintf(o.Progress, "chainreaction-fig5: %s\n", r)
	}
	name := "chainreaction-fig5"
	if err := writeFile(filepath.Join(o.Out, name+".csv"), func(w io.Writer) error { return WriteCRFig5CSV(w, runs) }); err != nil {
		return err
	}
	return PlotCRFig5(filepath.Join(o.Out, name+".png"), runs)
}
