package experiment

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction §VII-C, Figure 4: GET-TRANSACTIONs of 2 to 5 random keys
// among writes and reads (write/read/GET-TRANSACTION 10/85/5, 5/90/5 and
// 0/95/5) over 10,000 objects, on chainreaction-fig3's two sites of four
// servers (120 ms round trip ± 10 ms, causal+ with R = 4 and k = 2 per
// site, 100 clients at each site). Each mix also runs with its
// GET-TRANSACTIONs' share given to reads, to show what they do to the
// latency of reads and writes (docs/experiments.md).

// The paper's workload.
const (
	crFig4Objects = 10_000
	crFig4KeysMin = 2 // keys of a GET-TRANSACTION, drawn uniformly in [min, max]
	crFig4KeysMax = 5
)

// CRFig4Mix is a mix of operations in percent: writes, reads and
// GET-TRANSACTIONs.
type CRFig4Mix struct{ Write, Read, Txn int }

// String gives the mix as the paper does: "10/85/5".
func (m CRFig4Mix) String() string { return fmt.Sprintf("%d/%d/%d", m.Write, m.Read, m.Txn) }

// withoutTxns is the mix with its GET-TRANSACTIONs' share given to reads.
func (m CRFig4Mix) withoutTxns() CRFig4Mix { return CRFig4Mix{Write: m.Write, Read: m.Read + m.Txn} }

// CRFig4Mixes are the paper's mixes.
var CRFig4Mixes = []CRFig4Mix{{10, 85, 5}, {5, 90, 5}, {0, 95, 5}}

// CRFig4Point is one run of chainreaction-fig4: a mix under a key
// distribution, with or without its GET-TRANSACTIONs.
type CRFig4Point struct {
	// Mix is the paper's mix; Run is what ran: Mix, or Mix without
	// transactions (Baseline).
	Mix, Run     CRFig4Mix
	Baseline     bool
	Distribution string // of the keys of every operation
	// Throughput counts the requests completed per second at both sites
	// together, a GET-TRANSACTION as one; TxnThroughput the
	// GET-TRANSACTIONs alone.
	Throughput, TxnThroughput float64
	// ReadLatency, WriteLatency and TxnLatency are both sites' clients',
	// of the requests completed in the measured window.
	ReadLatency, WriteLatency, TxnLatency Percentiles
	// Rounds counts the GET-TRANSACTIONs completed in the measured window
	// by the rounds of reads they took (index: rounds); Contended those
	// that gave up (clientcore.ErrContention, after
	// clientcore.DefaultTxnRoundsMax rounds).
	Rounds    []int
	Contended int
	Sites     []CRFig4Site
	Abandoned int
}

// CRFig4Site is what one site's clients measured.
type CRFig4Site struct {
	Site                                  string
	ReadLatency, WriteLatency, TxnLatency Percentiles
	Contended                             int
}

// MeanRounds returns the mean rounds of the completed GET-TRANSACTIONs.
func (p CRFig4Point) MeanRounds() float64 {
	n, sum := 0, 0
	for r, c := range p.Rounds {
		n += c
		sum += r * c
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// crFig4Grid returns the mixes, the key distributions, and each run's
// warm-up and length.
func crFig4Grid(quick bool) (mixes []CRFig4Mix, distributions []string, warmup, duration wire.Time) {
	if quick {
		return CRFig4Mixes[:1], []string{sim.DistributionZipfian}, wire.Second, 3 * wire.Second
	}
	return CRFig4Mixes, []string{sim.DistributionZipfian, sim.DistributionUniform}, 2 * wire.Second, 10 * wire.Second
}

// RunCRFig4 runs every mix, with and without its GET-TRANSACTIONs, under
// every key distribution.
func RunCRFig4(o Options) ([]CRFig4Point, error) {
	mixes, distributions, warmup, duration := crFig4Grid(o.Quick)
	var points []CRFig4Point
	for _, d := range distributions {
		for _, m := range mixes {
			points = append(points, CRFig4Point{Mix: m, Run: m, Distribution: d},
				CRFig4Point{Mix: m, Run: m.withoutTxns(), Baseline: true, Distribution: d})
		}
	}
	progress := crProgress(o, "chainreaction-fig4")
	err := parallel(o, "chainreaction-fig4", len(points), func(i int) error {
		p := &points[i]
		w := sim.Workload{
			Update: float64(p.Run.Write) / 100, Read: float64(p.Run.Read) / 100, Transaction: float64(p.Run.Txn) / 100,
			Distribution: p.Distribution,
		}
		if p.Run.Txn > 0 {
			w.TransactionKeysMin, w.TransactionKeysMax = crFig4KeysMin, crFig4KeysMax
		}
		// A mix with and without its transactions starts from the same seed.
		lo, err := crFig3Load(CRGeo, w, o.Seed+uint64(slices.Index(CRFig4Mixes, p.Mix)), crGeoClients, duration)
		if err != nil {
			return err
		}
		lo.Objects = crFig4Objects
		label := fmt.Sprintf("%s %s", p.Run, p.Distribution)
		lo.Progress = func(now wire.Time) { progress(label, now, duration) }
		lo.ProgressEvery = wire.Second
		res, err := sim.RunLoad(lo)
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		p.Throughput = res.Throughput(wire.Second, warmup, duration)
		n := 0
		for b := int(warmup / wire.Second); b < int(duration/wire.Second) && b < len(res.Transactions); b++ {
			n += res.Transactions[b]
		}
		p.TxnThroughput = float64(n) / (float64(duration-warmup) / float64(wire.Second))
		p.Abandoned = res.Abandoned
		p.Rounds = make([]int, clientcore.DefaultTxnRoundsMax+1)
		var all sim.RequestLatencies
		for j := range crGeoSites {
			site := sim.SiteName(j)
			s := CRFig4Site{Site: site}
			if l := res.Latencies[site+"/"]; l != nil {
				s.ReadLatency = percentilesOf(l.Reads, nil, warmup, duration)
				s.WriteLatency = percentilesOf(l.Updates, nil, warmup, duration)
				s.TxnLatency = percentilesOf(l.Transactions, nil, warmup, duration)
				s.Contended = percentilesOf(l.Contended, nil, warmup, duration).N
				all.Reads = append(all.Reads, l.Reads...)
				all.Updates = append(all.Updates, l.Updates...)
				all.Transactions = append(all.Transactions, l.Transactions...)
				for k, t := range l.Transactions {
					if t.At >= warmup && t.At < duration {
						p.Rounds[l.TransactionRounds[k]]++
					}
				}
			}
			p.Contended += s.Contended
			p.Sites = append(p.Sites, s)
		}
		p.ReadLatency = percentilesOf(all.Reads, nil, warmup, duration)
		p.WriteLatency = percentilesOf(all.Updates, nil, warmup, duration)
		p.TxnLatency = percentilesOf(all.Transactions, nil, warmup, duration)
		return nil
	})
	return points, err
}

// String summarises a point for the progress output.
func (p CRFig4Point) String() string {
	s := fmt.Sprintf("%s %s: %.0f requests/s", p.Run, p.Distribution, p.Throughput)
	if p.ReadLatency.N > 0 {
		s += fmt.Sprintf("; reads %s", p.ReadLatency)
	}
	if p.WriteLatency.N > 0 {
		s += fmt.Sprintf("; writes %s", p.WriteLatency)
	}
	if p.TxnLatency.N > 0 || p.Contended > 0 {
		s += fmt.Sprintf("; %.0f GET-TRANSACTIONs/s %s, rounds mean %.2f %v, %d contended", p.TxnThroughput, p.TxnLatency, p.MeanRounds(), p.Rounds[2:], p.Contended)
	}
	if p.Abandoned > 0 {
		s += fmt.Sprintf("; %d abandoned", p.Abandoned)
	}
	return s
}

// WriteCRFig4CSV writes one row per run with the header
// distribution,mix,ran,throughput,txn_throughput,read_p50_ms,read_p99_ms,write_p50_ms,write_p99_ms,txn_mean_ms,txn_p50_ms,txn_p99_ms,txns,contended,mean_rounds,rounds_2,...,rounds_8
// (latencies of both sites' requests completed in the measured window;
// rounds_r counts the GET-TRANSACTIONs that took r rounds of reads,
// contended those that gave up after clientcore.DefaultTxnRoundsMax;
// the latency and rounds columns are empty where nothing was measured).
func WriteCRFig4CSV(w io.Writer, points []CRFig4Point) error {
	header := "distribution,mix,ran,throughput,txn_throughput,read_p50_ms,read_p99_ms,write_p50_ms,write_p99_ms,txn_mean_ms,txn_p50_ms,txn_p99_ms,txns,contended,mean_rounds"
	for r := 2; r <= clientcore.DefaultTxnRoundsMax; r++ {
		header += fmt.Sprintf(",rounds_%d", r)
	}
	if _, err := fmt.Fprintln(w, header); err != nil {
		return err
	}
	lat := func(p Percentiles, mean bool) string {
		if p.N == 0 {
			if mean {
				return ",,"
			}
			return ","
		}
		if mean {
			return fmt.Sprintf("%.2f,%.2f,%.2f", ms(p.Mean), ms(p.P50), ms(p.P99))
		}
		return fmt.Sprintf("%.2f,%.2f", ms(p.P50), ms(p.P99))
	}
	for _, p := range points {
		row := fmt.Sprintf("%s,%s,%s,%.0f,%.0f,%s,%s,%s", p.Distribution, p.Mix, p.Run, p.Throughput, p.TxnThroughput,
			lat(p.ReadLatency, false), lat(p.WriteLatency, false), lat(p.TxnLatency, true))
		if p.Run.Txn == 0 {
			row += ",,,"
			for r := 2; r <= clientcore.DefaultTxnRoundsMax; r++ {
				row += ","
			}
		} else {
			row += fmt.Sprintf(",%d,%d,%.3f", p.TxnLatency.N, p.Contended, p.MeanRounds())
			for r := 2; r <= clientcore.DefaultTxnRoundsMax; r++ {
				row += fmt.Sprintf(",%d", p.Rounds[r])
			}
		}
		if _, err := fmt.Fprintln(w, row); err != nil {
			return err
		}
	}
	return nil
}

// WriteCRFig4LatencyCSV writes one row per run and site with the header
// distribution,mix,ran,site,reads,writes,txns,contended,read_p50_ms,read_p99_ms,write_p50_ms,write_p99_ms,txn_p50_ms,txn_p99_ms
// (requests completed in the measured window).
func WriteCRFig4LatencyCSV(w io.Writer, points []CRFig4Point) error {
	if _, err := fmt.Fprintln(w, "distribution,mix,ran,site,reads,writes,txns,contended,read_p50_ms,read_p99_ms,write_p50_ms,write_p99_ms,txn_p50_ms,txn_p99_ms"); err != nil {
		return err
	}
	for _, p := range points {
		for _, s := range p.Sites {
			r, wr, t := s.ReadLatency, s.WriteLatency, s.TxnLatency
			if _, err := fmt.Fprintf(w, "%s,%s,%s,%s,%d,%d,%d,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", p.Distribution, p.Mix, p.Run, s.Site,
				r.N, wr.N, t.N, s.Contended, ms(r.P50), ms(r.P99), ms(wr.P50), ms(wr.P99), ms(t.P50), ms(t.P99)); err != nil {
				return err
			}
		}
	}
	return nil
}

// crFig4PaperThroughput is the paper's aggregate throughput in every mix
// ("approximates of 12,000 operations per second in all workloads").
const crFig4PaperThroughput = 12_000

// PlotCRFig4 draws, per mix: (a) the throughput with GET-TRANSACTIONs and
// with their share given to reads, per key distribution, beside the
// paper's 12,000; (b) the p50 latency of reads and writes with and
// without GET-TRANSACTIONs, and of the GET-TRANSACTIONs (zipfian keys);
// (c) the share of GET-TRANSACTIONs by the rounds they took, per
// distribution.
func PlotCRFig4(path string, points []CRFig4Point) error {
	var mixes []CRFig4Mix
	var distributions []string
	for _, p := range points {
		if !slices.Contains(mixes, p.Mix) {
			mixes = append(mixes, p.Mix)
		}
		if !slices.Contains(distributions, p.Distribution) {
			distributions = append(distributions, p.Distribution)
		}
	}
	names := make([]string, len(mixes))
	for i, m := range mixes {
		names[i] = m.String()
	}
	find := func(m CRFig4Mix, d string, baseline bool) (CRFig4Point, bool) {
		for _, p := range points {
			if p.Mix == m && p.Distribution == d && p.Baseline == baseline {
				return p, true
			}
		}
		return CRFig4Point{}, false
	}
	type series struct {
		label string
		value func(m CRFig4Mix) float64
	}
	width := vg.Points(10)
	// bars draws the series side by side per mix, with room above the
	// highest for the legend.
	bars := func(p *plot.Plot, ss []series, floor float64) error {
		top := floor
		for j, s := range ss {
			values := make(plotter.Values, len(mixes))
			for i, m := range mixes {
				values[i] = s.value(m)
				top = max(top, values[i])
			}
			b, err := plotter.NewBarChart(values, width)
			if err != nil {
				return err
			}
			b.Color = seriesColors[j%len(seriesColors)]
			b.LineStyle.Width = 0
			b.Offset = width * vg.Length(2*j-len(ss)+1) / 2
			p.Add(b)
			p.Legend.Add(s.label, b)
		}
		p.NominalX(names...)
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(-6)
		p.Y.Min, p.Y.Max = 0, top*(1+0.09*float64(len(ss)+1))
		p.Y.Tick.Marker = plainTicks{}
		return nil
	}
	newPlot := func(title, y string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "write/read/GET-TRANSACTION %"
		p.Y.Label.Text = y
		p.Add(plotter.NewGrid())
		return p
	}

	a := newPlot("(a) 2 sites × 4 servers, 120 ms RTT: throughput", "requests/s (a GET-TRANSACTION is one)")
	var tput []series
	for _, d := range distributions {
		for _, baseline := range []bool{false, true} {
			label := d + ", with GET-TRANSACTIONs"
			if baseline {
				label = d + ", their share read instead"
			}
			tput = append(tput, series{label, func(m CRFig4Mix) float64 { p, _ := find(m, d, baseline); return p.Throughput }})
		}
	}
	if err := bars(a, tput, crFig4PaperThroughput); err != nil {
		return err
	}
	paper, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: crFig4PaperThroughput}, {X: float64(len(mixes)) - 0.5, Y: crFig4PaperThroughput}})
	if err != nil {
		return err
	}
	paper.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	a.Add(paper)
	a.Legend.Add("paper: about 12,000 in every mix", paper)

	d := distributions[0]
	b := newPlot(fmt.Sprintf("(b) p50 latency, %s keys", d), "ms")
	lat := func(baseline bool, f func(p CRFig4Point) Percentiles) func(m CRFig4Mix) float64 {
		return func(m CRFig4Mix) float64 { p, _ := find(m, d, baseline); return ms(f(p).P50) }
	}
	read := func(p CRFig4Point) Percentiles { return p.ReadLatency }
	write := func(p CRFig4Point) Percentiles { return p.WriteLatency }
	if err := bars(b, []series{
		{"read, with GET-TRANSACTIONs", lat(false, read)},
		{"read, without", lat(true, read)},
		{"write, with GET-TRANSACTIONs", lat(false, write)},
		{"write, without", lat(true, write)},
		{"GET-TRANSACTION", lat(false, func(p CRFig4Point) Percentiles { return p.TxnLatency })},
	}, 0); err != nil {
		return err
	}

	c := newPlot("(c) GET-TRANSACTIONs by rounds of reads", "share of GET-TRANSACTIONs")
	var rounds []series
	for _, d := range distributions {
		share := func(m CRFig4Mix, match func(r int) bool, contended bool) float64 {
			p, _ := find(m, d, false)
			n, total := 0, p.Contended
			for r, k := range p.Rounds {
				total += k
				if match(r) {
					n += k
				}
			}
			if contended {
				n += p.Contended
			}
			if total == 0 {
				return 0
			}
			return float64(n) / float64(total)
		}
		rounds = append(rounds,
			series{d + ": 2 rounds", func(m CRFig4Mix) float64 { return share(m, func(r int) bool { return r == 2 }, false) }},
			series{d + ": 3 or more", func(m CRFig4Mix) float64 { return share(m, func(r int) bool { return r > 2 }, false) }},
			series{d + ": gave up", func(m CRFig4Mix) float64 { return share(m, func(int) bool { return false }, true) }})
	}
	if err := bars(c, rounds, 1); err != nil {
		return err
	}

	row := []*plot.Plot{a, b, c}
	const panelWidth, height = 5.5 * vg.Inch, 4 * vg.Inch
	return savePanelRow(path, row, panelWidth, height)
}

func runCRFig4(o Options) error {
	points, err := RunCRFig4(o)
	if err != nil {
		return err
	}
	for _, p := range points {
		fmt.Fprintf(o.Progress, "chainreaction-fig4: %s\n", p)
	}
	name := "chainreaction-fig4"
	if err := writeFile(filepath.Join(o.Out, name+".csv"), func(w io.Writer) error { return WriteCRFig4CSV(w, points) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, name+"_latency.csv"), func(w io.Writer) error { return WriteCRFig4LatencyCSV(w, points) }); err != nil {
		return err
	}
	return PlotCRFig4(filepath.Join(o.Out, name+".png"), points)
}
