package experiment

import (
	"bytes"
	"encoding/csv"
	"math"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// The same seed gives the same CSV whatever the number of workers; another
// seed gives another. A small grid with short runs keeps this cheap.
func TestFig5SameSeedSameCSV(t *testing.T) {
	small := fig5Config{Servers: []int{3, 6}, Pcts: []int{50}, VariantServers: []int{3}, VariantPcts: []int{50},
		Warmup: wire.Second, Measure: wire.Second}
	csvOf := func(seed uint64, workers int) []byte {
		t.Helper()
		points, err := runFig5Config(Options{Seed: seed, Workers: workers, Progress: &bytes.Buffer{}}, small)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteFig5CSV(&b, points); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := csvOf(3, 1), csvOf(3, 2)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different CSV:\n%s\n%s", a, b)
	}
	if c := csvOf(4, 2); bytes.Equal(a, c) {
		t.Fatalf("seeds 3 and 4 gave the same CSV:\n%s", a)
	}
	rows, err := csv.NewReader(bytes.NewReader(a)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows[0], ","); !strings.HasPrefix(got, "servers,update_pct,per_client_throughput,") {
		t.Errorf("header %q", got)
	}
	if len(rows) != 1+2+3 {
		t.Errorf("%d rows, want a header, 2 chain points and 3 variant points", len(rows))
	}
}

// The no-queueing bound is one request per no-load latency: 8 ms for a
// query, 95 ms for an update (CR §5.1's 7 and 94 ms plus the dispatcher).
func TestFig5Bound(t *testing.T) {
	for _, tc := range []struct {
		pct  int
		want float64
	}{{0, 1000.0 / 8}, {100, 1000.0 / 95}, {50, 1000.0 / 51.5}} {
		if got := Fig5Bound(tc.pct); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Fig5Bound(%d) = %v, want %v", tc.pct, got, tc.want)
		}
	}
}

// CR §5.2, Figure 5, on the --quick grid (3, 12, 50, 125 servers; 0, 25,
// 100% updates; 5 s measured): the average throughput per client grows
// with the number of servers and levels off; more updates give less; with
// few servers the servers' capacity bounds it, with many a client's own
// no-load latency does.
func TestFig5QuickShowsThePapersShape(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 12 load runs; skipped with -short")
	}
	points, err := RunFig5(Options{Seed: 1, Quick: true, Workers: 2, Progress: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	c := fig5Grid(true)
	at := map[[2]int]float64{}
	for _, p := range points {
		if p.Variant != sim.ProtocolChain {
			t.Fatalf("quick run measured %s", p.Variant)
		}
		at[[2]int{p.Servers, p.UpdatePct}] = p.PerClient
		t.Logf("%3d servers, %3d%% updates: %6.2f requests/s per client (bound %6.2f)", p.Servers, p.UpdatePct, p.PerClient, Fig5Bound(p.UpdatePct))
	}
	if len(at) != len(c.Servers)*len(c.Pcts) {
		t.Fatalf("%d points, want %d", len(at), len(c.Servers)*len(c.Pcts))
	}
	first, last := c.Servers[0], c.Servers[len(c.Servers)-1]
	for _, pct := range c.Pcts {
		// Grows with the number of servers...
		for i := 1; i < len(c.Servers); i++ {
			if lo, hi := at[[2]int{c.Servers[i-1], pct}], at[[2]int{c.Servers[i], pct}]; hi <= lo {
				t.Errorf("%d%% updates: %.2f at %d servers, not above %.2f at %d", pct, hi, c.Servers[i], lo, c.Servers[i-1])
			}
		}
		// ...and levels off: the gain per added server between the two
		// largest sizes is under a fifth of that between the two smallest.
		slope := func(a, b int) float64 { return (at[[2]int{b, pct}] - at[[2]int{a, pct}]) / float64(b-a) }
		if early, late := slope(first, c.Servers[1]), slope(c.Servers[len(c.Servers)-2], last); late > early/5 {
			t.Errorf("%d%% updates does not level off: %.3f per server at first, %.3f at the end", pct, early, late)
		}
		// With many servers a client is seldom queued behind another: it
		// gets close to, and never above, one request per no-load latency.
		bound := Fig5Bound(pct)
		if got := at[[2]int{last, pct}]; got > bound*1.02 || got < 0.85*bound {
			t.Errorf("%d%% updates at %d servers: %.2f per client, want within [0.85, 1.02] of the bound %.2f", pct, last, got, bound)
		}
	}
	for _, n := range c.Servers {
		for i := 1; i < len(c.Pcts); i++ {
			if fewer, more := at[[2]int{n, c.Pcts[i-1]}], at[[2]int{n, c.Pcts[i]}]; more >= fewer {
				t.Errorf("%d servers: %.2f with %d%% updates, not below %.2f with %d%%", n, more, c.Pcts[i], fewer, c.Pcts[i-1])
			}
		}
	}
	// With 3 servers every server is saturated: 3 servers' work per second
	// over the work a request takes (a query 5 ms at the tail; an update
	// 50 + 20 + 20 ms), shared by 25 clients.
	for _, tc := range []struct {
		pct  int
		work wire.Time
	}{{0, Fig4Costs.Query}, {100, Fig4Costs.Update + 2*Fig4Costs.Forward}} {
		capacity := 3 * float64(wire.Second) / float64(tc.work) / fig5Clients
		if got := at[[2]int{first, tc.pct}]; got > capacity*1.01 || got < 0.9*capacity {
			t.Errorf("%d%% updates at %d servers: %.2f per client, want within [0.9, 1.01] of capacity %.2f", tc.pct, first, got, capacity)
		}
	}
}
