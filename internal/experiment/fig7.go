package experiment

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/internal/placement"
)

// The grids of Figure 7. The paper does not list its server counts; ours
// stop at 200.
var (
	fig7Servers      = []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 125, 150, 175, 200}
	fig7Replicas     = []int{1, 2, 3, 4}
	fig7Replications = 50

	fig7QuickServers      = []int{20, 100}
	fig7QuickReplications = 20
)

// fig7Horizon ends a replication that has seen no unavailability. It is far
// above every MTBU of the grid, so no sample is censored in practice; the
// CSV counts any that are.
const fig7Horizon = 1_000_000 * time.Hour

// Fig7Config configures RunFig7. Servers, Replicas, Strategies and
// Replications override the grid (tests use small ones).
type Fig7Config struct {
	Seed          uint64
	Quick         bool
	Workers       int
	Progress      io.Writer
	ProgressEvery time.Duration

	Servers      []int
	Replicas     []int
	Strategies   []placement.Strategy
	Replications int
	// RecoveryPerServerMax is the master's budget of transfers per server;
	// 0 means its default (placement.RecoveryPerServerDefault).
	RecoveryPerServerMax int
	// Model, if set, adjusts each point's model (tests use it).
	Model func(*Model)
}

func (c Fig7Config) grid() (strategies []placement.Strategy, servers, replicas []int, replications int) {
	strategies, servers, replicas, replications = fig7Strategies, fig7Servers, fig7Replicas, fig7Replications
	if c.Quick {
		servers, replications = fig7QuickServers, fig7QuickReplications
	}
	if c.Strategies != nil {
		strategies = c.Strategies
	}
	if c.Servers != nil {
		servers = c.Servers
	}
	if c.Replicas != nil {
		replicas = c.Replicas
	}
	if c.Replications > 0 {
		replications = c.Replications
	}
	return
}

func (c Fig7Config) title() string {
	_, _, _, r := c.grid()
	q := ""
	if c.Quick {
		q = ", --quick"
	}
	budget := c.RecoveryPerServerMax
	if budget == 0 {
		budget = placement.RecoveryPerServerDefault
	}
	return fmt.Sprintf("CR Fig. 7 (Catena's placement policy, seed %d%s): MTBU, %d replications per point, %.0f%% CI, %d transfers per server", c.Seed, q, r, 100*Confidence, budget)
}

// Fig7Point is one point of Figure 7: the MTBU (hours) for a strategy,
// number of servers and chain length.
type Fig7Point struct {
	Strategy placement.Strategy
	Servers  int
	Replicas int
	Summary
	Events int64 // simulated events, over all replications
}

// stream is the PCG stream of one replication: every (strategy, servers, t,
// replication) draws from its own stream, so results do not depend on the
// order in which workers run them.
func stream(s placement.Strategy, n, t, rep int) uint64 {
	return uint64(slices.Index(fig7Strategies, s))<<56 | uint64(t)<<48 | uint64(n)<<24 | uint64(rep)
}

// RunFig7 simulates every point of the grid, replications in parallel, and
// returns the points sorted by strategy, chain length and servers. The
// result depends only on the configuration and seed.
func RunFig7(c Fig7Config) ([]Fig7Point, error) {
	strategies, servers, replicas, reps := c.grid()
	workers := c.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	progress := c.Progress
	if progress == nil {
		progress = io.Discard
	}
	every := c.ProgressEvery
	if every <= 0 {
		every = 5 * time.Second
	}

	type job struct{ point, rep int }
	var points []Fig7Point
	var models []Model
	for _, s := range strategies {
		for _, t := range replicas {
			for _, n := range servers {
				if t > n {
					continue
				}
				m := PaperModel(s, n, t)
				m.RepairDelay = fig7RepairDelay
				m.Horizon = fig7Horizon
				m.RecoveryPerServerMax = c.RecoveryPerServerMax
				if c.Model != nil {
					c.Model(&m)
				}
				if err := m.validate(); err != nil {
					return nil, err
				}
				points = append(points, Fig7Point{Strategy: s, Servers: n, Replicas: t})
				models = append(models, m)
			}
		}
	}
	samples := make([][]Outcome, len(points))
	for i := range samples {
		samples[i] = make([]Outcome, reps)
	}
	// Most expensive points first (many servers, long chains), so the run
	// does not end waiting for one slow point.
	order := make([]int, len(points))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(points[b].Replicas, points[a].Replicas), cmp.Compare(points[b].Servers, points[a].Servers))
	})
	jobs := make(chan job)
	remaining := make([]atomic.Int32, len(points))
	for i := range remaining {
		remaining[i].Store(int32(reps))
	}
	var done, pointsDone atomic.Int64
	var mu sync.Mutex // serializes progress lines
	start := time.Now()
	var errOnce sync.Once
	var firstErr error

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				p := points[j.point]
				rng := rand.New(rand.NewPCG(c.Seed, stream(p.Strategy, p.Servers, p.Replicas, j.rep)))
				o, err := Simulate(models[j.point], rng)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				samples[j.point][j.rep] = o
				done.Add(1)
				if remaining[j.point].Add(-1) == 0 {
					pointsDone.Add(1)
					s := summarize(samples[j.point])
					mu.Lock()
					fmt.Fprintf(progress, "fig7: %-6s servers=%-3d t=%d  MTBU %10.2f h  99%% CI [%.2f, %.2f]  (%d/%d points, %s)\n",
						fig7Label(p.Strategy), p.Servers, p.Replicas, s.Mean, s.Low, s.High, pointsDone.Load(), len(points), time.Since(start).Round(time.Second))
					mu.Unlock()
				}
			}
		})
	}
	stop := make(chan struct{})
	var tickerDone sync.WaitGroup
	tickerDone.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				fmt.Fprintf(progress, "fig7: progress %d/%d replications, %d/%d points, %s elapsed\n",
					done.Load(), len(points)*reps, pointsDone.Load(), len(points), time.Since(start).Round(time.Second))
				mu.Unlock()
			}
		}
	})
	for _, i := range order {
		for r := range reps {
			jobs <- job{i, r}
		}
	}
	close(jobs)
	wg.Wait()
	close(stop)
	tickerDone.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for i := range points {
		points[i].Summary = summarize(samples[i])
		for _, o := range samples[i] {
			points[i].Events += int64(o.Events)
		}
	}
	return points, nil
}

// fig7RepairDelay is how long a failed server stays down before it comes
// back empty and can be a recovery target: 10 minutes, as in CR §5.3.
const fig7RepairDelay = 10 * time.Minute

func summarize(os []Outcome) Summary {
	xs := make([]float64, len(os))
	censored := 0
	for i, o := range os {
		xs[i] = o.Hours()
		if o.Censored {
			censored++
		}
	}
	s := Summarize(xs)
	s.Censored = censored
	return s
}

// Fig7Header is the CSV header WriteFig7CSV writes.
var Fig7Header = []string{"strategy", "servers", "t", "mtbu_hours", "ci_low_hours", "ci_high_hours", "replications", "censored"}

// WriteFig7CSV writes one row per point.
func WriteFig7CSV(w io.Writer, points []Fig7Point) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Fig7Header); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	for _, p := range points {
		row := []string{fig7Label(p.Strategy), strconv.Itoa(p.Servers), strconv.Itoa(p.Replicas),
			f(p.Mean), f(p.Low), f(p.High), strconv.Itoa(p.N), strconv.Itoa(p.Censored)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
