package experiment

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// BCRVariant names one way of laying the BCR paper's 4000 objects over its
// four servers.
type BCRVariant string

// The variants bcr compares. cr and bcr are the paper's §5; rotated4 is
// ours: the same idea taken to every server.
const (
	// BCRChain is traditional chain replication: one chain s1→s2→s3→s4
	// holds all 4000 objects.
	BCRChain BCRVariant = "cr"
	// BCRBidirectional is BCR: objects 0..1999 (LP1) on s1→s2→s3→s4,
	// 2000..3999 (LP2) on s4→s3→s2→s1.
	BCRBidirectional BCRVariant = "bcr"
	// BCRRotated4 has four partitions of 1000 objects whose chains are the
	// four rotations of s1s2s3s4: every server is the head of one and the
	// tail of another.
	BCRRotated4 BCRVariant = "rotated4"
)

// BCRVariants lists the variants in the order they are reported.
var BCRVariants = []BCRVariant{BCRChain, BCRBidirectional, BCRRotated4}

// BCRModel names how a simulated server executes the messages of the
// chains (volumes) it belongs to.
type BCRModel string

const (
	// BCRProcessPerChain is the paper's server: one process per chain role
	// ("S1 employs two processes: H1 to exclusively write to LP1 and T2 to
	// exclusively read from LP2", BCR §4.1) on an eight-core VM, so a
	// server works on its volumes in parallel, each volume's messages one
	// at a time (sim.LoadOptions.ProcessPerVolume).
	BCRProcessPerChain BCRModel = "process-per-chain"
	// BCROneProcess is Catena's server with one event loop (catena server
	// -loops 1): it executes the messages of all its volumes one at a
	// time.
	BCROneProcess BCRModel = "one-process"
	// BCRCatenaLoops is Catena's server on the paper's eight-core VMs:
	// by default one event loop per CPU, BCRLoops of them, each running
	// the volumes chain.LoopOf gives it (sim.LoadOptions.Loops).
	BCRCatenaLoops BCRModel = "catena-loops"
)

// BCRLoops is how many event loops Catena's server runs on the paper's
// eight-core VMs (catena server's -loops default: one per CPU).
const BCRLoops = 8

// BCRModels lists the server models in the order they are reported; the
// first is the paper's, the one bcr.csv reports.
var BCRModels = []BCRModel{BCRProcessPerChain, BCROneProcess, BCRCatenaLoops}

// loops is the event loops of each server under model m, as
// sim.LoadOptions.Loops takes them.
func (m BCRModel) loops() int {
	if m == BCRCatenaLoops {
		return BCRLoops
	}
	return 1
}

func (m BCRModel) check() error {
	if !slices.Contains(BCRModels, m) {
		return fmt.Errorf("bcr: unknown server model %q", m)
	}
	return nil
}

// BCRProcess is one processor of the simulated servers: under
// BCRProcessPerChain a server's replica of one volume (Part "v0", "v1",
// ...), under BCROneProcess the whole server (Part ""), under
// BCRCatenaLoops one event loop of the server (Part "loop0", ...).
type BCRProcess struct {
	Server wire.NodeID
	Part   string
}

func (p BCRProcess) String() string {
	if p.Part == "" {
		return string(p.Server)
	}
	return string(p.Server) + "/" + p.Part
}

// process is the processor of model m that executes volume v's messages
// on server s.
func (m BCRModel) process(s wire.NodeID, v wire.VolumeID) BCRProcess {
	switch m {
	case BCROneProcess:
		return BCRProcess{Server: s}
	case BCRCatenaLoops:
		return BCRProcess{Server: s, Part: fmt.Sprintf("loop%d", chain.LoopOf(v, BCRLoops))}
	}
	return BCRProcess{Server: s, Part: fmt.Sprintf("v%d", v)}
}

// The BCR paper's §5 workload: 4000 objects, 10 requests per client, 10%
// writes, objects chosen uniformly at random.
const (
	bcrObjects           = 4000
	bcrRequestsPerClient = 10
	bcrUpdateFraction    = 0.10
)

// BCRCosts model in-memory servers (BCR §5 gives no service times; its
// 4000 objects on VMs with 8 GB of memory fit in memory): every message a
// server executes - a read at the tail, a write at the head, a write
// applied from the predecessor - costs the same 1 ms; acknowledgements
// and control messages are free. See docs/experiments.md for why.
var BCRCosts = sim.Costs{Query: wire.Millisecond, Update: wire.Millisecond, Forward: wire.Millisecond}

// BCRLatency is the one-way latency of every message.
const BCRLatency = 500 * wire.Microsecond

// bcrServers are the paper's S1..S4.
var bcrServers = []wire.NodeID{"s1", "s2", "s3", "s4"}

// The grids: the paper's 200, 300, 400 and 500 clients and the points in
// between, each with independent replications.
var (
	bcrClients          = []int{200, 250, 300, 350, 400, 450, 500}
	bcrReplications     = 10
	bcrQuickClients     = []int{200, 500}
	bcrQuickReplication = 4
)

// bcrPlacement is how each variant's chains are placed over s1..s4: one
// replica group of t = 4 with placement's group strategies. Bidirectional
// runs the group's order forwards for even volumes and backwards for odd
// ones (cr is its one forward chain), Rotated uses the order's rotations.
var bcrPlacement = map[BCRVariant]struct {
	strategy placement.Strategy
	volumes  int
}{
	BCRChain:         {placement.Bidirectional, 1},
	BCRBidirectional: {placement.Bidirectional, 2},
	BCRRotated4:      {placement.Rotated, 4},
}

// BCRChains returns the chains of a variant over s1..s4 (head first),
// placed by placement.Initial, and the map from object to volume: the
// objects split into equal consecutive blocks, one per chain.
func BCRChains(v BCRVariant) (map[wire.VolumeID][]wire.NodeID, func(object int) wire.VolumeID, error) {
	p, ok := bcrPlacement[v]
	if !ok {
		return nil, nil, fmt.Errorf("bcr: unknown variant %q", v)
	}
	chains, err := placement.Initial(p.strategy, bcrServers, p.volumes, len(bcrServers), nil)
	if err != nil {
		return nil, nil, err
	}
	per := bcrObjects / p.volumes
	return chains, func(object int) wire.VolumeID { return wire.VolumeID(object / per) }, nil
}

// BCRDemand returns the expected number of messages each processor of
// model m executes per client request under the paper's workload, when
// objects are chosen uniformly: a partition holding a share s of the
// objects gives its head s·u updates, its tail s·(1−u) reads, and each
// member after the head s·u forwarded updates, u being the update
// fraction. The processors are (server, volume) pairs under
// BCRProcessPerChain and servers under BCROneProcess. With uniform costs
// the largest is the bottleneck's busy time per request:
//
//	                    cr    bcr    rotated4
//	process-per-chain   1     0.5    0.25     (a chain's tail)
//	one-process         1     0.55   0.325    (a server heading one chain and tailing another)
func BCRDemand(v BCRVariant, m BCRModel) (map[BCRProcess]float64, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	chains, _, err := BCRChains(v)
	if err != nil {
		return nil, err
	}
	d := map[BCRProcess]float64{}
	share := 1 / float64(len(chains))
	for vol, members := range chains {
		d[m.process(members[0], vol)] += share * bcrUpdateFraction
		d[m.process(members[len(members)-1], vol)] += share * (1 - bcrUpdateFraction)
		for _, s := range members[1:] {
			d[m.process(s, vol)] += share * bcrUpdateFraction
		}
	}
	return d, nil
}

// bcrMaxDemand is the largest of BCRDemand's values.
func bcrMaxDemand(v BCRVariant, m BCRModel) (float64, error) {
	d, err := BCRDemand(v, m)
	if err != nil {
		return 0, err
	}
	most := 0.0
	for _, x := range d {
		most = max(most, x)
	}
	return most, nil
}

// BCRRun is one replication of one point.
type BCRRun struct {
	Throughput float64   // requests per second from the first request sent to the last reply
	Exec       wire.Time // execution time: Last - First
	// Handled counts the reads and writes each of s1..s4 executed.
	Handled [4][2]int
	// Bottleneck is the most messages (reads, writes and forwarded writes)
	// any one processor executed - a (server, volume) pair under
	// BCRProcessPerChain, a server under BCROneProcess: with uniform costs,
	// a lower bound on Exec of Bottleneck × 1 ms.
	Bottleneck int
}

// BCRPoint is one (model, clients, variant) point over its replications.
type BCRPoint struct {
	Model   BCRModel
	Clients int
	Variant BCRVariant
	Runs    []BCRRun
	Summary // of the throughput, requests per second
	// Ratio is the throughput over cr's with the same model in the same
	// replication (the same clients' requests), summarised over the
	// replications.
	Ratio Summary
	Exec  Summary // execution time, seconds
}

// bcrSeed is the seed of one replication: every variant and model of a
// (clients, replication) pair sees the same clients' requests, so every
// comparison is paired.
func bcrSeed(seed uint64, clients, rep int) uint64 {
	return seed<<40 | uint64(clients)<<16 | uint64(rep)
}

// RunBCR measures every (model, clients, variant) point with independent
// replications in parallel; variants must include cr, the reference of
// Ratio. The points come sorted by model (in the order of models), then
// clients, then variant (in the order of variants). The result depends
// only on the seed and grid.
func RunBCR(o Options, models []BCRModel, variants []BCRVariant, clients []int, replications int) ([]BCRPoint, error) {
	if !slices.Contains(variants, BCRChain) {
		return nil, fmt.Errorf("bcr: the variants must include %s", BCRChain)
	}
	for _, m := range models {
		if err := m.check(); err != nil {
			return nil, err
		}
	}
	type job struct{ point, rep int }
	var points []BCRPoint
	var jobs []job
	// Most clients first: the longest runs start first.
	for _, c := range slices.Backward(clients) {
		for _, m := range models {
			for _, v := range variants {
				points = append(points, BCRPoint{Model: m, Clients: c, Variant: v, Runs: make([]BCRRun, replications)})
				for r := range replications {
					jobs = append(jobs, job{len(points) - 1, r})
				}
			}
		}
	}
	err := parallel(o, "bcr", len(jobs), func(i int) error {
		j := jobs[i]
		p := &points[j.point]
		run, err := runBCROnce(p.Model, p.Variant, p.Clients, bcrSeed(o.Seed, p.Clients, j.rep))
		if err != nil {
			return err
		}
		p.Runs[j.rep] = run
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(points, func(a, b BCRPoint) int {
		if a.Model != b.Model {
			return slices.Index(models, a.Model) - slices.Index(models, b.Model)
		}
		return a.Clients - b.Clients
	})
	type key struct {
		m BCRModel
		c int
	}
	crOf := map[key]*BCRPoint{}
	for i := range points {
		if points[i].Variant == BCRChain {
			crOf[key{points[i].Model, points[i].Clients}] = &points[i]
		}
	}
	for i := range points {
		p := &points[i]
		cr := crOf[key{p.Model, p.Clients}]
		var tput, ratio, exec []float64
		for r, run := range p.Runs {
			tput = append(tput, run.Throughput)
			ratio = append(ratio, run.Throughput/cr.Runs[r].Throughput)
			exec = append(exec, float64(run.Exec)/float64(wire.Second))
		}
		p.Summary, p.Ratio, p.Exec = Summarize(tput), Summarize(ratio), Summarize(exec)
	}
	return points, nil
}

// runBCROnce runs one replication: clients closed-loop clients sending 10
// requests each to servers of model m, then measures.
func runBCROnce(m BCRModel, v BCRVariant, clients int, seed uint64) (BCRRun, error) {
	chains, volumeOf, err := BCRChains(v)
	if err != nil {
		return BCRRun{}, err
	}
	demand, err := bcrMaxDemand(v, m)
	if err != nil {
		return BCRRun{}, err
	}
	requests := clients * bcrRequestsPerClient
	// The bottleneck is busy about demand × 1 ms per request: twice that
	// and a second is ample (an unfinished run is an error below).
	duration := wire.Second + wire.Time(2*demand*float64(requests)*float64(BCRCosts.Query))
	res, err := sim.RunLoad(sim.LoadOptions{
		Seed: seed, Protocol: sim.ProtocolChain, Chains: chains,
		Objects: bcrObjects, VolumeOf: volumeOf,
		Clients: clients, UpdateFraction: func(int) float64 { return bcrUpdateFraction },
		RequestsPerClient: bcrRequestsPerClient, Duration: duration, Bucket: wire.Second,
		Latency: BCRLatency, Costs: BCRCosts, ProcessPerVolume: m == BCRProcessPerChain,
		Loops: m.loops(),
	})
	if err != nil {
		return BCRRun{}, err
	}
	if res.Completed != requests || res.Abandoned != 0 {
		return BCRRun{}, fmt.Errorf("bcr %s %s, %d clients, seed %d: %d of %d requests completed, %d abandoned", m, v, clients, seed, res.Completed, requests, res.Abandoned)
	}
	run := BCRRun{Exec: res.Last - res.First}
	run.Throughput = float64(res.Completed) / (float64(run.Exec) / float64(wire.Second))
	executed, err := bcrExecuted(m, chains, res.Handled)
	if err != nil {
		return BCRRun{}, err
	}
	for _, n := range executed {
		run.Bottleneck = max(run.Bottleneck, n)
	}
	for id, h := range res.Handled {
		i := slices.Index(bcrServers, id)
		if i < 0 {
			return BCRRun{}, fmt.Errorf("bcr: unexpected server %s", id)
		}
		run.Handled[i] = h
	}
	return run, nil
}

// bcrExecuted returns the messages (reads, writes and forwarded writes)
// each processor of model m executed, from the reads and writes each
// server executed. Reads run at a chain's tail and writes at its head, and
// no server heads or tails more than one chain, so a server's reads
// belong to the chain it tails and its writes to the chain it heads; every
// member after the head applies each of its chain's writes.
func bcrExecuted(m BCRModel, chains map[wire.VolumeID][]wire.NodeID, handled map[wire.NodeID][2]int) (map[BCRProcess]int, error) {
	headOf, tailOf := map[wire.NodeID]wire.VolumeID{}, map[wire.NodeID]wire.VolumeID{}
	for v, members := range chains {
		head, tail := members[0], members[len(members)-1]
		if _, ok := headOf[head]; ok {
			return nil, fmt.Errorf("bcr: %s heads two chains", head)
		}
		if _, ok := tailOf[tail]; ok {
			return nil, fmt.Errorf("bcr: %s tails two chains", tail)
		}
		headOf[head], tailOf[tail] = v, v
	}
	executed := map[BCRProcess]int{}
	for id, h := range handled {
		if h[0] > 0 {
			v, ok := tailOf[id]
			if !ok {
				return nil, fmt.Errorf("bcr: %s executed %d reads but tails no chain", id, h[0])
			}
			executed[m.process(id, v)] += h[0]
		}
		if h[1] > 0 {
			v, ok := headOf[id]
			if !ok {
				return nil, fmt.Errorf("bcr: %s executed %d writes but heads no chain", id, h[1])
			}
			executed[m.process(id, v)] += h[1]
		}
	}
	for v, members := range chains {
		for _, s := range members[1:] {
			executed[m.process(s, v)] += handled[members[0]][1]
		}
	}
	return executed, nil
}

// MeanHandled returns the mean over the replications of the reads (kind 0)
// or writes (kind 1) server i executed.
func (p BCRPoint) MeanHandled(server, kind int) float64 {
	sum := 0
	for _, r := range p.Runs {
		sum += r.Handled[server][kind]
	}
	return float64(sum) / float64(len(p.Runs))
}

// MeanBottleneck is the mean over the replications of Bottleneck.
func (p BCRPoint) MeanBottleneck() float64 {
	sum := 0
	for _, r := range p.Runs {
		sum += r.Bottleneck
	}
	return float64(sum) / float64(len(p.Runs))
}

// BCRHeader is the header of bcr.csv, which the issue fixes: the mean
// throughput of each (clients, variant) with the paper's servers
// (BCRPaperModel).
var BCRHeader = []string{"clients", "variant", "throughput"}

// BCRPaperModel is the server model of the paper, the one bcr.csv reports.
const BCRPaperModel = BCRProcessPerChain

// BCRDetailHeader is the header of bcr_detail.csv: the server model, the
// clients, variant and mean throughput, then the interval, the paired
// ratio to cr, the execution time, the bottleneck processor's executed
// messages and the mean reads (r) and writes (w) per server (all means
// over the replications).
var BCRDetailHeader = []string{"model", "clients", "variant", "throughput", "ci_low", "ci_high", "replications",
	"ratio_vs_cr", "ratio_ci_low", "ratio_ci_high", "exec_s", "bottleneck_msgs",
	"s1_r", "s1_w", "s2_r", "s2_w", "s3_r", "s3_w", "s4_r", "s4_w"}

func bcrFloat(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }

// WriteBCRCSV writes bcr.csv: BCRHeader and one row per point of
// BCRPaperModel.
func WriteBCRCSV(w io.Writer, points []BCRPoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(BCRHeader); err != nil {
		return err
	}
	for _, p := range points {
		if p.Model != BCRPaperModel {
			continue
		}
		if err := cw.Write([]string{strconv.Itoa(p.Clients), string(p.Variant), bcrFloat(p.Mean, 2)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteBCRDetailCSV writes bcr_detail.csv: BCRDetailHeader and one row
// per point, every model.
func WriteBCRDetailCSV(w io.Writer, points []BCRPoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(BCRDetailHeader); err != nil {
		return err
	}
	f := bcrFloat
	for _, p := range points {
		row := []string{string(p.Model), strconv.Itoa(p.Clients), string(p.Variant), f(p.Mean, 2), f(p.Low, 2), f(p.High, 2), strconv.Itoa(p.N),
			f(p.Ratio.Mean, 4), f(p.Ratio.Low, 4), f(p.Ratio.High, 4), f(p.Exec.Mean, 4), f(p.MeanBottleneck(), 1)}
		for s := range bcrServers {
			row = append(row, f(p.MeanHandled(s, 0), 1), f(p.MeanHandled(s, 1), 1))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// PlotBCR draws (a) throughput against the number of clients with the
// paper's servers (BCRPaperModel), one line per variant with its
// confidence intervals, (b) bcr's throughput over cr's for every server
// model, against the paper's 1.85 and each model's bound, and (c) the
// reads and writes each server executed at the largest number of clients
// (paper's model), as a share of all requests.
func PlotBCR(path string, points []BCRPoint, title string) error {
	if len(bcrPointsOf(points, BCRPaperModel, BCRChain)) == 0 {
		return fmt.Errorf("no %s points to plot", BCRPaperModel)
	}
	tput, err := plotBCRThroughput(points)
	if err != nil {
		return err
	}
	ratio, err := plotBCRRatio(points)
	if err != nil {
		return err
	}
	load, err := plotBCRLoad(points)
	if err != nil {
		return err
	}
	const panelWidth, height = 5 * vg.Inch, 4.5 * vg.Inch
	return saveTitledPanelRow(path, title, []*plot.Plot{tput, ratio, load}, panelWidth, height)
}

// bcrPointsOf returns the points of one server model and variant.
func bcrPointsOf(points []BCRPoint, m BCRModel, v BCRVariant) []BCRPoint {
	var out []BCRPoint
	for _, p := range points {
		if p.Model == m && p.Variant == v {
			out = append(out, p)
		}
	}
	return out
}

// plotBCRThroughput is PlotBCR's panel (a): throughput against the
// number of clients with the paper's servers, one line per variant.
func plotBCRThroughput(points []BCRPoint) (*plot.Plot, error) {
	// Short vertical labels: gonum leaves a gap above the plot for long ones.
	tput := plot.New()
	tput.Title.Text = fmt.Sprintf("(a) throughput, %s servers", BCRPaperModel)
	tput.X.Label.Text = "clients (10 requests each)"
	tput.Y.Label.Text = "requests/s"
	tput.Legend.Top, tput.Legend.Left = true, true
	tput.Add(plotter.NewGrid())
	yMax := 0.0
	for _, p := range points {
		if p.Model == BCRPaperModel {
			yMax = max(yMax, p.High)
		}
	}
	tput.Y.Min, tput.Y.Max = 0, 1.3*yMax // room for the legend
	// Whole numbers: gonum's default labels read "5000.00" here.
	var tputTicks []plot.Tick
	for y := 0.0; y <= tput.Y.Max; y += 500 {
		label := ""
		if math.Mod(y, 1000) == 0 {
			label = strconv.Itoa(int(y))
		}
		tputTicks = append(tputTicks, plot.Tick{Value: y, Label: label})
	}
	tput.Y.Tick.Marker = plot.ConstantTicks(tputTicks)
	for i, v := range BCRVariants {
		var xys plotter.XYs
		var low, high []float64
		for _, p := range bcrPointsOf(points, BCRPaperModel, v) {
			xys = append(xys, plotter.XY{X: float64(p.Clients), Y: p.Mean})
			low, high = append(low, p.Mean-p.Low), append(high, p.High-p.Mean)
		}
		if err := addLineWithErrors(tput, string(v), seriesColors[i%len(seriesColors)], errorPoints{XYs: xys, low: low, high: high}); err != nil {
			return nil, err
		}
	}
	return tput, nil
}

// plotBCRRatio is PlotBCR's panel (b): bcr's throughput over cr's for
// every server model, against the paper's and each model's bound.
func plotBCRRatio(points []BCRPoint) (*plot.Plot, error) {
	// Zoomed, against the paper's +85%, each model's uniform-cost bound
	// and the 1.8 the issue asks for.
	ratio := plot.New()
	ratio.Title.Text = "(b) bcr / cr (paired), mean and 99% CI"
	ratio.X.Label.Text = "clients (10 requests each)"
	ratio.Y.Label.Text = "bcr / cr"
	ratio.Legend.Top, ratio.Legend.Left = false, false
	ratio.Add(plotter.NewGrid())
	modelColor := map[BCRModel]color.Color{BCRProcessPerChain: seriesColors[1], BCROneProcess: seriesColors[4], BCRCatenaLoops: seriesColors[2]}
	rMin, rMax := 1.8, 2.0
	xMin, xMax := math.Inf(1), math.Inf(-1)
	type series struct {
		m         BCRModel
		xys       plotter.XYs
		low, high []float64
	}
	var lines []series
	for _, m := range BCRModels {
		s := series{m: m}
		for _, p := range bcrPointsOf(points, m, BCRBidirectional) {
			s.xys = append(s.xys, plotter.XY{X: float64(p.Clients), Y: p.Ratio.Mean})
			s.low, s.high = append(s.low, p.Ratio.Mean-p.Ratio.Low), append(s.high, p.Ratio.High-p.Ratio.Mean)
			rMin, rMax = min(rMin, p.Ratio.Low), max(rMax, p.Ratio.High)
			xMin, xMax = min(xMin, float64(p.Clients)), max(xMax, float64(p.Clients))
		}
		if len(s.xys) > 0 {
			lines = append(lines, s)
		}
	}
	ratio.Y.Min, ratio.Y.Max = rMin-0.3, rMax+0.03 // room below for the legend
	// Explicit ticks: gonum's default ones can fall on 1.75 and print it
	// rounded as "1.8".
	var ticks []plot.Tick
	for y := math.Ceil(ratio.Y.Min*20) / 20; y <= ratio.Y.Max; y += 0.05 {
		label := ""
		if math.Mod(math.Round(y*20), 2) == 0 {
			label = strconv.FormatFloat(y, 'f', 1, 64)
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: label})
	}
	ratio.Y.Tick.Marker = plot.ConstantTicks(ticks)
	for _, ref := range []struct {
		name   string
		y      float64
		c      color.Color
		dashes []vg.Length
	}{
		{"BCR paper: 1.85", 1.85, color.Gray{Y: 0x30}, []vg.Length{vg.Points(6), vg.Points(3)}},
		{"bound 1/0.5 = 2 (process-per-chain, catena-loops)", 2, modelColor[BCRProcessPerChain], []vg.Length{vg.Points(4), vg.Points(3)}},
		{"bound 1/0.55 = 1.818 (one-process)", 1 / 0.55, modelColor[BCROneProcess], []vg.Length{vg.Points(4), vg.Points(3)}},
		{"1.8", 1.8, color.Gray{Y: 0xa0}, []vg.Length{vg.Points(1.5), vg.Points(2)}},
	} {
		l, err := plotter.NewLine(plotter.XYs{{X: xMin, Y: ref.y}, {X: xMax, Y: ref.y}})
		if err != nil {
			return nil, err
		}
		l.Color = ref.c
		l.Width = vg.Points(1)
		l.Dashes = ref.dashes
		ratio.Add(l)
		ratio.Legend.Add(ref.name, l)
	}
	for _, s := range lines {
		if err := addLineWithErrors(ratio, string(s.m), modelColor[s.m], errorPoints{XYs: s.xys, low: s.low, high: s.high}); err != nil {
			return nil, err
		}
	}
	return ratio, nil
}

// plotBCRLoad is PlotBCR's panel (c): the reads and writes each server
// executed at the largest number of clients (paper's model), as a share
// of all requests.
func plotBCRLoad(points []BCRPoint) (*plot.Plot, error) {
	largest := 0
	for _, p := range points {
		largest = max(largest, p.Clients)
	}
	load := plot.New()
	load.Title.Text = fmt.Sprintf("(c) requests executed per server, %d clients", largest)
	load.Y.Label.Text = "share of requests"
	load.Legend.Top, load.Legend.Left = true, true
	load.Add(plotter.NewGrid())
	names := make([]string, len(bcrServers))
	for i, s := range bcrServers {
		names[i] = string(s)
	}
	load.NominalX(names...)
	width := vg.Points(14)
	for i, v := range BCRVariants {
		var p *BCRPoint
		for j := range points {
			if points[j].Model == BCRPaperModel && points[j].Clients == largest && points[j].Variant == v {
				p = &points[j]
			}
		}
		if p == nil {
			continue
		}
		total := float64(p.Clients * bcrRequestsPerClient)
		reads, writes := make(plotter.Values, len(bcrServers)), make(plotter.Values, len(bcrServers))
		for s := range bcrServers {
			reads[s] = p.MeanHandled(s, 0) / total
			writes[s] = p.MeanHandled(s, 1) / total
		}
		c := seriesColors[i%len(seriesColors)]
		rb, err := plotter.NewBarChart(reads, width)
		if err != nil {
			return nil, err
		}
		wb, err := plotter.NewBarChart(writes, width)
		if err != nil {
			return nil, err
		}
		offset := width * vg.Length(i-1)
		rb.Color, rb.Offset = c, offset
		rb.LineStyle.Width = vg.Points(0.5)
		wb.Color, wb.Offset = bcrLighter(c), offset
		wb.LineStyle.Width = vg.Points(0.5)
		wb.StackOn(rb)
		load.Add(rb, wb)
		load.Legend.Add(string(v)+" reads", rb)
		load.Legend.Add(string(v)+" writes", wb)
	}
	load.Y.Min, load.Y.Max = 0, 1.15
	return load, nil
}

// bcrLighter mixes c half-way to white.
func bcrLighter(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(x uint32) uint8 { return uint8((x>>8 + 0xff) / 2) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 0xff}
}

// bcrGrid returns the client counts and replications of a run.
func bcrGrid(quick bool) ([]int, int) {
	if quick {
		return bcrQuickClients, bcrQuickReplication
	}
	return bcrClients, bcrReplications
}

// runBCR runs every server model over the grid and writes bcr.csv (the
// paper's model, the three columns), bcr_detail.csv (every model
// and column) and bcr.png.
func runBCR(o Options) error {
	clients, reps := bcrGrid(o.Quick)
	points, err := RunBCR(o, BCRModels, BCRVariants, clients, reps)
	if err != nil {
		return err
	}
	for _, p := range points {
		fmt.Fprintf(o.Progress, "bcr: %-17s %3d clients %-8s %7.1f req/s [%.1f, %.1f]  x%.3f cr [%.3f, %.3f]  exec %.3f s\n",
			p.Model, p.Clients, p.Variant, p.Mean, p.Low, p.High, p.Ratio.Mean, p.Ratio.Low, p.Ratio.High, p.Exec.Mean)
	}
	if err := writeFile(filepath.Join(o.Out, "bcr.csv"), func(w io.Writer) error { return WriteBCRCSV(w, points) }); err != nil {
		return err
	}
	detail := filepath.Join(o.Out, "bcr_detail.csv")
	if err := writeFile(detail, func(w io.Writer) error { return WriteBCRDetailCSV(w, points) }); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "bcr: wrote %s\n", detail)
	q := ""
	if o.Quick {
		q = ", --quick"
	}
	title := fmt.Sprintf("BCR §5 (Catena simulation, seed %d%s): 4 servers, 4000 objects, 10%% writes, %d replications per point", o.Seed, q, reps)
	return PlotBCR(filepath.Join(o.Out, "bcr.png"), points, title)
}
