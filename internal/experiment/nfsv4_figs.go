package experiment

import (
	"fmt"
	"io"
	"path/filepath"

	"gonum.org/v1/plot/plotter"

	"github.com/catena-kv/catena/internal/wire"
)

// NFSv4Point is one configuration of an nfsv4 experiment and its
// results, averaged over the workload's seeds.
type NFSv4Point struct {
	Run NFSv4Run
	// Runs is how many seeds were averaged.
	Runs int
	// Phase, Total and MeanWrite are the means, in seconds and
	// milliseconds; Elections the mean count of operations that waited
	// for an election.
	Phase     [3]float64
	Total     float64
	Elections float64
	MeanWrite float64
}

// nfsv4RTTs are the round trips between sites the experiments sweep
// (the paper's Figs. 5-7: from the 0.2 ms LAN to 120 ms).
var nfsv4RTTs = []float64{0.2, 10, 20, 40, 60, 80, 100, 120}

// nfsv4Seeds is how many workloads (seeds) each point averages: the
// paper reports the mean of five trials.
func nfsv4Seeds(quick bool) int {
	if quick {
		return 1
	}
	return 5
}

func msTime(ms float64) wire.Time { return wire.Time(ms * float64(wire.Millisecond)) }

// runNFSv4Points runs every configuration over the seeds, in parallel.
func runNFSv4Points(o Options, name string, runs []NFSv4Run) ([]NFSv4Point, error) {
	seeds := nfsv4Seeds(o.Quick)
	results := make([]NFSv4Result, len(runs)*seeds)
	err := parallel(o, name, len(results), func(i int) error {
		r := runs[i/seeds]
		r.Seed = o.Seed + uint64(i%seeds)
		res, err := RunNFSv4(r, o.Quick)
		results[i] = res
		return err
	})
	if err != nil {
		return nil, err
	}
	points := make([]NFSv4Point, len(runs))
	for i, r := range runs {
		p := NFSv4Point{Run: r, Runs: seeds}
		writes, writeTime := 0, wire.Time(0)
		for _, res := range results[i*seeds : (i+1)*seeds] {
			for ph := range p.Phase {
				p.Phase[ph] += seconds(res.Phase[ph]) / float64(seeds)
			}
			p.Total += seconds(res.Total()) / float64(seeds)
			p.Elections += float64(res.Elections) / float64(seeds)
			writes += res.Writes
			writeTime += res.WriteTime
		}
		p.MeanWrite = seconds(writeTime) * 1000 / float64(max(writes, 1))
		points[i] = p
	}
	return points, nil
}

// writeNFSv4CSV writes one row per point.
func writeNFSv4CSV(w io.Writer, points []NFSv4Point) error {
	if _, err := fmt.Fprintln(w, "mode,sites,rtt_ms,idle_s,unpack_s,configure_s,build_s,total_s,elections,mean_write_ms,runs"); err != nil {
		return err
	}
	for _, p := range points {
		r := p.Run
		if _, err := fmt.Fprintf(w, "%s,%d,%g,%g,%.3f,%.3f,%.3f,%.3f,%.1f,%.3f,%d\n", r.Mode, r.Sites, seconds(r.RTT)*1000, seconds(r.Idle),
			p.Phase[0], p.Phase[1], p.Phase[2], p.Total, p.Elections, p.MeanWrite, p.Runs); err != nil {
			return err
		}
	}
	return nil
}

// nfsv4Series gathers, for the points that keep, one line per name.
func nfsv4Series(points []NFSv4Point, keep func(NFSv4Point) (name string, x, y float64, ok bool)) []series {
	var out []series
	index := map[string]int{}
	for _, p := range points {
		name, x, y, ok := keep(p)
		if !ok {
			continue
		}
		i, seen := index[name]
		if !seen {
			i = len(out)
			index[name] = i
			out = append(out, series{Name: name})
		}
		out[i].XYs = append(out[i].XYs, plotter.XY{X: x, Y: y})
	}
	return out
}

// nfsv4Headroom is a Y range's top for the values y of points that
// leaves the upper third of a panel to its legend.
func nfsv4Headroom(points []NFSv4Point, y func(NFSv4Point) float64) float64 {
	top := 0.0
	for _, p := range points {
		top = max(top, y(p))
	}
	return top * 1.5
}

func nfsv4Total(p NFSv4Point) float64 { return p.Total }

func writeNFSv4Files(o Options, name string, points []NFSv4Point, panels []panel) error {
	if err := writeFile(filepath.Join(o.Out, name+".csv"), func(w io.Writer) error { return writeNFSv4CSV(w, points) }); err != nil {
		return err
	}
	return plotPanels(filepath.Join(o.Out, name+".png"), panels)
}

// nfsv4-fig6: the paper's Figs. 5 and 6. Two sites, the second at an
// increasing RTT; the build against one local server, one remote server,
// fine-grained and hierarchical control (1 s idle), a strong chain
// spanning the sites, and causal-geo.
func runNFSv4Fig6(o Options) error {
	var runs []NFSv4Run
	for _, rtt := range nfsv4RTTs {
		for _, mode := range []NFSv4Mode{NFSv4Local, NFSv4Remote, NFSv4FineGrained, NFSv4Hierarchical, NFSv4StrongChain, NFSv4Causal} {
			runs = append(runs, NFSv4Run{Mode: mode, Sites: 2, RTT: msTime(rtt), Idle: wire.Second, Costs: DefaultNFSv4Costs})
		}
	}
	points, err := runNFSv4Points(o, "nfsv4-fig6", runs)
	if err != nil {
		return err
	}
	total := nfsv4Series(points, func(p NFSv4Point) (string, float64, float64, bool) {
		return string(p.Run.Mode), seconds(p.Run.RTT) * 1000, p.Total, true
	})
	return writeNFSv4Files(o, "nfsv4-fig6", points, []panel{{
		Title: "Build time, 2 sites (idle 1 s)", XLabel: "RTT between sites (ms)", YLabel: "build time (s)", Series: total,
		YMax: nfsv4Headroom(points, nfsv4Total), // room above the lines for the legend
	}})
}

// nfsv4-fig7: the paper's Fig. 7. Hierarchical control with idle times
// of 0.1, 0.5 and 1 s, per phase, against one local server.
func runNFSv4Fig7(o Options) error {
	idles := []wire.Time{100 * wire.Millisecond, 500 * wire.Millisecond, wire.Second}
	var runs []NFSv4Run
	for _, rtt := range nfsv4RTTs {
		runs = append(runs, NFSv4Run{Mode: NFSv4Local, Sites: 2, RTT: msTime(rtt), Costs: DefaultNFSv4Costs})
		for _, idle := range idles {
			runs = append(runs, NFSv4Run{Mode: NFSv4Hierarchical, Sites: 2, RTT: msTime(rtt), Idle: idle, Costs: DefaultNFSv4Costs})
		}
	}
	points, err := runNFSv4Points(o, "nfsv4-fig7", runs)
	if err != nil {
		return err
	}
	var panels []panel
	for ph, phase := range NFSv4Phases {
		panels = append(panels, panel{
			Title: phase, XLabel: "RTT between sites (ms)", YLabel: "time (s)", YMax: nfsv4Headroom(points, func(p NFSv4Point) float64 { return p.Phase[ph] }),
			Series: nfsv4Series(points, func(p NFSv4Point) (string, float64, float64, bool) {
				name := "local server"
				if p.Run.Mode == NFSv4Hierarchical {
					name = fmt.Sprintf("idle %gs", seconds(p.Run.Idle))
				}
				return name, seconds(p.Run.RTT) * 1000, p.Phase[ph], true
			}),
		})
	}
	return writeNFSv4Files(o, "nfsv4-fig7", points, panels)
}

// nfsv4-fig8: the paper's Fig. 8. Two to seven sites, 0.2 ms (LAN) or
// 120 ms (WAN) between any two, the client 0.2 ms from its own;
// hierarchical control with a 1 s idle time.
func runNFSv4Fig8(o Options) error {
	var runs []NFSv4Run
	for sites := 2; sites <= 7; sites++ {
		for _, rtt := range []float64{0.2, 120} {
			runs = append(runs, NFSv4Run{Mode: NFSv4Hierarchical, Sites: sites, RTT: msTime(rtt), Idle: wire.Second, Costs: DefaultNFSv4Costs})
		}
		runs = append(runs, NFSv4Run{Mode: NFSv4Local, Sites: sites, Costs: DefaultNFSv4Costs})
	}
	points, err := runNFSv4Points(o, "nfsv4-fig8", runs)
	if err != nil {
		return err
	}
	total := nfsv4Series(points, func(p NFSv4Point) (string, float64, float64, bool) {
		name := "local server"
		if p.Run.Mode == NFSv4Hierarchical {
			name = fmt.Sprintf("hierarchical, %g ms apart", seconds(p.Run.RTT)*1000)
		}
		return name, float64(p.Run.Sites), p.Total, true
	})
	return writeNFSv4Files(o, "nfsv4-fig8", points, []panel{{
		Title: "Build time by number of sites (idle 1 s)", XLabel: "sites", YLabel: "build time (s)", Series: total, YMax: nfsv4Headroom(points, nfsv4Total),
	}})
}
