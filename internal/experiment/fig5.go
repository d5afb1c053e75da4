package experiment

import (
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// CR §5.2's setting: 5000 volumes of three replicas placed at random
// (rndpar, GFS-like), objects hashed to volumes (sim's default VolumeOf),
// 25 closed-loop clients behind a dispatcher that adds 1 ms to every
// request. 100 000 objects give every volume some (20 on average).
const (
	fig5Volumes      = 5000
	fig5Replicas     = 3
	fig5Clients      = 25
	fig5Objects      = 100_000
	fig5RequestDelay = wire.Millisecond
	fig5Latency      = wire.Millisecond
)

// Master and server timers for 5000 volumes. The simulator's defaults
// (100 ms heartbeats, 10 ms ticks) cost more than the requests: the
// master's heartbeat handling walks all 5000 configurations for every
// heartbeat, and every tick walks every replica. Heartbeats and
// configurations are control-plane messages the cost model handles at no
// cost, and no server fails, so slower timers change nothing but the run
// time (the CSV is byte-identical with 1 s heartbeats and 100 ms ticks).
// The lease outlives two heartbeats, and the failure timeout exceeds the
// lease as master.Options.Validate requires.
const (
	fig5Heartbeat      = 2 * wire.Second
	fig5Tick           = 250 * wire.Millisecond
	fig5Lease          = 5 * wire.Second
	fig5FailureTimeout = 15 * wire.Second
)

// Fig5Point is one measured point.
type Fig5Point struct {
	Servers   int
	UpdatePct int
	Variant   sim.Protocol
	// PerClient is the average request throughput per client (requests
	// per second) in the measured window: Total / 25.
	PerClient float64
	Total     float64 // requests per second, all clients together
	Completed int     // requests completed in the measured window
}

// fig5Config is what RunFig5 measures.
type fig5Config struct {
	Servers, Pcts []int // the chain grid: CR Figure 5
	// VariantServers × VariantPcts are measured for pb, weak-chain and
	// weak-pb too (CR: "little or no difference").
	VariantServers, VariantPcts []int
	// Warmup is excluded, counted from when the clients start; Measure
	// is the window measured after it. Both whole seconds.
	Warmup, Measure wire.Time
}

// fig5Grid returns the full or the quick configuration. Servers run from
// t = 3 (the fewest that can hold a chain) to 150, past where the
// per-client throughput levels off near its no-queueing bound; the
// spacing is denser where the curves bend.
func fig5Grid(quick bool) fig5Config {
	if quick {
		return fig5Config{Servers: []int{3, 12, 50, 125}, Pcts: []int{0, 25, 100},
			Warmup: 2 * wire.Second, Measure: 5 * wire.Second}
	}
	return fig5Config{
		Servers: []int{3, 6, 12, 25, 50, 75, 100, 125, 150}, Pcts: []int{0, 10, 25, 50, 100},
		VariantServers: []int{3, 25, 125}, VariantPcts: []int{0, 10, 50, 100},
		Warmup: 2 * wire.Second, Measure: 20 * wire.Second,
	}
}

// fig5Chains places the volumes on n servers at random (placement.Random,
// balanced: every server holds 15000/n replicas, ±1). The placement depends
// only on the seed and n, so every update percentage and variant at n
// servers runs on the same chains.
func fig5Chains(seed uint64, n int) (map[wire.VolumeID][]wire.NodeID, error) {
	servers := make([]wire.NodeID, n)
	for i := range servers {
		servers[i] = wire.NodeID(fmt.Sprintf("s%d", i+1))
	}
	rng := rand.New(rand.NewPCG(seed, 0xf195+uint64(n)))
	return placement.Initial(placement.Random, servers, fig5Volumes, fig5Replicas, rng)
}

// fig5Measure runs one point on chains.
func fig5Measure(seed uint64, p *Fig5Point, chains map[wire.VolumeID][]wire.NodeID, c fig5Config) error {
	pct := p.UpdatePct
	res, err := sim.RunLoad(sim.LoadOptions{
		// Every variant of a (servers, percentage) point sees the same
		// clients' requests: the comparison is not blurred by chance.
		Seed: seed + uint64(1000*p.Servers+pct), Protocol: p.Variant, Chains: chains,
		Objects: fig5Objects, Clients: fig5Clients, UpdateFraction: func(int) float64 { return float64(pct) / 100 },
		// Clients start at 3 heartbeats, once the servers hold leases.
		Duration: 3*fig5Heartbeat + c.Warmup + c.Measure, Bucket: wire.Second,
		RequestDelay: fig5RequestDelay, Latency: fig5Latency, Costs: Fig4Costs,
		Placement: placement.Random, HeartbeatInterval: fig5Heartbeat, TickInterval: fig5Tick,
		LeaseDuration: fig5Lease, FailureTimeout: fig5FailureTimeout,
		FixedRoles: true, // the paper's chains stay as placed
	})
	if err != nil {
		return err
	}
	// No failures, so the master must not have changed any chain (a
	// rebalancing move or a false suspicion would).
	for _, cfg := range res.Configs {
		if cfg.Epoch != 1 || !slices.Equal(cfg.Chain, chains[cfg.Volume]) {
			return fmt.Errorf("fig5: %d servers, %d%% updates, %s: volume %d's chain changed to %v (epoch %d)", p.Servers, pct, p.Variant, cfg.Volume, cfg.Chain, cfg.Epoch)
		}
	}
	from := int((res.First + c.Warmup) / wire.Second)
	to := from + int(c.Measure/wire.Second)
	if to > len(res.Queries) {
		return fmt.Errorf("fig5: %d servers, %d%% updates, %s: the run ended before the window did", p.Servers, pct, p.Variant)
	}
	for i := from; i < to; i++ {
		p.Completed += res.Queries[i] + res.Updates[i]
	}
	p.Total = float64(p.Completed) / (float64(c.Measure) / float64(wire.Second))
	p.PerClient = p.Total / fig5Clients
	return nil
}

// RunFig5 measures the average throughput per client for every number of
// servers and update percentage with chain replication (CR §5.2, Figure
// 5), and for the other variants at a few of them.
func RunFig5(o Options) ([]Fig5Point, error) { return runFig5Config(o, fig5Grid(o.Quick)) }

func runFig5Config(o Options, c fig5Config) ([]Fig5Point, error) {
	var points []Fig5Point
	for _, n := range c.Servers {
		for _, pct := range c.Pcts {
			points = append(points, Fig5Point{Servers: n, UpdatePct: pct, Variant: sim.ProtocolChain})
		}
	}
	for _, n := range c.VariantServers {
		for _, pct := range c.VariantPcts {
			for _, v := range sim.Protocols {
				if v != sim.ProtocolChain {
					points = append(points, Fig5Point{Servers: n, UpdatePct: pct, Variant: v})
				}
			}
		}
	}
	counts := slices.Clone(c.Servers)
	for _, n := range c.VariantServers {
		if !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	chains := make([]map[wire.VolumeID][]wire.NodeID, len(counts))
	for i, n := range counts {
		var err error
		if chains[i], err = fig5Chains(o.Seed, n); err != nil {
			return nil, err
		}
	}
	err := parallel(o, "fig5", len(points), func(i int) error {
		p := &points[i]
		return fig5Measure(o.Seed, p, chains[slices.Index(counts, p.Servers)], c)
	})
	return points, err
}

// WriteFig5CSV writes the points with the header
// servers,update_pct,per_client_throughput,variant,total_throughput,completed.
func WriteFig5CSV(w io.Writer, points []Fig5Point) error {
	if _, err := fmt.Fprintln(w, "servers,update_pct,per_client_throughput,variant,total_throughput,completed"); err != nil {
		return err
	}
	for _, p := range points {
		if _, err := fmt.Fprintf(w, "%d,%d,%.2f,%s,%.1f,%d\n", p.Servers, p.UpdatePct, p.PerClient, p.Variant, p.Total, p.Completed); err != nil {
			return err
		}
	}
	return nil
}

// Fig5Bound is the per-client throughput with no queueing: one request
// per no-load latency, averaged over the mix. A query takes 8 ms (1 ms
// dispatcher, 1 ms to the tail, 5 ms there, 1 ms back), an update 95 ms
// (1 ms dispatcher, 1 ms to the head, 50 ms there, 20 ms and 1 ms at each
// of the two others, 1 ms back).
func Fig5Bound(updatePct int) float64 {
	q := fig5RequestDelay + 2*fig5Latency + Fig4Costs.Query
	u := fig5RequestDelay + (fig5Replicas+1)*fig5Latency + Fig4Costs.Update + (fig5Replicas-1)*Fig4Costs.Forward
	f := float64(updatePct) / 100
	return float64(wire.Second) / ((1-f)*float64(q) + f*float64(u))
}

// PlotFig5 draws (a) the per-client throughput of chain replication
// against the number of servers, one line per update percentage (CR
// Figure 5), each with its no-queueing bound dashed; and, when other
// variants were measured, (b) their throughput relative to chain's.
func PlotFig5(path string, points []Fig5Point) error {
	var pcts, servers []int
	for _, p := range points {
		if p.Variant == sim.ProtocolChain && !slices.Contains(pcts, p.UpdatePct) {
			pcts = append(pcts, p.UpdatePct)
		}
		if p.Variant == sim.ProtocolChain && !slices.Contains(servers, p.Servers) {
			servers = append(servers, p.Servers)
		}
	}
	a := plot.New()
	a.Title.Text = "(a) chain replication, 5000 volumes, t = 3, 25 clients"
	a.X.Label.Text = "number of servers"
	a.Y.Label.Text = "throughput per client (requests/s)"
	a.Add(plotter.NewGrid())
	a.Y.Min, a.Y.Max = 0, Fig5Bound(0)*1.08
	a.X.Min = 0
	a.Legend.Top, a.Legend.Left = false, false
	a.Legend.YOffs = vg.Inch * 1.9
	xMin, xMax := float64(slices.Min(servers)), float64(slices.Max(servers))
	for i, pct := range pcts {
		var xys plotter.XYs
		for _, p := range points {
			if p.Variant == sim.ProtocolChain && p.UpdatePct == pct {
				xys = append(xys, plotter.XY{X: float64(p.Servers), Y: p.PerClient})
			}
		}
		c := seriesColors[i%len(seriesColors)]
		if err := addLine(a, fmt.Sprintf("%d%% updates", pct), xys, c, nil); err != nil {
			return err
		}
		b := Fig5Bound(pct)
		bound, err := plotter.NewLine(plotter.XYs{{X: xMin, Y: b}, {X: xMax, Y: b}})
		if err != nil {
			return err
		}
		bound.Color, bound.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
		a.Add(bound)
		if i == len(pcts)-1 {
			a.Legend.Add("dashed: no-queueing bound", bound)
		}
	}
	row := []*plot.Plot{a}

	var variants []sim.Protocol
	var vServers []int
	for _, p := range points {
		if p.Variant != sim.ProtocolChain {
			if !slices.Contains(variants, p.Variant) {
				variants = append(variants, p.Variant)
			}
			if !slices.Contains(vServers, p.Servers) {
				vServers = append(vServers, p.Servers)
			}
		}
	}
	if len(variants) > 0 {
		b := plot.New()
		b.Title.Text = "(b) other variants relative to chain"
		b.X.Label.Text = "percentage updates"
		b.Y.Label.Text = "throughput / chain's throughput"
		b.Add(plotter.NewGrid())
		b.Legend.Top = true
		b.Y.Min, b.Y.Max = 0.9, 1.5
		dashes := [][]vg.Length{{vg.Points(2), vg.Points(2)}, {vg.Points(6), vg.Points(3)}, nil}
		for i, v := range variants {
			for j, n := range vServers {
				var xys plotter.XYs
				for _, p := range points {
					if p.Variant != v || p.Servers != n {
						continue
					}
					k := slices.IndexFunc(points, func(q Fig5Point) bool {
						return q.Variant == sim.ProtocolChain && q.Servers == n && q.UpdatePct == p.UpdatePct
					})
					if k >= 0 && points[k].PerClient > 0 {
						xys = append(xys, plotter.XY{X: float64(p.UpdatePct), Y: p.PerClient / points[k].PerClient})
					}
				}
				c := seriesColors[(i+len(pcts))%len(seriesColors)]
				if err := addLine(b, fmt.Sprintf("%s, %d servers", v, n), xys, c, dashes[j%len(dashes)]); err != nil {
					return err
				}
			}
		}
		row = append(row, b)
	}
	const panelWidth, height = 6 * vg.Inch, 4.5 * vg.Inch
	return savePanelRow(path, row, panelWidth, height)
}

// addLine adds a line with points and a legend entry.
func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashes []vg.Length) error {
	line, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	line.Color, pts.Color = c, c
	line.Width = vg.Points(1.5)
	line.Dashes = dashes
	pts.Shape = draw.CircleGlyph{}
	pts.Radius = vg.Points(1.5)
	p.Add(line, pts)
	p.Legend.Add(name, line, pts)
	return nil
}

func runFig5(o Options) error {
	points, err := RunFig5(o)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, "fig5.csv"), func(w io.Writer) error { return WriteFig5CSV(w, points) }); err != nil {
		return err
	}
	return PlotFig5(filepath.Join(o.Out, "fig5.png"), points)
}
