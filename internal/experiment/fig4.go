package experiment

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// Fig4Costs are CR §5.1's service times: a query takes 5 ms at a server,
// an update 50 ms at the head (or primary), and applying the update's
// object difference 20 ms at every other replica. Messages take 1 ms.
var Fig4Costs = sim.Costs{Query: 5 * wire.Millisecond, Update: 50 * wire.Millisecond, Forward: 20 * wire.Millisecond}

// Fig4Point is one measured throughput.
type Fig4Point struct {
	Replicas   int
	UpdatePct  int
	Variant    sim.Protocol
	Throughput float64 // requests per second
}

// fig4Grid returns CR §5.1's chain lengths and update percentages.
func fig4Grid(quick bool) (replicas, pcts []int) {
	replicas = []int{2, 3, 10}
	step := 5
	if quick {
		replicas, step = []int{2, 10}, 20
	}
	for p := 0; p <= 100; p += step {
		pcts = append(pcts, p)
	}
	return replicas, pcts
}

// fig4Measure is how long each point runs and the warm-up excluded.
const (
	fig4Warmup   = 2 * wire.Second
	fig4Duration = 62 * wire.Second
)

// RunFig4 measures throughput for every chain length, update percentage
// and variant: one chain, 25 closed-loop clients, 1000 objects.
func RunFig4(o Options) ([]Fig4Point, error) {
	replicas, pcts := fig4Grid(o.Quick)
	var points []Fig4Point
	for _, t := range replicas {
		for _, pct := range pcts {
			for _, v := range sim.Protocols {
				points = append(points, Fig4Point{Replicas: t, UpdatePct: pct, Variant: v})
			}
		}
	}
	duration := fig4Duration
	err := parallel(o, "fig4", len(points), func(i int) error {
		p := &points[i]
		chain := make([]wire.NodeID, p.Replicas)
		for j := range chain {
			chain[j] = wire.NodeID(fmt.Sprintf("s%d", j+1))
		}
		pct := p.UpdatePct
		res, err := sim.RunLoad(sim.LoadOptions{
			// Every variant of a (t, percentage) point sees the same
			// clients' requests: the comparison is not blurred by chance.
			Seed: o.Seed + uint64(1000*p.Replicas+pct), Protocol: p.Variant, Chains: map[wire.VolumeID][]wire.NodeID{0: chain},
			Objects: 1000, Clients: 25, UpdateFraction: func(int) float64 { return float64(pct) / 100 },
			Duration: duration, Bucket: wire.Second, Latency: wire.Millisecond, Costs: Fig4Costs,
		})
		if err != nil {
			return err
		}
		p.Throughput = res.Throughput(wire.Second, fig4Warmup, duration)
		return nil
	})
	return points, err
}

// parallel runs n jobs on o.Workers goroutines, printing a progress line
// at least every o.ProgressEvery. Jobs must be independent and
// deterministic, so the result does not depend on the number of workers.
func parallel(o Options, name string, n int, job func(i int) error) error {
	var mu sync.Mutex
	done, next := 0, 0
	var firstErr error
	start, last := time.Now(), time.Now()
	var wg sync.WaitGroup
	for range max(1, o.Workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= n || firstErr != nil {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				err := job(i)
				mu.Lock()
				done++
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if time.Since(last) >= o.ProgressEvery || done == n {
					last = time.Now()
					fmt.Fprintf(o.Progress, "%s: %d/%d runs, %s\n", name, done, n, time.Since(start).Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// WriteFig4CSV writes the points with the header t,update_pct,variant,throughput.
func WriteFig4CSV(w io.Writer, points []Fig4Point) error {
	if _, err := fmt.Fprintln(w, "t,update_pct,variant,throughput"); err != nil {
		return err
	}
	for _, p := range points {
		if _, err := fmt.Fprintf(w, "%d,%d,%s,%.2f\n", p.Replicas, p.UpdatePct, p.Variant, p.Throughput); err != nil {
			return err
		}
	}
	return nil
}

// PlotFig4 draws throughput against the update percentage, one panel per
// chain length, one line per variant.
func PlotFig4(path string, points []Fig4Point) error {
	var panels []panel
	yMax := 0.0
	for _, p := range points {
		yMax = max(yMax, p.Throughput)
	}
	var ts []int
	for _, p := range points {
		if !slices.Contains(ts, p.Replicas) {
			ts = append(ts, p.Replicas)
		}
	}
	letters := "abc"
	for i, t := range ts {
		pn := panel{Title: fmt.Sprintf("(%c) t = %d", letters[i%3], t), XLabel: "percentage updates", YLabel: "requests/s (log)",
			LogY: true, LegendBottomLeft: true, YMin: 1, YMax: math.Pow(10, math.Ceil(math.Log10(yMax)))}
		for _, v := range sim.Protocols {
			s := series{Name: string(v)}
			for _, p := range points {
				if p.Replicas == t && p.Variant == v {
					s.XYs = append(s.XYs, plotter.XY{X: float64(p.UpdatePct), Y: p.Throughput})
				}
			}
			pn.Series = append(pn.Series, s)
		}
		panels = append(panels, pn)
	}
	return plotPanels(path, panels)
}

func runFig4(o Options) error {
	points, err := RunFig4(o)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, "fig4.csv"), func(w io.Writer) error { return WriteFig4CSV(w, points) }); err != nil {
		return err
	}
	return PlotFig4(filepath.Join(o.Out, "fig4.png"), points)
}
