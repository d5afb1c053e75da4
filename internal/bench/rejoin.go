package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/client"
)

// The rejoin measurement (issue 18, catch-up on restart): a master and
// three servers as real processes, Data bytes of 1 KB records loaded,
// the chain's tail stopped for Outage while clients keep writing at
// OutageRate, then restarted with its data directory. It reports how long
// the master took to make the server a chain member again and how many
// bytes the server received meanwhile (its transport's counter), which
// is what its chain sent it (a snapshot, or the updates it missed) plus
// the master's replies.

// RejoinOptions configure RunRejoin.
type RejoinOptions struct {
	Binary string // the catena binary
	Dir    string // data and logs go under it
	// Data is how many bytes of values to load (records of ValueSize).
	Data      int64
	ValueSize int
	// Outage is how long the server stays down; OutageRate the writes per
	// second clients make meanwhile (overwriting loaded records).
	Outage     time.Duration
	OutageRate int
	// Threads load the records concurrently.
	Threads int
	// Timeout bounds the wait for the server to rejoin.
	Timeout time.Duration
	// Wipe restarts the server with an empty data directory (a replaced
	// disk): it rejoins by snapshot, never by catch-up.
	Wipe bool
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// RejoinResult is what RunRejoin measured.
type RejoinResult struct {
	Records     int
	Loaded      time.Duration // time to load the records
	OutageWrite int           // writes acknowledged during the outage
	// Rejoin is from the restarted process's start until the master's
	// status shows it a chain member again, current in the chain's epoch.
	Rejoin time.Duration
	// Received is the bytes the restarted server read from its TCP
	// connections until then.
	Received int64
	// LoadAvg is the 1-minute load average when the server restarted.
	LoadAvg float64
}

// RunRejoin runs the measurement once with o.Binary.
func RunRejoin(ctx context.Context, o RejoinOptions) (res RejoinResult, err error) {
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ports, err := freePorts(7)
	if err != nil {
		return res, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	masterAddr := addr(ports[0])
	servers := []string{addr(ports[1]), addr(ports[2]), addr(ports[3])}
	metricsAddr := map[string]string{servers[0]: addr(ports[4]), servers[1]: addr(ports[5]), servers[2]: addr(ports[6])}
	var procs []*Process
	defer func() {
		for _, p := range procs {
			p.Stop(5 * time.Second)
		}
	}()
	m, err := startProcess(o.Dir, "master", o.Binary, "master", "-listen", masterAddr,
		"-data", filepath.Join(o.Dir, "master"), "-servers", strings.Join(servers, ","))
	if err != nil {
		return res, err
	}
	procs = append(procs, m)
	serverArgs := func(s string) []string {
		return []string{"server", "-listen", s, "-master", masterAddr, "-data", filepath.Join(o.Dir, "data-"+s), "-http", metricsAddr[s]}
	}
	byAddr := map[string]*Process{}
	for _, s := range servers {
		p, err := startProcess(o.Dir, "server-"+s, o.Binary, serverArgs(s)...)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
		byAddr[s] = p
	}
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	full := func(ctx context.Context) error {
		if c == nil {
			var err error
			if c, err = client.Dial(ctx, masterAddr, client.Options{}); err != nil {
				return err
			}
		}
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		return chainsWith(st, servers)
	}
	if err := waitFor(ctx, "catena cluster", startTimeout, procs, full); err != nil {
		return res, err
	}

	// Load.
	res.Records = int(o.Data / int64(o.ValueSize))
	logf("loading %d records of %d bytes with %d threads", res.Records, o.ValueSize, o.Threads)
	began := time.Now()
	if err := parallelPuts(ctx, c, o.Threads, res.Records, func(i int) (string, []byte) {
		return rejoinKey(i), rejoinValue(i, 0, o.ValueSize)
	}); err != nil {
		return res, fmt.Errorf("load: %w", err)
	}
	res.Loaded = time.Since(began)
	logf("loaded in %s", res.Loaded.Round(time.Millisecond))

	// Stop the tail of the first volume.
	st, err := c.Status(ctx)
	if err != nil {
		return res, err
	}
	victim := st.Volumes[0].Chain[len(st.Volumes[0].Chain)-1]
	var incarnation uint64
	for _, srv := range st.Servers {
		if srv.Addr == victim {
			incarnation = srv.Incarnation
		}
	}
	logf("stopping %s (tail) for %s, %d writes/s meanwhile", victim, o.Outage, o.OutageRate)
	byAddr[victim].Stop(10 * time.Second)
	res.OutageWrite, err = writeAtRate(ctx, c, o.Outage, o.OutageRate, res.Records, o.ValueSize)
	if err != nil {
		return res, fmt.Errorf("writes during the outage: %w", err)
	}
	logf("%d writes during the outage", res.OutageWrite)

	// Restart with the same data directory (or an empty one), and wait
	// for the rejoin.
	if o.Wipe {
		logf("wiping %s's data directory", victim)
		if err := os.RemoveAll(filepath.Join(o.Dir, "data-"+victim)); err != nil {
			return res, err
		}
	}
	res.LoadAvg = loadAverage()
	restarted := time.Now()
	p, err := startProcess(o.Dir, "server-"+victim, o.Binary, serverArgs(victim)...)
	if err != nil {
		return res, err
	}
	procs = append(procs, p)
	rejoined := func(ctx context.Context) error {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		for _, srv := range st.Servers {
			if srv.Addr == victim && srv.Incarnation == incarnation {
				return fmt.Errorf("%s not restarted yet", victim)
			}
		}
		return chainsWith(st, servers)
	}
	if err := waitFor(ctx, "rejoin", o.Timeout, []*Process{p}, rejoined); err != nil {
		return res, err
	}
	res.Rejoin = time.Since(restarted)
	res.Received, err = scrapeCounter(ctx, metricsAddr[victim], "catena_transport_received_bytes_total")
	logf("rejoined in %s, %d bytes received", res.Rejoin.Round(time.Millisecond), res.Received)
	return res, err
}

// chainsWith reports why some volume's chain is not every one of servers,
// current and alive, with no extension under way (nil if none).
func chainsWith(st *client.ClusterStatus, servers []string) error {
	if len(st.Volumes) == 0 {
		return fmt.Errorf("no volumes yet")
	}
	for _, cfg := range st.Volumes {
		if len(cfg.Chain) != len(servers) || cfg.Joining != "" {
			return fmt.Errorf("volume %d: chain %v joining %q", cfg.Volume, cfg.Chain, cfg.Joining)
		}
		for _, srv := range st.Servers {
			if slices.Contains(cfg.Chain, srv.Addr) && (!srv.Alive || replicaEpoch(srv, cfg.Volume) != cfg.Epoch) {
				return fmt.Errorf("server %s not current in volume %d", srv.Addr, cfg.Volume)
			}
		}
	}
	return nil
}

func rejoinKey(i int) string { return fmt.Sprintf("rejoin/%09d", i) }

// rejoinValue is record i's value in its version-th write: size bytes
// that do not compress to nothing.
func rejoinValue(i, version, size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(i), uint64(version)))
	for j := range b {
		b[j] = 'a' + byte(r.IntN(26))
	}
	return b
}

// parallelPuts writes n records with threads concurrent writers.
func parallelPuts(ctx context.Context, c *client.Client, threads, n int, record func(i int) (string, []byte)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for range threads {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				k, v := record(i)
				if err := c.Put(ctx, k, v); err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// writeAtRate overwrites random records at rate writes per second for d
// (16 writers, each paced), and returns how many were acknowledged
// (writes that failed while the master removed the stopped server are
// not retried).
func writeAtRate(ctx context.Context, c *client.Client, d time.Duration, rate, records, size int) (int, error) {
	const writers = 16
	var done atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	interval := time.Duration(float64(time.Second) * writers / float64(max(rate, 1)))
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			next := time.Now()
			for n := 1; time.Now().Before(deadline); n++ {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				next = next.Add(interval)
				i := r.IntN(records)
				wctx, cancel := context.WithDeadline(ctx, deadline.Add(5*time.Second))
				err := c.Put(wctx, rejoinKey(i), rejoinValue(i, n, size))
				cancel()
				if err == nil {
					done.Add(1) // a write the chain refused or lost to the outage is not counted
				}
			}
		})
	}
	wg.Wait()
	return int(done.Load()), ctx.Err()
}

// scrapeCounter reads one unlabelled counter from a Prometheus endpoint.
func scrapeCounter(ctx context.Context, addr, name string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return int64(v), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", addr, name)
}
