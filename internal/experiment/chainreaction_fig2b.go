package experiment

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// CRFig2bPoint is one measured throughput of chainreaction-fig2b.
type CRFig2bPoint struct {
	WritePct   int
	Variant    CRVariant
	Clients    int
	Throughput float64 // requests per second
	// ReadLatency and WriteLatency are the mean times from a request's
	// start to its answer (a causal write's includes its dependency
	// wait).
	ReadLatency, WriteLatency wire.Time
	// Servers is what each server of the chain did, head first.
	Servers []CRServerLoad
}

// CRServerLoad is one server's share of a run, per second of the run
// (from the clients' start).
type CRServerLoad struct {
	Server   wire.NodeID
	Position int     // index in the chain, the head 0
	Busy     float64 // share of the run the server was working
	// Reads, Refused, Waits, Updates and Applied are per second: reads
	// handled, requests refused (ErrDirty: a CRAQ member's key is dirty,
	// or a causal member before k holds a version not yet on k members),
	// dependency waits, client updates (the head) and updates applied
	// from Forwards.
	Reads, Refused, Waits, Updates, Applied float64
}

// CRFig2bClients is the paper's number of clients ("a single node
// simulating 200 clients").
const CRFig2bClients = 200

// crFig2bGrid returns the paper's write percentages (write/read mixes
// 50/50 to 0/100), the numbers of clients of the read-only runs that
// show what limits causal reads (CRFig2bClients among them), and each
// run's warm-up and length.
func crFig2bGrid(quick bool) (pcts, clients []int, warmup, duration wire.Time) {
	if quick {
		return []int{50, 5, 0}, []int{50, CRFig2bClients}, wire.Second, 3 * wire.Second
	}
	return []int{50, 25, 15, 10, 5, 0}, []int{50, 100, CRFig2bClients, 400, 1000}, 2 * wire.Second, 22 * wire.Second
}

// RunCRFig2b measures throughput for every mix and variant (with the
// causal-nowait ablation) with CRFig2bClients closed-loop clients (the
// paper's YCSB threads) on one object, and read-only causal and chain3
// with other numbers of clients.
func RunCRFig2b(o Options) ([]CRFig2bPoint, error) {
	pcts, clients, warmup, duration := crFig2bGrid(o.Quick)
	var points []CRFig2bPoint
	for _, pct := range pcts {
		for _, v := range append(slices.Clone(CRFig2bVariants), CRCausalNoWait) {
			points = append(points, CRFig2bPoint{WritePct: pct, Variant: v, Clients: CRFig2bClients})
		}
	}
	for _, n := range clients {
		if n != CRFig2bClients {
			for _, v := range []CRVariant{CRCausal, CRChain3} {
				points = append(points, CRFig2bPoint{WritePct: 0, Variant: v, Clients: n})
			}
		}
	}
	progress := crProgress(o, "chainreaction-fig2b")
	err := parallel(o, "chainreaction-fig2b", len(points), func(i int) error {
		p := &points[i]
		// Every variant of a mix sees the same clients' requests.
		lo, err := crLoad(p.Variant, o.Seed+uint64(p.WritePct))
		if err != nil {
			return err
		}
		pct := p.WritePct
		lo.Clients, lo.UpdateFraction = p.Clients, func(int) float64 { return float64(pct) / 100 }
		lo.Duration, lo.Bucket = duration, wire.Second
		label := fmt.Sprintf("%s at %d/%d, %d clients,", p.Variant, pct, 100-pct, p.Clients)
		lo.Progress = func(now wire.Time) { progress(label, now, duration) }
		lo.ProgressEvery = wire.Second
		res, err := sim.RunLoad(lo)
		if err != nil {
			return fmt.Errorf("%s at %d%% writes, %d clients: %w", p.Variant, pct, p.Clients, err)
		}
		p.Throughput = res.Throughput(wire.Second, warmup, duration)
		reads, writes := 0, 0
		for i := range res.Queries {
			reads += res.Queries[i]
			writes += res.Updates[i]
		}
		if reads > 0 {
			p.ReadLatency = res.QueryLatency / wire.Time(reads)
		}
		if writes > 0 {
			p.WriteLatency = res.UpdateLatency / wire.Time(writes)
		}
		// From the clients' start: the busy share and rates of the run.
		run := duration - res.First
		secs := float64(run) / float64(wire.Second)
		for i, id := range lo.Chains[0] {
			l := res.Servers[id]
			p.Servers = append(p.Servers, CRServerLoad{Server: id, Position: i, Busy: float64(l.Busy) / float64(run),
				Reads: float64(l.Reads) / secs, Refused: float64(l.Refused) / secs, Waits: float64(l.Waits) / secs,
				Updates: float64(l.Updates) / secs, Applied: float64(l.Applied) / secs})
		}
		return nil
	})
	return points, err
}

// CRFig2bBound is the most causal can do at pct% writes, relative to
// chain3, in chainreaction-fig2b's model: every write costs a message at
// each of the six members and every read one at one of them, so six
// servers busy all the time give 1 / (w + (1 − w)/6) times the 10,000
// requests a second one server (chain3's tail) handles.
func CRFig2bBound(pct int) float64 {
	w := float64(pct) / 100
	return 1 / (w + (1-w)/float64(crReplicas))
}

// CRFig2bRatio returns the throughput of variant v at the mix with n
// clients divided by chain3's, or 0 if either is missing.
func CRFig2bRatio(points []CRFig2bPoint, pct, n int, v CRVariant) float64 {
	var num, den float64
	for _, p := range points {
		if p.WritePct != pct || p.Clients != n {
			continue
		}
		if p.Variant == v {
			num = p.Throughput
		}
		if p.Variant == CRChain3 {
			den = p.Throughput
		}
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// String summarises a point for the progress output.
func (p CRFig2bPoint) String() string {
	ms := func(t wire.Time) float64 { return float64(t) / float64(wire.Millisecond) }
	s := fmt.Sprintf("%s at %d/%d, %d clients: %.0f requests/s, reads %.2f ms, writes %.2f ms; per server (reads, refused, waits, applied /s; busy):",
		p.Variant, p.WritePct, 100-p.WritePct, p.Clients, p.Throughput, ms(p.ReadLatency), ms(p.WriteLatency))
	for _, l := range p.Servers {
		s += fmt.Sprintf(" %s %.0f %.0f %.0f %.0f %.2f;", l.Server, l.Reads, l.Refused, l.Waits, l.Updates+l.Applied, l.Busy)
	}
	return s
}

// WriteCRFig2bCSV writes the figure's points (CRFig2bVariants with
// CRFig2bClients clients) with the header write_pct,variant,throughput.
func WriteCRFig2bCSV(w io.Writer, points []CRFig2bPoint) error {
	if _, err := fmt.Fprintln(w, "write_pct,variant,throughput"); err != nil {
		return err
	}
	for _, p := range points {
		if p.Clients != CRFig2bClients || !slices.Contains(CRFig2bVariants, p.Variant) {
			continue
		}
		if _, err := fmt.Fprintf(w, "%d,%s,%.2f\n", p.WritePct, p.Variant, p.Throughput); err != nil {
			return err
		}
	}
	return nil
}

// WriteCRFig2bDetailCSV writes what each server did in every run, with
// the header
// write_pct,variant,clients,throughput,read_ms,write_ms,server,position,busy,reads,refused,waits,updates,applied
// (the run's throughput and mean latencies on each of its rows; busy a
// share of the run; the rest per second).
func WriteCRFig2bDetailCSV(w io.Writer, points []CRFig2bPoint) error {
	if _, err := fmt.Fprintln(w, "write_pct,variant,clients,throughput,read_ms,write_ms,server,position,busy,reads,refused,waits,updates,applied"); err != nil {
		return err
	}
	ms := func(t wire.Time) float64 { return float64(t) / float64(wire.Millisecond) }
	for _, p := range points {
		for _, l := range p.Servers {
			if _, err := fmt.Fprintf(w, "%d,%s,%d,%.2f,%.3f,%.3f,%s,%d,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f\n", p.WritePct, p.Variant, p.Clients,
				p.Throughput, ms(p.ReadLatency), ms(p.WriteLatency), l.Server, l.Position,
				l.Busy, l.Reads, l.Refused, l.Waits, l.Updates, l.Applied); err != nil {
				return err
			}
		}
	}
	return nil
}

// PlotCRFig2b draws, as the paper's bar chart, (a) the throughput of
// each variant at each write/read mix and (b) its ratio to chain3's.
func PlotCRFig2b(path string, points []CRFig2bPoint) error {
	var pcts []int
	for _, p := range points {
		if p.Clients == CRFig2bClients && !slices.Contains(pcts, p.WritePct) {
			pcts = append(pcts, p.WritePct)
		}
	}
	slices.Sort(pcts)
	slices.Reverse(pcts) // 50/50 first, as the paper
	names := make([]string, len(pcts))
	for i, pct := range pcts {
		names[i] = fmt.Sprintf("%d/%d", pct, 100-pct)
	}
	titles := []string{"(a) one object, R = 6, k = 3: throughput", "(b) relative to chain3 (ideal read-only causal: 6)"}
	labels := []string{"requests/s", "× chain3"}
	yMax := 0.0
	for _, p := range points {
		if p.Clients == CRFig2bClients {
			yMax = max(yMax, p.Throughput)
		}
	}
	row := make([]*plot.Plot, 2)
	width := vg.Points(12)
	for k := range row {
		p := plot.New()
		p.Title.Text = titles[k]
		p.X.Label.Text = "write/read mix (%)"
		p.Y.Label.Text = labels[k]
		p.Add(plotter.NewGrid())
		for j, v := range CRFig2bVariants {
			values := make(plotter.Values, len(pcts))
			for i, pct := range pcts {
				for _, pt := range points {
					if pt.WritePct == pct && pt.Variant == v && pt.Clients == CRFig2bClients {
						values[i] = pt.Throughput
						if k == 1 {
							values[i] = CRFig2bRatio(points, pct, CRFig2bClients, v)
						}
					}
				}
			}
			bars, err := plotter.NewBarChart(values, width)
			if err != nil {
				return err
			}
			bars.Color = seriesColors[j%len(seriesColors)]
			bars.LineStyle.Width = 0
			bars.Offset = width * vg.Length(2*j-len(CRFig2bVariants)+1) / 2
			p.Add(bars)
			p.Legend.Add(string(v), bars)
		}
		p.NominalX(names...)
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(-6)
		p.Y.Min, p.Y.Max = 0, yMax*1.1
		if k == 1 {
			p.Y.Max = 6.6
		}
		p.Y.Tick.Marker = plainTicks{}
		row[k] = p
	}
	const panelWidth, height = 6 * vg.Inch, 4 * vg.Inch
	return savePanelRow(path, row, panelWidth, height)
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

func runCRFig2b(o Options) error {
	points, err := RunCRFig2b(o)
	if err != nil {
		return err
	}
	for _, p := range points {
		fmt.Fprintf(o.Progress, "chainreaction-fig2b: %s\n", p)
	}
	name := "chainreaction-fig2b"
	if err := writeFile(filepath.Join(o.Out, name+".csv"), func(w io.Writer) error { return WriteCRFig2bCSV(w, points) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, name+"_detail.csv"), func(w io.Writer) error { return WriteCRFig2bDetailCSV(w, points) }); err != nil {
		return err
	}
	return PlotCRFig2b(filepath.Join(o.Out, name+".png"), points)
}
