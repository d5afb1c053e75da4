package experiment

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// Fig6Params describe CR §5.3's experiment (Table 1 and the load).
type Fig6Params struct {
	Servers, Volumes, T int
	// VolumeBytes is one volume's data: the data per server divided by the
	// volumes each server holds.
	VolumeBytes       int64
	RecoveryBandwidth int64 // bytes per second into and out of each server
	Duration          wire.Time
	FailAt            wire.Time
	RebootAfter       wire.Time
	// The load: QueryClients query-only clients and UpdateClients
	// update-only ones, each choosing uniformly among Objects objects.
	QueryClients, UpdateClients int
	Objects                     int
	Watchdog                    wire.Time
	Latency, RequestDelay       wire.Time
	// The master and servers.
	FailureTimeout, HeartbeatInterval, LeaseDuration wire.Time
	TickInterval, ClientTickInterval                 wire.Time
	RecoveryPerServerMax                             int
	// Rows of the CSV are Row wide; the Rows that overlap the stretch from
	// FineFrom before the failure to FineTo after it are split into rows
	// Fine wide.
	Row, Fine, FineFrom, FineTo wire.Time
	// Warmup is excluded from the pre-failure baseline.
	Warmup wire.Time
}

// fig6Params returns Table 1's parameters, or for quick a scaled-down
// version that runs in seconds.
func fig6Params(quick bool) Fig6Params {
	p := Fig6Params{
		Servers: 24, Volumes: 5000, T: 3,
		// 150 GB per server over 5000·3/24 = 625 volumes: 240 MB, 38.4 s
		// at 6.25 MB/s.
		VolumeBytes: 150e9 / (5000 * 3 / 24), RecoveryBandwidth: 6.25e6,
		Duration: 2 * 3600 * wire.Second, FailAt: 30 * 60 * wire.Second, RebootAfter: 10 * 60 * wire.Second,
		QueryClients: 10, UpdateClients: 1, Objects: 100_000, Watchdog: 3 * wire.Second,
		Latency: wire.Millisecond, RequestDelay: wire.Millisecond,
		FailureTimeout: 10 * wire.Second, HeartbeatInterval: wire.Second, LeaseDuration: 5 * wire.Second,
		TickInterval: wire.Second, ClientTickInterval: 10 * wire.Millisecond, RecoveryPerServerMax: 2,
		Row: 60 * wire.Second, Fine: wire.Second, FineFrom: wire.Second, FineTo: 90 * wire.Second,
		Warmup: 60 * wire.Second,
	}
	if quick {
		// 12 servers, 300 volumes (75 per server), 9.6 s per volume, 8
		// minutes with the failure at 2:00 and the reboot at 3:00; the
		// failure detector, watchdog and load are the same.
		p.Servers, p.Volumes = 12, 300
		p.VolumeBytes = 60e6
		p.Duration, p.FailAt, p.RebootAfter = 8*60*wire.Second, 2*60*wire.Second, 60*wire.Second
		p.Objects = 10_000
		p.Row, p.Fine, p.FineFrom, p.FineTo = 10*wire.Second, wire.Second, 10*wire.Second, 30*wire.Second
		p.Warmup = 10 * wire.Second
	}
	return p
}

// Fig6Change is the cluster's state after a configuration change.
type Fig6Change struct {
	At wire.Time
	// Short counts chains with fewer than T members (a member moved to
	// the tail to even out roles still counts); Volumes, Heads and Tails
	// count the chains the failed servers are members, heads and tails
	// of.
	Short, Volumes, Heads, Tails int
	// Transfers counts chains that are being extended (a state transfer
	// to a joining server is under way or queued).
	Transfers int
}

// Fig6Run is one scenario's measurements.
type Fig6Run struct {
	Scenario string
	Failed   []wire.NodeID
	Params   Fig6Params
	Bucket   wire.Time
	// Queries and Updates count completed requests per Bucket.
	Queries, Updates []int
	Changes          []Fig6Change
	// Removed is when the master had removed the failed servers from every
	// chain; Repaired when every chain had T members again (0: never).
	Removed, Repaired wire.Time
	// Joins are when a rebooted server became a member (the tail) of a
	// chain.
	Joins []wire.Time
	// Final is the configuration at the end.
	Final     []wire.Config
	Completed int
	Abandoned int
	Events    uint64
	Wall      time.Duration
}

// Fig6Scenarios are the two scenarios: (a) one failure, (b) two.
var Fig6Scenarios = []string{"one-failure", "two-failures"}

// RunFig6 runs both scenarios in parallel. They share the placement, the
// seed and so the load until the failure.
func RunFig6(o Options) ([]*Fig6Run, error) {
	p := fig6Params(o.Quick)
	servers := make([]wire.NodeID, p.Servers)
	for i := range servers {
		servers[i] = wire.NodeID(fmt.Sprintf("s%d", i+1))
	}
	rng := rand.New(rand.NewPCG(o.Seed, 6))
	chains, err := placement.Initial(placement.Random, servers, p.Volumes, p.T, rng)
	if err != nil {
		return nil, err
	}
	order := slices.Clone(servers)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	runs := make([]*Fig6Run, len(Fig6Scenarios))
	for i, name := range Fig6Scenarios {
		runs[i] = &Fig6Run{Scenario: name, Failed: slices.Clone(order[:i+1]), Params: p, Bucket: wire.Second}
	}
	var mu sync.Mutex
	last := time.Now()
	err = parallel(o, "fig6", len(runs), func(i int) error {
		return runFig6Scenario(o.Seed, chains, runs[i], func(now wire.Time) {
			mu.Lock()
			defer mu.Unlock()
			if time.Since(last) >= o.ProgressEvery {
				last = time.Now()
				fmt.Fprintf(o.Progress, "fig6: %s at %s of %s simulated\n", runs[i].Scenario, clock(now), clock(p.Duration))
			}
		})
	})
	return runs, err
}

// clock formats a simulated time as h:mm:ss.
func clock(t wire.Time) string {
	s := int(t / wire.Second)
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}

func runFig6Scenario(seed uint64, chains map[wire.VolumeID][]wire.NodeID, r *Fig6Run, progress func(wire.Time)) error {
	p := r.Params
	start := time.Now()
	failed := map[wire.NodeID]bool{}
	var failures []sim.ServerFailure
	for _, id := range r.Failed {
		failed[id] = true
		failures = append(failures, sim.ServerFailure{At: p.FailAt, Server: id, RebootAfter: p.RebootAfter})
	}
	current := map[wire.VolumeID]wire.Config{}
	for v, c := range chains {
		current[v] = wire.Config{Volume: v, Epoch: 1, Chain: c}
	}
	// moving[v]: volume v's joining server was a member before it joined
	// (a role move, master.CmdMoveToTail): it holds the volume throughout.
	moving := map[wire.VolumeID]bool{}
	holds := func(c wire.Config, moving bool, id wire.NodeID) bool {
		return c.Index(id) >= 0 || moving && c.Joining == id
	}
	isShort := func(c wire.Config, moving bool) bool { return len(c.Chain)+b2i(moving) < p.T }
	short, wasShort := 0, false
	initial := Fig6Change{}
	for _, c := range current {
		for id := range failed {
			initial.Volumes += b2i(c.Index(id) >= 0)
			initial.Heads += b2i(c.Head() == id)
			initial.Tails += b2i(c.Tail() == id)
		}
	}
	r.Changes = []Fig6Change{initial}
	onConfig := func(now wire.Time, c wire.Config) {
		prev := current[c.Volume]
		current[c.Volume] = c
		moved := moving[c.Volume] // a role move this change may end
		mv := c.Joining != "" && (prev.Index(c.Joining) >= 0 || moved && prev.Joining == c.Joining)
		moving[c.Volume] = mv
		short += b2i(isShort(c, mv)) - b2i(isShort(prev, moved))
		for id := range failed {
			was, is := holds(prev, moved, id), holds(c, mv, id)
			if was && !is && now < p.FailAt+p.RebootAfter {
				r.Removed = max(r.Removed, now)
			}
			if prev.Index(id) < 0 && c.Index(id) >= 0 && !(moved && prev.Joining == id) && now >= p.FailAt+p.RebootAfter {
				r.Joins = append(r.Joins, now)
			}
		}
		if short > 0 && now >= p.FailAt {
			wasShort = true
		} else if short == 0 && wasShort && r.Repaired == 0 {
			r.Repaired = now
		}
		ch := r.Changes[len(r.Changes)-1]
		ch.At, ch.Short = now, short
		ch.Transfers += b2i(c.Joining != "") - b2i(prev.Joining != "")
		for id := range failed {
			ch.Volumes += b2i(holds(c, mv, id)) - b2i(holds(prev, moved, id))
			ch.Heads += b2i(c.Head() == id) - b2i(prev.Head() == id)
			ch.Tails += b2i(c.Tail() == id) - b2i(prev.Tail() == id)
		}
		if n := len(r.Changes); n > 0 && r.Changes[n-1].At == now {
			r.Changes[n-1] = ch
		} else {
			r.Changes = append(r.Changes, ch)
		}
	}
	clients := p.QueryClients + p.UpdateClients
	res, err := sim.RunLoad(sim.LoadOptions{
		Seed: seed, Protocol: sim.ProtocolChain, Chains: chains, Objects: p.Objects,
		Clients: clients, UpdateFraction: func(i int) float64 {
			if i >= p.QueryClients {
				return 1
			}
			return 0
		},
		Duration: p.Duration, Bucket: r.Bucket, Watchdog: p.Watchdog,
		RequestDelay: p.RequestDelay, Latency: p.Latency, Costs: Fig4Costs,
		VolumeBytes: p.VolumeBytes, RecoveryBandwidth: p.RecoveryBandwidth, Failures: failures,
		Placement: placement.Random, HeartbeatInterval: p.HeartbeatInterval, LeaseDuration: p.LeaseDuration,
		FailureTimeout: p.FailureTimeout, TickInterval: p.TickInterval, ClientTickInterval: p.ClientTickInterval, RecoveryPerServerMax: p.RecoveryPerServerMax,
		OnConfig: onConfig, Progress: progress, ProgressEvery: 10 * wire.Second,
	})
	if err != nil {
		return err
	}
	r.Queries, r.Updates = res.Queries, res.Updates
	for len(r.Queries) < int(p.Duration/r.Bucket) {
		r.Queries = append(r.Queries, 0)
		r.Updates = append(r.Updates, 0)
	}
	r.Final = res.Configs
	r.Completed, r.Abandoned, r.Events = res.Completed, res.Abandoned, res.Events
	r.Wall = time.Since(start)
	return nil
}

// Rate returns the completed queries and updates per second in [from, to).
func (r *Fig6Run) Rate(from, to wire.Time) (queries, updates float64) {
	q, u := 0, 0
	for i := int(from / r.Bucket); i < int(to/r.Bucket) && i < len(r.Queries); i++ {
		q += r.Queries[i]
		u += r.Updates[i]
	}
	secs := float64(to-from) / float64(wire.Second)
	return float64(q) / secs, float64(u) / secs
}

// StateAt returns the state after the last change at or before t.
func (r *Fig6Run) StateAt(t wire.Time) Fig6Change {
	st := Fig6Change{}
	for _, c := range r.Changes {
		if c.At > t {
			break
		}
		st = c
	}
	return st
}

// Fig6Row is one row of the CSV: throughput over [Start, Start+Width).
type Fig6Row struct {
	Scenario         string
	Start, Width     wire.Time
	Queries, Updates float64
	State            Fig6Change
}

// Rows returns the run's rows: Row wide, Fine wide around the failure.
func (r *Fig6Run) Rows() []Fig6Row {
	p := r.Params
	var rows []Fig6Row
	for start := wire.Time(0); start < p.Duration; start += p.Row {
		end := min(start+p.Row, p.Duration)
		w := end - start
		if start < p.FailAt+p.FineTo && end > p.FailAt-p.FineFrom {
			w = p.Fine // the whole Row, Fine wide
		}
		for t := start; t < end; t += w {
			q, u := r.Rate(t, t+w)
			rows = append(rows, Fig6Row{Scenario: r.Scenario, Start: t, Width: w, Queries: q, Updates: u, State: r.StateAt(t + w - 1)})
		}
	}
	return rows
}

// Fig6Summary is what the write-up reports of a run.
type Fig6Summary struct {
	Scenario string
	Failed   []wire.NodeID
	// Pre-failure rates (requests/s), from Warmup to the failure.
	PreQueries, PreUpdates float64
	// OutageQueries and OutageUpdates are the rates from the failure until
	// the master removed the failed servers.
	OutageQueries, OutageUpdates float64
	// Removed is how long after the failure the master had removed the
	// failed servers; QueriesBack how long until a second's query rate
	// first reached 90% of the pre-failure rate.
	Removed, QueriesBack wire.Time
	// From the removal (and the watchdog after it) until the reboot.
	DegradedQueries, DegradedUpdates float64
	// From the reboot until every chain is whole again.
	RecoveryQueries, RecoveryUpdates float64
	// Repaired is how long after the failure every chain had T members
	// again (0: never).
	Repaired wire.Time
	// Joins onto the rebooted servers: during the repair, in all; the first
	// and last.
	JoinsRepair, Joins   int
	FirstJoin, LastJoin  wire.Time
	FinalQueries         float64 // the last 30 minutes (quick: the last quarter)
	FinalUpdates         float64
	MaxShort             int
	RebootedVolumes      int // chains the rebooted servers are members of at the end
	RebootedHeads        int // ... heads of
	RebootedTails        int // ... and tails of
	OtherVolumes         float64
	OtherHeads           float64 // per other server, mean
	OtherTails           float64 // per other server, mean
	MinChain, MaxChain   int
	Completed, Abandoned int
	Events               uint64
	Wall                 time.Duration
}

// Summary computes the run's summary.
func (r *Fig6Run) Summary() Fig6Summary {
	p := r.Params
	s := Fig6Summary{Scenario: r.Scenario, Failed: r.Failed, Completed: r.Completed, Abandoned: r.Abandoned, Events: r.Events, Wall: r.Wall}
	s.PreQueries, s.PreUpdates = r.Rate(p.Warmup, p.FailAt)
	s.Removed = r.Removed - p.FailAt
	removed := max(r.Removed, p.FailAt+wire.Second)
	s.OutageQueries, s.OutageUpdates = r.Rate(p.FailAt, removed/wire.Second*wire.Second)
	for t := p.FailAt; t < p.Duration; t += r.Bucket {
		if q, _ := r.Rate(t, t+r.Bucket); q >= 0.9*s.PreQueries {
			s.QueriesBack = t + r.Bucket - p.FailAt
			break
		}
	}
	reboot := p.FailAt + p.RebootAfter
	// Clients stuck on a failed server wait out their watchdog after the
	// removal; the degraded stretch starts when they have.
	s.DegradedQueries, s.DegradedUpdates = r.Rate((removed+p.Watchdog)/wire.Second*wire.Second+wire.Second, reboot)
	if r.Repaired > 0 {
		s.Repaired = r.Repaired - p.FailAt
		s.RecoveryQueries, s.RecoveryUpdates = r.Rate(reboot, r.Repaired/wire.Second*wire.Second)
	}
	for _, j := range r.Joins {
		if r.Repaired == 0 || j <= r.Repaired {
			s.JoinsRepair++
		}
	}
	s.Joins = len(r.Joins)
	if len(r.Joins) > 0 {
		s.FirstJoin, s.LastJoin = r.Joins[0]-p.FailAt, r.Joins[len(r.Joins)-1]-p.FailAt
	}
	tail := min(p.Duration/4, 30*60*wire.Second)
	s.FinalQueries, s.FinalUpdates = r.Rate(p.Duration-tail, p.Duration)
	for _, c := range r.Changes {
		s.MaxShort = max(s.MaxShort, c.Short)
	}
	volumes, heads, tails := map[wire.NodeID]int{}, map[wire.NodeID]int{}, map[wire.NodeID]int{}
	s.MinChain = p.Servers
	for _, c := range r.Final {
		for _, id := range c.Chain {
			volumes[id]++
		}
		heads[c.Head()]++
		tails[c.Tail()]++
		s.MinChain = min(s.MinChain, len(c.Chain))
		s.MaxChain = max(s.MaxChain, len(c.Chain))
	}
	others := 0
	for i := range p.Servers {
		id := wire.NodeID(fmt.Sprintf("s%d", i+1))
		if slices.Contains(r.Failed, id) {
			s.RebootedVolumes += volumes[id]
			s.RebootedHeads += heads[id]
			s.RebootedTails += tails[id]
			continue
		}
		others++
		s.OtherVolumes += float64(volumes[id])
		s.OtherHeads += float64(heads[id])
		s.OtherTails += float64(tails[id])
	}
	s.OtherVolumes /= float64(others)
	s.OtherHeads /= float64(others)
	s.OtherTails /= float64(others)
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// String formats the summary for the progress output and the write-up.
func (s Fig6Summary) String() string {
	sec := func(t wire.Time) string { return fmt.Sprintf("%.1fs", float64(t)/float64(wire.Second)) }
	return fmt.Sprintf("%s (failed %v): before: %.1f queries/s, %.2f updates/s; failure→removal %s: %.1f q/s, %.2f u/s; "+
		"queries back to 90%% after %s; removal+watchdog→reboot: %.1f q/s, %.2f u/s; reboot→repair: %.1f q/s, %.2f u/s; "+
		"all chains whole %s after the failure (at most %d short); %d joins onto the rebooted server(s), %d during the repair, first %s, last %s after the failure; "+
		"end: rebooted in %d chains, head of %d, tail of %d (other servers: %.1f chains, %.1f heads, %.1f tails each); chain lengths %d..%d; "+
		"last stretch %.1f q/s, %.2f u/s; %d completed, %d abandoned, %d events, %s wall",
		s.Scenario, s.Failed, s.PreQueries, s.PreUpdates, sec(s.Removed), s.OutageQueries, s.OutageUpdates,
		sec(s.QueriesBack), s.DegradedQueries, s.DegradedUpdates, s.RecoveryQueries, s.RecoveryUpdates,
		sec(s.Repaired), s.MaxShort, s.Joins, s.JoinsRepair, sec(s.FirstJoin), sec(s.LastJoin),
		s.RebootedVolumes, s.RebootedHeads, s.RebootedTails, s.OtherVolumes, s.OtherHeads, s.OtherTails, s.MinChain, s.MaxChain,
		s.FinalQueries, s.FinalUpdates, s.Completed, s.Abandoned, s.Events, s.Wall.Round(time.Second))
}

// WriteFig6CSV writes the runs' rows with the header
// scenario,minute,query_throughput,update_throughput,bucket_s,short_chains,rebooted_volumes,rebooted_heads,rebooted_tails,transfers.
func WriteFig6CSV(w io.Writer, runs []*Fig6Run) error {
	if _, err := fmt.Fprintln(w, "scenario,minute,query_throughput,update_throughput,bucket_s,short_chains,rebooted_volumes,rebooted_heads,rebooted_tails,transfers"); err != nil {
		return err
	}
	for _, r := range runs {
		for _, row := range r.Rows() {
			minute := math.Round(float64(row.Start)/float64(60*wire.Second)*1e4) / 1e4
			if _, err := fmt.Fprintf(w, "%s,%s,%.2f,%.2f,%g,%d,%d,%d,%d,%d\n", row.Scenario,
				strconv.FormatFloat(minute, 'f', -1, 64), row.Queries, row.Updates, float64(row.Width)/float64(wire.Second),
				row.State.Short, row.State.Volumes, row.State.Heads, row.State.Tails, row.State.Transfers); err != nil {
				return err
			}
		}
	}
	return nil
}

// PlotFig6 draws query and update throughput against time, one column
// per scenario: each at full scale as in the CSV, then averaged per Row
// and zoomed in on the steady level (the outage falls off that scale).
func PlotFig6(path string, runs []*Fig6Run) error {
	letters := "ab"
	titles := map[string]string{"one-failure": "one failure", "two-failures": "two failures"}
	// Full scale: the CSV's rows. Zoomed: Row-wide averages throughout,
	// scaled to the steady levels, leaving out the warm-up and the outage.
	rowsOf := make([][]Fig6Row, len(runs))
	evenOf := make([][]Fig6Row, len(runs))
	var hi, zoomHi [2]float64
	zoomLo := [2]float64{math.Inf(1), math.Inf(1)}
	for i, r := range runs {
		p := r.Params
		rowsOf[i] = r.Rows()
		for _, row := range rowsOf[i] {
			hi[0], hi[1] = max(hi[0], row.Queries), max(hi[1], row.Updates)
		}
		outageEnd := p.FailAt + p.FailureTimeout + p.Watchdog + 2*wire.Second
		for t := wire.Time(0); t+p.Row <= p.Duration; t += p.Row {
			q, u := r.Rate(t, t+p.Row)
			evenOf[i] = append(evenOf[i], Fig6Row{Start: t, Width: p.Row, Queries: q, Updates: u})
			if t >= p.Warmup && (t+p.Row <= p.FailAt || t >= outageEnd) {
				zoomHi[0], zoomHi[1] = max(zoomHi[0], q), max(zoomHi[1], u)
				zoomLo[0], zoomLo[1] = min(zoomLo[0], q), min(zoomLo[1], u)
			}
		}
	}
	type kind struct {
		quantity int // 0 queries, 1 updates
		zoom     bool
	}
	kinds := []kind{{0, false}, {0, true}, {1, false}, {1, true}}
	grid := make([][]*plot.Plot, len(kinds))
	for k, kd := range kinds {
		grid[k] = make([]*plot.Plot, len(runs))
		for i, r := range runs {
			p := plot.New()
			what := []string{"query", "update"}[kd.quantity]
			p.Title.Text = fmt.Sprintf("(%c) %s: %s throughput", letters[i%2], titles[r.Scenario], what)
			if kd.zoom {
				p.Title.Text += fmt.Sprintf(" per %gs, zoomed", float64(r.Params.Row)/float64(wire.Second))
			}
			p.X.Label.Text = "time (minutes); dashed: failure, reboot, all chains whole"
			p.Y.Label.Text = []string{"queries/s", "updates/s"}[kd.quantity]
			yMin, yMax := 0.0, hi[kd.quantity]*1.1
			rows := rowsOf[i]
			if kd.zoom {
				yMin, yMax = zoomLo[kd.quantity]*0.98, zoomHi[kd.quantity]*1.01
				rows = evenOf[i]
			}
			minutes := float64(r.Params.Duration) / float64(60*wire.Second)
			step := 30.0
			if minutes < 60 {
				step = 1
			}
			var ticks []plot.Tick
			for x := 0.0; x <= minutes; x += step {
				ticks = append(ticks, plot.Tick{Value: x, Label: fmt.Sprintf("%g", x)})
			}
			p.X.Tick.Marker = plot.ConstantTicks(ticks)
			p.Add(plotter.NewGrid())
			var xys plotter.XYs
			for _, row := range rows {
				y := row.Queries
				if kd.quantity == 1 {
					y = row.Updates
				}
				mid := float64(row.Start+row.Width/2) / float64(60*wire.Second)
				xys = append(xys, plotter.XY{X: mid, Y: y})
			}
			line, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			line.Color = seriesColors[kd.quantity]
			line.Width = vg.Points(1.2)
			marks := []wire.Time{r.Params.FailAt, r.Params.FailAt + r.Params.RebootAfter}
			if r.Repaired > 0 {
				marks = append(marks, r.Repaired)
			}
			for _, at := range marks {
				x := float64(at) / float64(60*wire.Second)
				mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: yMin}, {X: x, Y: yMax}})
				if err != nil {
					return err
				}
				mark.Color = color.Gray{Y: 0x90}
				mark.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
				p.Add(mark)
			}
			p.Add(line)
			// After Add, which widens the axes to the data.
			p.X.Min, p.X.Max = 0, minutes
			p.Y.Min, p.Y.Max = yMin, yMax
			grid[k][i] = p
		}
	}
	const panelWidth, height = 6 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.New(panelWidth*vg.Length(len(runs)), height*vg.Length(len(kinds)))
	tiles := draw.Tiles{Rows: len(kinds), Cols: len(runs), PadX: vg.Points(8), PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(grid, tiles, draw.New(img))
	for k := range grid {
		for i := range grid[k] {
			grid[k][i].Draw(canvases[k][i])
		}
	}
	return savePNG(path, img)
}

func runFig6(o Options) error {
	runs, err := RunFig6(o)
	if err != nil {
		return err
	}
	for _, r := range runs {
		fmt.Fprintf(o.Progress, "fig6: %s\n", r.Summary())
	}
	if err := writeFile(filepath.Join(o.Out, "fig6.csv"), func(w io.Writer) error { return WriteFig6CSV(w, runs) }); err != nil {
		return err
	}
	return PlotFig6(filepath.Join(o.Out, "fig6.png"), runs)
}
