package experiment

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot/plotter"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// scaleout (issue 34, item 5): a keyspace's throughput as servers are
// added, with and without splitting its volumes. Three servers hold a
// keyspace of three volumes, t = 3, under saturating closed-loop load;
// three servers join; then (split scenario) the volumes double twice.
// The master's placement policy (placement.Cluster's Rebalance and
// BalanceRoles, as the master runs them) moves chains onto the new
// servers in both scenarios; only the split gives it enough chains to
// spread the work over all of them. Catena's chain servers, master and
// client core run in the deterministic simulator (sim.RunLoad with
// LoadOptions.Events) with CR §5's service times (Fig4Costs).

// ScaleoutParams describe the experiment.
type ScaleoutParams struct {
	Servers, Added int // servers at the start, and joining at Phase
	Volumes, T     int // the keyspace's volumes at the start, chain length
	Clients        int
	Objects        int
	UpdatePcts     []int // one pair of runs (no split, split) per workload
	// Phase is each phase's length: servers join at Phase, the split
	// scenario's splits are asked for at 2·Phase and 3·Phase, and the
	// run ends at 4·Phase. Window is measured: each phase's last Window.
	Phase, Window wire.Time
	Seeds         int // runs per (workload, scenario): seeds Seed, Seed+1, ...
}

// scaleoutParams returns the full or the quick parameters.
func scaleoutParams(quick bool) ScaleoutParams {
	p := ScaleoutParams{
		Servers: 3, Added: 3, Volumes: 3, T: 3, Clients: 40, Objects: 10_000,
		UpdatePcts: []int{100, 50}, Phase: 30 * wire.Second, Window: 20 * wire.Second, Seeds: 5,
	}
	if quick {
		p.UpdatePcts, p.Phase, p.Window, p.Seeds = []int{100}, 10*wire.Second, 6*wire.Second, 1
	}
	return p
}

// The scenarios: both add servers; only one splits.
const (
	ScaleoutNoSplit = "no-split"
	ScaleoutSplit   = "split"
)

var scaleoutScenarios = []string{ScaleoutNoSplit, ScaleoutSplit}

// scaleoutPhases names the phases: what happened at their start.
var scaleoutPhases = []string{"a: start", "b: servers added", "c: split", "d: second split"}

// ScaleoutPhase is one phase of one run: its throughput and where the
// chains were at its end.
type ScaleoutPhase struct {
	Phase      int // 0..3: a..d
	Start, End wire.Time
	// Throughput is the completed requests per second over the phase's
	// last Window.
	Throughput float64
	// Bound is the throughput the placement at the phase's end allows:
	// the busiest server's modelled work per request, with each volume
	// taking its objects' share of the requests (ScaleoutBound).
	Bound float64
	// Servers and Volumes are the live servers and started volumes at
	// the end; Chains, Heads and Tails are, per server in id order
	// (ScaleoutRun.Servers), the chains it is a member of, head of, tail
	// of.
	Servers, Volumes     int
	Chains, Heads, Tails []int
	// Settled is when the last configuration change of the phase
	// happened, from its start (0: none); Changes counts them.
	Settled wire.Time
	Changes int
	// Window is the length of the phase's measured end.
	Window wire.Time
	// Lowest is the fewest requests completed in one second of the
	// phase before its measured window: the dip its event caused (not
	// for the first phase, whose first second is the clients' start).
	Lowest int
}

// ScaleoutRun is one run: a workload, a scenario, a seed.
type ScaleoutRun struct {
	UpdatePct int
	Scenario  string
	Seed      uint64
	Servers   []wire.NodeID // s1.., the joining ones last
	Phases    []ScaleoutPhase
	// PerSecond is the completed requests in each second.
	PerSecond            []int
	Completed, Abandoned int
}

// scaleoutServers names the servers: s1.. at the start, then the ones
// that join.
func scaleoutServers(p ScaleoutParams) []wire.NodeID {
	ids := make([]wire.NodeID, p.Servers+p.Added)
	for i := range ids {
		ids[i] = wire.NodeID(fmt.Sprintf("s%d", i+1))
	}
	return ids
}

// scaleoutChains places the volumes on the first servers as rotations:
// volume v's chain starts at server v mod Servers, so heads and tails
// are spread evenly (with Volumes = Servers = T, each server is head of
// one chain, tail of one, in the middle of the rest).
func scaleoutChains(p ScaleoutParams) map[wire.VolumeID][]wire.NodeID {
	ids := scaleoutServers(p)[:p.Servers]
	chains := map[wire.VolumeID][]wire.NodeID{}
	for v := range p.Volumes {
		for j := range p.T {
			chains[wire.VolumeID(v)] = append(chains[wire.VolumeID(v)], ids[(v+j)%p.Servers])
		}
	}
	return chains
}

// ScaleoutBound is the throughput (requests per second) that configs
// allow with Fig4Costs, every server handling one message at a time:
// each volume of n gets the share of the requests its objects take (the
// objects of the load run, hashed as the keyspace routes them after its
// splits: volume = hash mod n, the default keyspace's volumes numbered
// in order), of which updatePct% are updates (Update at the head,
// Forward at every other member) and the rest queries (Query at the
// tail). The busiest server limits the throughput.
func ScaleoutBound(configs []wire.Config, objects, updatePct int) float64 {
	n := len(configs)
	share := make([]float64, n)
	for i := range objects {
		share[placement.VolumeOf(sim.ObjectKey(i), n)] += 1 / float64(objects)
	}
	u := float64(updatePct) / 100
	work := map[wire.NodeID]float64{} // seconds per request, on average
	for _, c := range configs {
		s := share[c.Volume]
		for i, id := range c.Chain {
			cost := u * float64(Fig4Costs.Forward)
			if i == 0 {
				cost = u * float64(Fig4Costs.Update)
			}
			if i == len(c.Chain)-1 {
				cost += (1 - u) * float64(Fig4Costs.Query)
			}
			work[id] += s * cost / float64(wire.Second)
		}
	}
	busiest := 0.0
	for _, w := range work {
		busiest = max(busiest, w)
	}
	return 1 / busiest
}

// configHistory records every configuration the master installs, in
// order, to give the configurations at any time.
type configHistory struct {
	at      []wire.Time
	configs []wire.Config
}

func (h *configHistory) add(now wire.Time, c wire.Config) {
	h.at = append(h.at, now)
	h.configs = append(h.configs, c)
}

// before returns the latest configuration of every volume installed
// before t, by volume, starting from initial.
func (h *configHistory) before(t wire.Time, initial map[wire.VolumeID][]wire.NodeID) []wire.Config {
	cur := map[wire.VolumeID]wire.Config{}
	for v, chain := range initial {
		cur[v] = wire.Config{Volume: v, Epoch: 1, Chain: chain}
	}
	for i, at := range h.at {
		if at >= t {
			break
		}
		cur[h.configs[i].Volume] = h.configs[i]
	}
	out := make([]wire.Config, 0, len(cur))
	for _, v := range slices.Sorted(maps.Keys(cur)) {
		out = append(out, cur[v])
	}
	return out
}

// runScaleout runs one scenario of one workload with one seed.
func runScaleout(p ScaleoutParams, updatePct int, scenario string, seed uint64) (ScaleoutRun, error) {
	ids := scaleoutServers(p)
	chains := scaleoutChains(p)
	var events []sim.LoadEvent
	for _, id := range ids[p.Servers:] {
		events = append(events, sim.LoadEvent{At: p.Phase, Join: id})
	}
	if scenario == ScaleoutSplit {
		events = append(events, sim.LoadEvent{At: 2 * p.Phase, Split: wire.DefaultKeyspace}, sim.LoadEvent{At: 3 * p.Phase, Split: wire.DefaultKeyspace})
	}
	var history configHistory
	duration := wire.Time(len(scaleoutPhases)) * p.Phase
	res, err := sim.RunLoad(sim.LoadOptions{
		Seed: seed, Protocol: sim.ProtocolChain, Chains: chains,
		Objects: p.Objects, Clients: p.Clients, UpdateFraction: func(int) float64 { return float64(updatePct) / 100 },
		Duration: duration, Bucket: wire.Second, Latency: wire.Millisecond, Costs: Fig4Costs,
		// Catena's servers drain their peers' messages before their
		// clients' (docs/adr/0025): under this much load a forward that
		// queued behind the clients' requests would stall the chain
		// past the failure timeout, and the master would cut it.
		PeersFirst: true,
		Placement:  placement.Random, Events: events,
		OnConfig: history.add,
	})
	if err != nil {
		return ScaleoutRun{}, fmt.Errorf("scaleout %d%% updates, %s, seed %d: %w", updatePct, scenario, seed, err)
	}
	run := ScaleoutRun{UpdatePct: updatePct, Scenario: scenario, Seed: seed, Servers: ids, Completed: res.Completed, Abandoned: res.Abandoned}
	for i := range int(duration / wire.Second) {
		n := 0
		if i < len(res.Queries) {
			n = res.Queries[i] + res.Updates[i]
		}
		run.PerSecond = append(run.PerSecond, n)
	}
	for k := range scaleoutPhases {
		ph := ScaleoutPhase{Phase: k, Start: wire.Time(k) * p.Phase, End: wire.Time(k+1) * p.Phase, Window: p.Window}
		ph.Throughput = res.Throughput(wire.Second, ph.End-p.Window, ph.End)
		if k > 0 {
			ph.Lowest = slices.Min(run.PerSecond[ph.Start/wire.Second : (ph.End-p.Window)/wire.Second])
		}
		configs := history.before(ph.End, chains)
		// A split's new volumes count once started: before, their keys
		// are still their parent's.
		ph.Volumes = len(configs)
		ph.Bound = ScaleoutBound(configs, p.Objects, updatePct)
		ph.Chains, ph.Heads, ph.Tails = make([]int, len(ids)), make([]int, len(ids)), make([]int, len(ids))
		ph.Servers = p.Servers
		if k > 0 {
			ph.Servers += p.Added
		}
		for _, c := range configs {
			for j, id := range c.Chain {
				i := slices.Index(ids, id)
				ph.Chains[i]++
				ph.Heads[i] += b2i(j == 0)
				ph.Tails[i] += b2i(j == len(c.Chain)-1)
			}
		}
		for _, at := range history.at {
			if at >= ph.Start && at < ph.End {
				ph.Changes++
				ph.Settled = at - ph.Start
			}
		}
		run.Phases = append(run.Phases, ph)
	}
	if err := run.check(p); err != nil {
		return run, err
	}
	return run, nil
}

// check reports a run that did not do what the experiment is about: the
// splits must have doubled the volumes, every chain must be whole at
// each phase's end, and the placement must have settled before each
// measured window.
func (r *ScaleoutRun) check(p ScaleoutParams) error {
	for _, ph := range r.Phases {
		want := p.Volumes
		if r.Scenario == ScaleoutSplit && ph.Phase >= 2 {
			want <<= ph.Phase - 1
		}
		replicas := 0
		for _, n := range ph.Chains {
			replicas += n
		}
		switch {
		case ph.Volumes != want:
			return fmt.Errorf("scaleout %d%% updates, %s, seed %d: %d volumes at the end of phase %s, want %d", r.UpdatePct, r.Scenario, r.Seed, ph.Volumes, scaleoutPhases[ph.Phase], want)
		case replicas != want*p.T:
			return fmt.Errorf("scaleout %d%% updates, %s, seed %d: %d replicas at the end of phase %s, want %d", r.UpdatePct, r.Scenario, r.Seed, replicas, scaleoutPhases[ph.Phase], want*p.T)
		case ph.Settled >= p.Phase-p.Window:
			return fmt.Errorf("scaleout %d%% updates, %s, seed %d: a configuration changed %.1f s into phase %s, inside the measured window", r.UpdatePct, r.Scenario, r.Seed, float64(ph.Settled)/float64(wire.Second), scaleoutPhases[ph.Phase])
		}
	}
	return nil
}

// RunScaleout runs every workload's two scenarios with Seeds seeds.
func RunScaleout(o Options) ([]ScaleoutRun, error) {
	return runScaleoutParams(o, scaleoutParams(o.Quick))
}

func runScaleoutParams(o Options, p ScaleoutParams) ([]ScaleoutRun, error) {
	var runs []ScaleoutRun
	for _, pct := range p.UpdatePcts {
		for _, s := range scaleoutScenarios {
			for k := range p.Seeds {
				// The scenarios of a workload share seeds: the same
				// clients' requests, until the split.
				runs = append(runs, ScaleoutRun{UpdatePct: pct, Scenario: s, Seed: o.Seed + uint64(k)})
			}
		}
	}
	err := parallel(o, "scaleout", len(runs), func(i int) error {
		r, err := runScaleout(p, runs[i].UpdatePct, runs[i].Scenario, runs[i].Seed)
		runs[i] = r
		return err
	})
	return runs, err
}

// ScaleoutRow is one line of the summary: a workload's phase in both
// scenarios, over the seeds.
type ScaleoutRow struct {
	UpdatePct, Phase int
	Servers          int
	Volumes          [2]int           // no split, split
	Throughput       [2]Summary       // over the seeds
	Min, Max         [2]float64       // over the seeds
	Bound            [2]float64       // mean over the seeds
	First            [2]ScaleoutPhase // the first seed's phase
}

// ScaleoutSummary summarises the runs, one row per workload and phase.
func ScaleoutSummary(runs []ScaleoutRun) []ScaleoutRow {
	var rows []ScaleoutRow
	var pcts []int
	for _, r := range runs {
		if !slices.Contains(pcts, r.UpdatePct) {
			pcts = append(pcts, r.UpdatePct)
		}
	}
	for _, pct := range pcts {
		for k := range scaleoutPhases {
			row := ScaleoutRow{UpdatePct: pct, Phase: k}
			for s, scenario := range scaleoutScenarios {
				var xs, bounds []float64
				first := true
				for _, r := range runs {
					if r.UpdatePct != pct || r.Scenario != scenario {
						continue
					}
					ph := r.Phases[k]
					xs, bounds = append(xs, ph.Throughput), append(bounds, ph.Bound)
					if first {
						row.First[s], row.Volumes[s], row.Servers = ph, ph.Volumes, ph.Servers
						row.Min[s], row.Max[s] = ph.Throughput, ph.Throughput
						first = false
					}
					row.Min[s], row.Max[s] = min(row.Min[s], ph.Throughput), max(row.Max[s], ph.Throughput)
				}
				row.Throughput[s], row.Bound[s] = Summarize(xs), Summarize(bounds).Mean
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// counts formats per-server counts: "3/3/3/0/0/0".
func counts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, "/")
}

// WriteScaleoutTable writes the summary as the Markdown tables of
// docs/experiments.md: throughput per phase, then where the chains were
// at each phase's end (the first seed's runs).
func WriteScaleoutTable(w io.Writer, runs []ScaleoutRun) error {
	rows := ScaleoutSummary(runs)
	if len(rows) == 0 {
		return fmt.Errorf("no runs")
	}
	seeds := rows[0].Throughput[0].N
	fmt.Fprintf(w, "| updates | phase | servers | volumes (no split / split) | no split (req/s) | split (req/s) | split / no split | bound, no split | bound, split |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d%% | %s | %d | %d / %d | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | %.2f | %.1f | %.1f |\n",
			r.UpdatePct, scaleoutPhases[r.Phase], r.Servers, r.Volumes[0], r.Volumes[1],
			r.Throughput[0].Mean, r.Min[0], r.Max[0], r.Throughput[1].Mean, r.Min[1], r.Max[1],
			r.Throughput[1].Mean/r.Throughput[0].Mean, r.Bound[0], r.Bound[1])
	}
	fmt.Fprintf(w, "\nThroughput: mean (min–max) over %d seeds, in each phase's last %g s; bound: what the placement at the phase's end allows (ScaleoutBound), mean over the seeds.\n\n",
		seeds, float64(rows[0].First[0].Window)/float64(wire.Second))
	fmt.Fprintf(w, "| updates | phase | scenario | chains per server | heads per server | tails per server | changes in the phase | last change after | lowest second before the window |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		for s, scenario := range scaleoutScenarios {
			ph := r.First[s]
			lowest := "–"
			if r.Phase > 0 {
				lowest = fmt.Sprint(ph.Lowest)
			}
			fmt.Fprintf(w, "| %d%% | %s | %s | %s | %s | %s | %d | %.2f s | %s |\n", r.UpdatePct, scaleoutPhases[r.Phase], scenario,
				counts(ph.Chains), counts(ph.Heads), counts(ph.Tails), ph.Changes, float64(ph.Settled)/float64(wire.Second), lowest)
		}
	}
	fmt.Fprintf(w, "\nServers s1/s2/.../s%d in order, s%d.. the ones added; the first seed's runs.\n", len(rows[0].First[0].Chains), len(rows[0].First[0].Chains)-2)
	return nil
}

// WriteScaleoutCSV writes one row per run and phase with the header
// update_pct,scenario,seed,phase,start_s,end_s,servers,volumes,throughput,bound,chains,heads,tails,changes,settled_s,lowest_1s.
func WriteScaleoutCSV(w io.Writer, runs []ScaleoutRun) error {
	if _, err := fmt.Fprintln(w, "update_pct,scenario,seed,phase,start_s,end_s,servers,volumes,throughput,bound,chains,heads,tails,changes,settled_s,lowest_1s"); err != nil {
		return err
	}
	for _, r := range runs {
		for _, ph := range r.Phases {
			lowest := ""
			if ph.Phase > 0 {
				lowest = fmt.Sprint(ph.Lowest)
			}
			if _, err := fmt.Fprintf(w, "%d,%s,%d,%s,%g,%g,%d,%d,%.2f,%.2f,%s,%s,%s,%d,%.2f,%s\n", r.UpdatePct, r.Scenario, r.Seed,
				scaleoutPhases[ph.Phase][:1], float64(ph.Start)/float64(wire.Second), float64(ph.End)/float64(wire.Second),
				ph.Servers, ph.Volumes, ph.Throughput, ph.Bound, counts(ph.Chains), counts(ph.Heads), counts(ph.Tails),
				ph.Changes, float64(ph.Settled)/float64(wire.Second), lowest); err != nil {
				return err
			}
		}
	}
	return nil
}

// PlotScaleout draws, per workload, the first seed's throughput per
// second in both scenarios, with each phase's placement bound as a step.
func PlotScaleout(path string, runs []ScaleoutRun) error {
	var panels []panel
	var pcts []int
	for _, r := range runs {
		if !slices.Contains(pcts, r.UpdatePct) {
			pcts = append(pcts, r.UpdatePct)
		}
	}
	letters := "abcd"
	for i, pct := range pcts {
		pn := panel{YLabel: "requests completed per second", LegendBottomLeft: true}
		top := 0.0
		var series [4]series
		var phase wire.Time
		for s, scenario := range scaleoutScenarios {
			k := slices.IndexFunc(runs, func(r ScaleoutRun) bool { return r.UpdatePct == pct && r.Scenario == scenario })
			r := runs[k]
			series[s].Name = scenario
			for t, n := range r.PerSecond {
				series[s].XYs = append(series[s].XYs, plotter.XY{X: float64(t) + 0.5, Y: float64(n)})
				top = max(top, float64(n))
			}
			series[2+s].Name = scenario + ": placement bound"
			for _, ph := range r.Phases {
				phase = ph.End - ph.Start
				series[2+s].XYs = append(series[2+s].XYs, plotter.XY{X: float64(ph.Start) / float64(wire.Second), Y: ph.Bound},
					plotter.XY{X: float64(ph.End) / float64(wire.Second), Y: ph.Bound})
			}
		}
		sec := float64(phase) / float64(wire.Second)
		pn.Title = fmt.Sprintf("(%c) %d%% updates, seed %d", letters[i%len(letters)], pct, runs[0].Seed)
		pn.XLabel = fmt.Sprintf("time (s): 3 servers join at %g s; the split run splits at %g s and %g s", sec, 2*sec, 3*sec)
		pn.Series = series[:]
		pn.YMin, pn.YMax = 0, 1.15*top
		panels = append(panels, pn)
	}
	return plotPanels(path, panels)
}

func runScaleoutExperiment(o Options) error {
	runs, err := RunScaleout(o)
	if err != nil {
		return err
	}
	if err := WriteScaleoutTable(o.Progress, runs); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, "scaleout.csv"), func(w io.Writer) error { return WriteScaleoutCSV(w, runs) }); err != nil {
		return err
	}
	return PlotScaleout(filepath.Join(o.Out, "scaleout.png"), runs)
}
