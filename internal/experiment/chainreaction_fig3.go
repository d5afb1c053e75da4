package experiment

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/pingcap/go-ycsb/pkg/prop"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/catena-kv/catena/internal/bench"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction §VII-B, Figure 3(a): throughput of YCSB's workloads A, B,
// C, D and F on two sites of four servers each, 120 ms round trip ± 10 ms
// between them, 100 clients at each site, in Catena's geo causal+ mode
// (R = 4 per site, k = 2) against the paper's other two chain-based
// configurations (docs/experiments.md).

// The sites' shape.
const (
	crGeoSites     = 2
	crGeoServers   = 4 // per site
	crGeoReplicas  = 4 // R per site
	crGeoK         = 2
	crGeoVolumes   = 16
	crGeoClients   = 200 // the paper's two YCSB clients of 100 threads, one per site
	crGeoObjects   = 1_000_000
	crGeoWAN       = 60 * wire.Millisecond // one way: the paper's 120 ms round trip
	crGeoWANJitter = 5 * wire.Millisecond  // ± one way: its 10 ms round-trip jitter
)

// The variants chainreaction-fig3 compares.
const (
	// CRGeo is Catena's geo causal+ mode: the default keyspace causal
	// with R = 4, k = 2 at each site and replicated by both sites,
	// clients at both (the paper's ChainReaction).
	CRGeo CRVariant = "causal-geo"
	// CRGeoLinearizable is the same with k = R = 4: a write is answered
	// once every member of its site's chain holds it, so a member answers
	// a key only with a version every member holds (or refuses it): reads
	// are linearizable within a site, and shipping to the other site is
	// asynchronous. It is the paper's CR-L ("ChainReaction configured to
	// offer linearizability on the local datacenter", COPS-like).
	CRGeoLinearizable CRVariant = "cr-l"
	// CRGeoLinearizableTail is cr-l with every read at the tail of its
	// site's chain: the paper's CR-L as it describes it, a chain that
	// reads at one member per key (cr-l's members answer a key every
	// member holds, so its reads spread like causal-geo's).
	CRGeoLinearizableTail CRVariant = "cr-l-tail"
	// CRSpanning is one cluster whose strong chains of 4 have two
	// members in each site (the paper's FAWN-KV 3, which it says had
	// replication factor 4): updates cross the WAN in the chain, and
	// reads go to the tail, at the other site for half the volumes.
	CRSpanning CRVariant = "chain-spanning"
	// CRLocalChains is a strong chain of 4 at each site, reads at the
	// tail, and nothing shipped between the sites: each site an
	// independent cluster serving its own clients. Catena does not
	// replicate strong keyspaces across sites; this is a bound for a
	// CR-L that reads at the tail (shipping would only add work).
	CRLocalChains CRVariant = "chain-local"
)

// CRFig3Variants are chainreaction-fig3's variants, in the order reported.
var CRFig3Variants = []CRVariant{CRGeo, CRGeoLinearizable, CRGeoLinearizableTail, CRSpanning, CRLocalChains}

// CRFig3Point is one run of chainreaction-fig3: a variant under a
// workload.
type CRFig3Point struct {
	Workload   string // YCSB's letter
	Variant    CRVariant
	Throughput float64 // requests per second, both sites together
	// Sites are the clients' latencies per site, in site order.
	Sites []CRFig3Site
	// ShipLag and VisibleLag (geo variants) are the times from the
	// origin's answer to a write to the other site's head applying it
	// and to its member at index k−1 applying it (readable by anyone
	// there), over the writes answered in the measured window; a write
	// that had not got so far when the run ended counts with the time it
	// had waited, a lower bound (Percentiles.Unfinished).
	ShipLag, VisibleLag Percentiles
	// VisibleFirst and VisibleLast are VisibleLag over the first and
	// the last third of the measured window: a lag that keeps up is no
	// larger in the last.
	VisibleFirst, VisibleLast Percentiles
	Abandoned                 int
}

// CRFig3Site is what one site's clients measured.
type CRFig3Site struct {
	Site          string // "a", "b"
	Reads, Writes int    // completed in the measured window
	// ReadLatency and WriteLatency are of the requests completed in the
	// measured window (a read-modify-write is a write, its latency both
	// operations').
	ReadLatency, WriteLatency Percentiles
}

// Percentiles summarise durations: N of them, Unfinished of which are
// lower bounds (a write not yet at the other site when the run ended);
// with any, Mean, P50 and P99 are lower bounds too.
type Percentiles struct {
	Mean, P50, P99 wire.Time
	N, Unfinished  int
}

// percentilesOf returns the mean, median and 99th percentile of the
// samples measured in [from, to), with the unfinished ones' lower bounds.
func percentilesOf(samples, unfinished []sim.Sample, from, to wire.Time) Percentiles {
	var ds []wire.Time
	var sum wire.Time
	var p Percentiles
	for i, list := range [][]sim.Sample{samples, unfinished} {
		for _, s := range list {
			if s.At >= from && s.At < to {
				ds = append(ds, s.D)
				sum += s.D
				if i == 1 {
					p.Unfinished++
				}
			}
		}
	}
	if len(ds) == 0 {
		return p
	}
	slices.Sort(ds)
	at := func(q float64) wire.Time { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	p.Mean, p.P50, p.P99, p.N = sum/wire.Time(len(ds)), at(0.5), at(0.99), len(ds)
	return p
}

// String gives the median and 99th percentile in ms, "≥" before lower
// bounds.
func (p Percentiles) String() string {
	b := ""
	if p.Unfinished > 0 {
		b = "≥ "
	}
	return fmt.Sprintf("p50 %s%.1f ms, p99 %s%.1f ms", b, ms(p.P50), b, ms(p.P99))
}

// crFig3Grid returns the workloads, the clients, and each run's warm-up
// and length.
func crFig3Grid(quick bool) (workloads []string, clients int, warmup, duration wire.Time) {
	if quick {
		return []string{"A", "C"}, crGeoClients, wire.Second, 3 * wire.Second
	}
	return []string{"A", "B", "C", "D", "F"}, crGeoClients, 2 * wire.Second, 10 * wire.Second
}

// ycsbWorkload converts one of YCSB's workloads as internal/bench
// defines them into what the load clients run.
func ycsbWorkload(name string) (sim.Workload, error) {
	w, ok := bench.WorkloadByName(name)
	if !ok {
		return sim.Workload{}, fmt.Errorf("chainreaction-fig3: no YCSB workload %q", name)
	}
	share := func(key string, def float64) (float64, error) {
		v, ok := w.Props[key]
		if !ok {
			return def, nil
		}
		return strconv.ParseFloat(v, 64)
	}
	var out sim.Workload
	var err error
	for _, f := range []struct {
		to  *float64
		key string
		def float64
	}{
		{&out.Read, prop.ReadProportion, prop.ReadProportionDefault},
		{&out.Update, prop.UpdateProportion, prop.UpdateProportionDefault},
		{&out.Insert, prop.InsertProportion, prop.InsertProportionDefault},
		{&out.ReadModifyWrite, prop.ReadModifyWriteProportion, prop.ReadModifyWriteProportionDefault},
	} {
		if *f.to, err = share(f.key, f.def); err != nil {
			return out, fmt.Errorf("chainreaction-fig3: workload %s: %s: %w", name, f.key, err)
		}
	}
	out.Distribution = w.Props[prop.RequestDistribution]
	return out, nil
}

// crGeoChains returns the chains of variant v: for the variants with
// sites, a site's 16 volumes over its 4 servers s1..s4, each chain one of
// the 4 rotations (the paper's consistent hashing with R = 4 of 4
// servers puts every key on all four, heads spread); for chain-spanning,
// one cluster of the 8 servers a/s1..a/s4 and b/s1..b/s4 whose chains
// have two members in one site and then two in the other, half of the
// volumes starting in each: the layout most favourable to a spanning
// chain, one WAN crossing per pass down the chain.
func crGeoChains(v CRVariant) map[wire.VolumeID][]wire.NodeID {
	chains := map[wire.VolumeID][]wire.NodeID{}
	s := func(i int) wire.NodeID { return wire.NodeID(fmt.Sprintf("s%d", i%crGeoServers+1)) }
	for vol := range crGeoVolumes {
		r := vol % crGeoServers
		if v != CRSpanning {
			for j := range crGeoReplicas {
				chains[wire.VolumeID(vol)] = append(chains[wire.VolumeID(vol)], s(r+j))
			}
			continue
		}
		first, second := sim.SiteName(vol%2)+"/", sim.SiteName(1-vol%2)+"/"
		r = vol / 2 % crGeoServers
		chains[wire.VolumeID(vol)] = []wire.NodeID{
			wire.NodeID(first) + s(r), wire.NodeID(first) + s(r+1), wire.NodeID(second) + s(r), wire.NodeID(second) + s(r+1),
		}
	}
	return chains
}

// crFig3Load returns the load options of variant v under workload w.
func crFig3Load(v CRVariant, w sim.Workload, seed uint64, clients int, duration wire.Time) (sim.LoadOptions, error) {
	o := sim.LoadOptions{
		Seed: seed, Objects: crGeoObjects, Workload: &w, Clients: clients,
		Latency: CRLatency, Costs: CRCosts, WAN: crGeoWAN, WANJitter: crGeoWANJitter,
		// Catena's servers handle their peers' messages before clients'
		// requests (docs/adr/0025).
		PeersFirst:     true,
		AttemptTimeout: clientcore.DefaultAttemptTimeout,
		Duration:       duration, Bucket: wire.Second, KeepLatencies: true,
		Chains: crGeoChains(v),
	}
	switch v {
	case CRGeo:
		o.Protocol, o.K, o.Sites = sim.ProtocolCausal, crGeoK, crGeoSites
	case CRGeoLinearizable:
		o.Protocol, o.K, o.Sites = sim.ProtocolCausal, crGeoReplicas, crGeoSites
	case CRGeoLinearizableTail:
		o.Protocol, o.K, o.Sites = sim.ProtocolCausal, crGeoReplicas, crGeoSites
		o.CausalReadsAtTail = true
	case CRSpanning:
		o.Protocol, o.ClientSites = sim.ProtocolChain, crGeoSites
	case CRLocalChains:
		o.Protocol, o.Sites = sim.ProtocolChain, crGeoSites
	default:
		return o, fmt.Errorf("chainreaction-fig3: unknown variant %q", v)
	}
	return o, nil
}

// RunCRFig3 runs every workload on every variant.
func RunCRFig3(o Options) ([]CRFig3Point, error) {
	workloads, clients, warmup, duration := crFig3Grid(o.Quick)
	var points []CRFig3Point
	for _, w := range workloads {
		for _, v := range CRFig3Variants {
			points = append(points, CRFig3Point{Workload: w, Variant: v})
		}
	}
	progress := crProgress(o, "chainreaction-fig3")
	err := parallel(o, "chainreaction-fig3", len(points), func(i int) error {
		p := &points[i]
		w, err := ycsbWorkload(p.Workload)
		if err != nil {
			return err
		}
		// Every variant of a workload sees the same clients' requests.
		lo, err := crFig3Load(p.Variant, w, o.Seed+uint64(p.Workload[0]), clients, duration)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%s on workload %s", p.Variant, p.Workload)
		lo.Progress = func(now wire.Time) { progress(label, now, duration) }
		lo.ProgressEvery = wire.Second
		res, err := sim.RunLoad(lo)
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		p.Throughput = res.Throughput(wire.Second, warmup, duration)
		p.Abandoned = res.Abandoned
		for j := range crGeoSites {
			site := sim.SiteName(j)
			s := CRFig3Site{Site: site}
			if l := res.Latencies[site+"/"]; l != nil {
				s.ReadLatency = percentilesOf(l.Reads, nil, warmup, duration)
				s.WriteLatency = percentilesOf(l.Updates, nil, warmup, duration)
				s.Reads, s.Writes = s.ReadLatency.N, s.WriteLatency.N
			}
			p.Sites = append(p.Sites, s)
		}
		// Writes answered in the last second have had less time to reach
		// the other site than the lags of the others: left out.
		p.ShipLag = percentilesOf(res.ShipLag, res.ShipPending, warmup, duration-wire.Second)
		p.VisibleLag = percentilesOf(res.VisibleLag, res.VisiblePending, warmup, duration-wire.Second)
		third := (duration - wire.Second - warmup) / 3
		p.VisibleFirst = percentilesOf(res.VisibleLag, res.VisiblePending, warmup, warmup+third)
		p.VisibleLast = percentilesOf(res.VisibleLag, res.VisiblePending, duration-wire.Second-third, duration-wire.Second)
		return nil
	})
	return points, err
}

// CRFig3Ratio returns variant a's throughput on workload w divided by b's,
// or 0 if either is missing.
func CRFig3Ratio(points []CRFig3Point, w string, a, b CRVariant) float64 {
	var num, den float64
	for _, p := range points {
		if p.Workload != w {
			continue
		}
		switch p.Variant {
		case a:
			num = p.Throughput
		case b:
			den = p.Throughput
		}
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func ms(t wire.Time) float64 { return float64(t) / float64(wire.Millisecond) }

// String summarises a point for the progress output.
func (p CRFig3Point) String() string {
	s := fmt.Sprintf("%s on %s: %.0f requests/s;", p.Variant, p.Workload, p.Throughput)
	for _, l := range p.Sites {
		s += fmt.Sprintf(" site %s: %d reads %s, %d writes %s;", l.Site, l.Reads, l.ReadLatency, l.Writes, l.WriteLatency)
	}
	if p.ShipLag.N > 0 {
		s += fmt.Sprintf(" to the other site: shipped %s, visible %s (first third %s, last %s; %d writes, %d not visible when the run ended)",
			p.ShipLag, p.VisibleLag, p.VisibleFirst, p.VisibleLast, p.VisibleLag.N, p.VisibleLag.Unfinished)
	}
	if p.Abandoned > 0 {
		s += fmt.Sprintf(" %d abandoned", p.Abandoned)
	}
	return s
}

// WriteCRFig3CSV writes one row per run with the header
// workload,variant,throughput,writes_shipped,unfinished,ship_p50_ms,ship_p99_ms,visible_p50_ms,visible_p99_ms,visible_first_p50_ms,visible_last_p50_ms
// (the last two over the first and the last third of the measured
// window; the lags empty for the variants without shipping; writes_shipped
// counts the writes whose lag is measured, unfinished those not yet
// visible at the other site when the run ended, whose lags are then
// lower bounds).
func WriteCRFig3CSV(w io.Writer, points []CRFig3Point) error {
	if _, err := fmt.Fprintln(w, "workload,variant,throughput,writes_shipped,unfinished,ship_p50_ms,ship_p99_ms,visible_p50_ms,visible_p99_ms,visible_first_p50_ms,visible_last_p50_ms"); err != nil {
		return err
	}
	for _, p := range points {
		lags := ",,,,,,,"
		if p.VisibleLag.N > 0 {
			lags = fmt.Sprintf("%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f", p.VisibleLag.N, p.VisibleLag.Unfinished,
				ms(p.ShipLag.P50), ms(p.ShipLag.P99), ms(p.VisibleLag.P50), ms(p.VisibleLag.P99),
				ms(p.VisibleFirst.P50), ms(p.VisibleLast.P50))
		}
		if _, err := fmt.Fprintf(w, "%s,%s,%.0f,%s\n", p.Workload, p.Variant, p.Throughput, lags); err != nil {
			return err
		}
	}
	return nil
}

// WriteCRFig3LatencyCSV writes one row per run and site with the header
// workload,variant,site,reads,writes,read_mean_ms,read_p50_ms,read_p99_ms,write_mean_ms,write_p50_ms,write_p99_ms
// (reads and writes completed in the measured window).
func WriteCRFig3LatencyCSV(w io.Writer, points []CRFig3Point) error {
	if _, err := fmt.Fprintln(w, "workload,variant,site,reads,writes,read_mean_ms,read_p50_ms,read_p99_ms,write_mean_ms,write_p50_ms,write_p99_ms"); err != nil {
		return err
	}
	for _, p := range points {
		for _, s := range p.Sites {
			r, wr := s.ReadLatency, s.WriteLatency
			if _, err := fmt.Fprintf(w, "%s,%s,%s,%d,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", p.Workload, p.Variant, s.Site, s.Reads, s.Writes,
				ms(r.Mean), ms(r.P50), ms(r.P99), ms(wr.Mean), ms(wr.P50), ms(wr.P99)); err != nil {
				return err
			}
		}
	}
	return nil
}

// crFig3PaperOverCRL are the paper's ChainReaction ÷ CR-L throughputs
// (§VII-B: +22%, +53%, +26% on B, C, D).
var crFig3PaperOverCRL = map[string]float64{"B": 1.22, "C": 1.53, "D": 1.26}

// PlotCRFig3 draws (a) the throughput of each variant on each workload,
// as the paper's bar chart, and (b) causal-geo's throughput over cr-l's,
// cr-l-tail's and chain-local's, with the paper's ChainReaction ÷ CR-L.
func PlotCRFig3(path string, points []CRFig3Point) error {
	var workloads []string
	for _, p := range points {
		if !slices.Contains(workloads, p.Workload) {
			workloads = append(workloads, p.Workload)
		}
	}
	slices.Sort(workloads)
	width := vg.Points(12)
	bars := func(p *plot.Plot, variants []CRVariant, value func(w string, v CRVariant) float64) error {
		for j, v := range variants {
			values := make(plotter.Values, len(workloads))
			for i, w := range workloads {
				values[i] = value(w, v)
			}
			b, err := plotter.NewBarChart(values, width)
			if err != nil {
				return err
			}
			b.Color = seriesColors[slices.Index(CRFig3Variants, v)%len(seriesColors)]
			b.LineStyle.Width = 0
			b.Offset = width * vg.Length(2*j-len(variants)+1) / 2
			p.Add(b)
			p.Legend.Add(string(v), b)
		}
		p.NominalX(workloads...)
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(-6)
		p.Y.Min = 0
		p.Y.Tick.Marker = plainTicks{}
		return nil
	}
	a := plot.New()
	a.Title.Text = "(a) 2 sites × 4 servers, 120 ms RTT: throughput"
	a.X.Label.Text = "YCSB workload"
	a.Y.Label.Text = "requests/s"
	a.Add(plotter.NewGrid())
	if err := bars(a, CRFig3Variants, func(w string, v CRVariant) float64 {
		for _, p := range points {
			if p.Workload == w && p.Variant == v {
				return p.Throughput
			}
		}
		return 0
	}); err != nil {
		return err
	}
	b := plot.New()
	b.Title.Text = "(b) causal-geo ÷ the variant (× the paper: ChainReaction ÷ CR-L)"
	b.X.Label.Text = "YCSB workload"
	b.Y.Label.Text = "× the variant's throughput"
	b.Add(plotter.NewGrid())
	if err := bars(b, []CRVariant{CRGeoLinearizable, CRGeoLinearizableTail, CRLocalChains}, func(w string, v CRVariant) float64 {
		return CRFig3Ratio(points, w, CRGeo, v)
	}); err != nil {
		return err
	}
	var paper plotter.XYs
	for i, w := range workloads {
		if r, ok := crFig3PaperOverCRL[w]; ok {
			paper = append(paper, plotter.XY{X: float64(i), Y: r})
		}
	}
	if len(paper) > 0 {
		sc, err := plotter.NewScatter(paper)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = draw.CrossGlyph{}
		sc.GlyphStyle.Radius = vg.Points(5)
		b.Add(sc)
		b.Legend.Add("paper: ChainReaction ÷ CR-L", sc)
	}
	row := []*plot.Plot{a, b}
	const panelWidth, height = 6 * vg.Inch, 4 * vg.Inch
	return savePanelRow(path, row, panelWidth, height)
}

func runCRFig3(o Options) error {
	points, err := RunCRFig3(o)
	if err != nil {
		return err
	}
	for _, p := range points {
		fmt.Fprintf(o.Progress, "chainreaction-fig3: %s\n", p)
	}
	name := "chainreaction-fig3"
	if err := writeFile(filepath.Join(o.Out, name+".csv"), func(w io.Writer) error { return WriteCRFig3CSV(w, points) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, name+"_latency.csv"), func(w io.Writer) error { return WriteCRFig3LatencyCSV(w, points) }); err != nil {
		return err
	}
	return PlotCRFig3(filepath.Join(o.Out, name+".png"), points)
}
