package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Sites as real processes (ChainReaction's geo mode, docs/adr/0013-sites-
// and-geo-causal.md): two or three sites on loopback, each a whole
// cluster (its master, its servers), the default keyspace causal and
// replicated by all of them, messages between sites delayed as over a
// WAN; every link, between sites too, is mutual TLS with the tests' one
// CA (tls_test.go) unless CATENA_INTEGRATION_INSECURE is set. Clients at
// every site write and read while the tail of a volume at
// the first site, the one shipping its updates, is killed with SIGKILL
// and restarted. Afterwards every site holds the same values (last writer
// wins), no acknowledged write is missing at any site, and no reader at
// one site ever saw a write without one it causally depends on.

// sitesCase sizes one run.
type sitesCase struct {
	sites, masters, servers int
	// volumes, k and t are the default keyspace's.
	volumes, k, t int
	// rtt is the emulated round trip between sites (± rtt/12 jitter).
	rtt time.Duration
	// load is how long the workload runs before and after the kill.
	load time.Duration
	// clusters, if set, are the sites' deployment names (-cluster).
	clusters []string
}

// TestSitesConvergeCausallyThroughATailKill: 2 sites, 1 master and 3
// servers each, 60 ms between them.
func TestSitesConvergeCausallyThroughATailKill(t *testing.T) {
	runSites(t, sitesCase{sites: 2, masters: 1, servers: 3, volumes: 2, k: 2, t: 3, rtt: 60 * time.Millisecond, load: 2 * time.Second})
}

// TestSitesLong: three sites with Raft-replicated masters, the paper's
// 120 ms, longer load. CATENA_SITES_LONG=1 runs it.
func TestSitesLong(t *testing.T) {
	if os.Getenv("CATENA_SITES_LONG") == "" {
		t.Skip("set CATENA_SITES_LONG=1: three sites of 3 masters and 3 servers, 120 ms apart")
	}
	runSites(t, sitesCase{sites: 3, masters: 3, servers: 3, volumes: 3, k: 1, t: 3, rtt: 120 * time.Millisecond, load: 8 * time.Second})
}

// startSites starts every site's processes and waits until each is
// ready. Ports are chosen first: every master is told every site's
// masters, and every process the other sites' addresses (-wan-peers).
func startSites(t *testing.T, sc sitesCase) []*cluster {
	t.Helper()
	bin, dir := catenaBinary(t), t.TempDir()
	var all []*cluster
	var sites []string
	var ids []string
	for i := 1; i <= sc.sites; i++ {
		c := &cluster{t: t, bin: bin, dir: dir}
		var mAddrs []string
		for range sc.masters {
			mAddrs = append(mAddrs, freePort(t))
		}
		c.mAddr = strings.Join(mAddrs, ",")
		for range sc.servers {
			c.addrs = append(c.addrs, freePort(t))
		}
		all = append(all, c)
		sites = append(sites, fmt.Sprintf("%d=site%d@%s", i, i, c.mAddr))
		ids = append(ids, strconv.Itoa(i))
	}
	for i, c := range all {
		var remote []string
		for _, o := range all {
			if o != c {
				remote = append(remote, strings.Split(o.mAddr, ",")...)
				remote = append(remote, o.addrs...)
			}
		}
		site := strconv.Itoa(i + 1)
		c.cutFile = filepath.Join(dir, "cut-site"+site)
		wan := []string{"-site", site, "-wan-rtt", sc.rtt.String(), "-wan-jitter", (sc.rtt / 12).String(), "-wan-peers", strings.Join(remote, ","),
			"-wan-cut-file", c.cutFile}
		for j, addr := range strings.Split(c.mAddr, ",") {
			name := fmt.Sprintf("site%d-m%d", i+1, j+1)
			args := append([]string{"master", "-listen", addr, "-data", filepath.Join(dir, name), "-servers", strings.Join(c.addrs, ","),
				"-replicas", strconv.Itoa(sc.t), "-volumes", strconv.Itoa(sc.volumes), "-default-k", strconv.Itoa(sc.k),
				"-sites", strings.Join(sites, ";"), "-default-sites", strings.Join(ids, ",")}, masterTiming...)
			args = append(args, wan...)
			if sc.clusters != nil {
				args = append(args, "-cluster", sc.clusters[i])
			}
			if sc.masters > 1 {
				args = append(args, "-masters", c.mAddr)
			}
			p := &process{name: name, args: args}
			c.masters = append(c.masters, p)
			c.start(p)
		}
		for j, addr := range c.addrs {
			name := fmt.Sprintf("site%d-s%d", i+1, j+1)
			args := append([]string{"server", "-listen", addr, "-master", c.mAddr, "-data", filepath.Join(dir, name)}, serverTiming...)
			p := &process{name: name, args: append(args, wan...)}
			c.servers = append(c.servers, p)
			c.start(p)
		}
		t.Cleanup(c.stopAll)
	}
	for i, c := range all {
		c.awaitHealthy(fmt.Sprintf("site %d ready", i+1), nil)
	}
	return all
}

func runSites(t *testing.T, sc sitesCase) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	sites := startSites(t, sc)
	s := sites[0].awaitHealthy("site 1's status", nil)
	if s.Site != 1 || len(s.Sites) != sc.sites || len(s.Keyspaces) == 0 || len(s.Keyspaces[0].Sites) != sc.sites {
		t.Fatalf("site 1's status: site %d, sites %v, keyspaces %v", s.Site, s.Sites, s.Keyspaces)
	}
	ks := s.Keyspaces
	t.Logf("%d sites ready after %s: %d masters and %d servers each, default keyspace causal k=%d t=%d over %d volumes, %s between sites",
		sc.sites, time.Since(began).Round(100*time.Millisecond), sc.masters, sc.servers, sc.k, sc.t, sc.volumes, sc.rtt)

	// x and y in different volumes: y's dependency on x crosses chains.
	keyIn := func(prefix string, v wire.VolumeID) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s%d", prefix, i)
			if got, _ := placement.Route(ks, k); got == v {
				return k
			}
		}
	}
	w := &sitesWorkload{stop: make(chan struct{}), acked: map[string]string{}}
	for from := range sites {
		// A writer at each site writes x then y; readers at every other
		// site read y then x.
		x, y := keyIn(fmt.Sprintf("x%d-", from+1), 0), keyIn(fmt.Sprintf("y%d-", from+1), wire.VolumeID(sc.volumes-1))
		w.pairWriter(t, sites[from], x, y)
		for to := range sites {
			if to != from {
				w.pairReader(t, sites[to], fmt.Sprintf("site %d reading site %d's pair", to+1, from+1), x, y)
			}
		}
		// Writers at every site on the same keys: last writer wins.
		w.conflictWriter(t, sites[from], from+1)
	}
	// Unique keys at site 1, each written once: none may be lost.
	w.uniqueWriter(t, sites[0], 1)

	w.awaitAcked(t, 30)
	time.Sleep(sc.load)
	// Kill the tail of volume 0 at site 1, the member that ships its
	// updates to the other sites, in the middle of shipping.
	first := sites[0]
	cfg := configOf(first.awaitHealthy("site 1 healthy before the kill", nil), 0)
	victim := cfg.Tail()
	p := first.server(string(victim))
	first.kill(p)
	first.awaitStatusWithin(string(victim)+" removed from site 1's volume 0", chainRepairWait,
		func(s *wire.StatusReply) bool { return configOf(s, 0).Index(victim) < 0 })
	w.awaitAcked(t, 10) // writes go on with the shorter chain
	first.start(p)
	cfg = configOf(first.awaitHealthy("site 1 healthy with "+string(victim)+" back", []wire.NodeID{victim}), 0)
	t.Logf("site 1's tail %s killed while shipping and restarted; volume 0 now %v", victim, cfg)
	w.awaitAcked(t, 10)
	time.Sleep(sc.load)
	w.finish()

	// Quiet and converged: every site's chains applied and committed
	// the same, every site holds every other site's updates stable, and
	// the tails of a volume's sibling chains hold the same vector.
	converged, vectors := awaitSitesConverged(t, sites)
	t.Logf("converged %s after the load stopped: volume vectors %v", converged.Round(100*time.Millisecond), vectors)

	// Every site reads the same value of every key written at several
	// sites, one that some site wrote.
	var shared []string
	for k := range w.written {
		shared = append(shared, k)
	}
	slices.Sort(shared)
	values := make([]map[string]string, len(sites))
	for i, c := range sites {
		cl, ctx := dial(t, c.mAddr)
		values[i] = map[string]string{}
		for _, k := range shared {
			v, found, err := cl.Get(ctx, k)
			if err != nil || !found {
				t.Fatalf("site %d: final read of %s: found %v, %v", i+1, k, found, err)
			}
			values[i][k] = string(v)
			if !w.written[k][string(v)] {
				t.Errorf("site %d reads %s=%q, a value nobody wrote", i+1, k, v)
			}
		}
	}
	w.checkAckedEverywhere(t, sites)
	checkDurableAcrossSites(t, sites)
	for i := 1; i < len(sites); i++ {
		for _, k := range shared {
			if values[i][k] != values[0][k] {
				t.Errorf("%s: site 1 reads %q, site %d %q (diverged)", k, values[0][k], i+1, values[i][k])
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
	t.Logf("%d unique writes acknowledged at site 1, %d writes in all; %d reads of a pair's y saw its x (of %d y found); %d problems; run time %s",
		len(w.acked), w.writes.Load(), w.pairsSeen.Load(), w.ySeen.Load(), len(w.problems), time.Since(began).Round(100*time.Millisecond))
	for _, pr := range w.problems[:min(len(w.problems), 5)] {
		t.Log("problem: ", pr)
	}
	if w.ySeen.Load() == 0 {
		t.Error("no reader at another site ever saw a pair's y: the check tested nothing")
	}
	checkProtocolLogs(t, sites)
}

// checkProtocolLogs fails the test if a server of a site logged a message
// that contradicts the protocol.
func checkProtocolLogs(t *testing.T, sites []*cluster) {
	t.Helper()
	for _, c := range sites {
		for _, p := range c.servers {
			data, err := os.ReadFile(p.log)
			if err != nil {
				continue
			}
			var lines []string
			for _, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, "contradicts the protocol") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 0 {
				t.Errorf("%s logged %d messages that contradict the protocol, the first:\n%s", p.name, len(lines), strings.Join(lines[:min(3, len(lines))], "\n"))
			}
		}
	}
}

// checkAckedEverywhere reads every acknowledged unique write at every
// site: each must be there with its value.
func (w *sitesWorkload) checkAckedEverywhere(t *testing.T, sites []*cluster) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range sites {
		cl, _ := dial(t, c.mAddr)
		ctx, cancel := context.WithTimeout(context.Background(), chainRepairWait)
		missing := 0
		for k, want := range w.acked {
			v, found, err := cl.Get(ctx, k)
			if err != nil || !found || string(v) != want {
				missing++
				if missing <= 5 {
					t.Errorf("site %d: acknowledged write %s=%q reads as %q (found %v, %v)", i+1, k, want, v, found, err)
				}
			}
		}
		cancel()
		if missing > 0 {
			t.Errorf("site %d misses %d of %d acknowledged unique writes", i+1, missing, len(w.acked))
		}
	}
}

// sitesWorkload runs the clients of every site.
type sitesWorkload struct {
	stop chan struct{}
	wg   sync.WaitGroup
	// writes counts acknowledged writes; ySeen the reads of a pair's y
	// that found it, pairsSeen those whose x read after it was there.
	writes, ySeen, pairsSeen atomic.Int64

	mu sync.Mutex
	// acked holds the acknowledged unique writes, key → value.
	acked map[string]string
	// written holds, per key written at several sites, every value
	// written (acknowledged or not).
	written    map[string]map[string]bool
	violations []string
	problems   []string
}

const sitesOpTimeout = 10 * time.Second

func (w *sitesWorkload) run(f func(ctx context.Context) bool) {
	w.wg.Go(func() {
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), sitesOpTimeout)
			ok := f(ctx)
			cancel()
			if !ok {
				return
			}
		}
	})
}

func (w *sitesWorkload) problem(format string, args ...any) {
	w.mu.Lock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// pairWriter writes x=i then y=i, i = 1, 2, ..., in one session: y=i
// depends on x=i.
func (w *sitesWorkload) pairWriter(t *testing.T, c *cluster, x, y string) {
	cl, _ := dial(t, c.mAddr)
	i := 0
	w.run(func(ctx context.Context) bool {
		i++
		v := []byte(strconv.Itoa(i))
		if err := cl.Put(ctx, x, v); err != nil {
			w.problem("put %s=%d: %v", x, i, err)
			return false // the pair's order is what is tested: stop rather than skip
		}
		if err := cl.Put(ctx, y, v); err != nil {
			w.problem("put %s=%d: %v", y, i, err)
			return false
		}
		w.writes.Add(2)
		return true
	})
}

// pairReader reads y then x in one session at another site: having
// seen y=i it must see x ≥ i (x=i is in y=i's causal past).
func (w *sitesWorkload) pairReader(t *testing.T, c *cluster, who, x, y string) {
	cl, _ := dial(t, c.mAddr)
	w.run(func(ctx context.Context) bool {
		yv, yFound, err := cl.Get(ctx, y)
		if err != nil {
			w.problem("%s: get %s: %v", who, y, err)
			return true
		}
		if !yFound {
			time.Sleep(5 * time.Millisecond)
			return true
		}
		w.ySeen.Add(1)
		xv, xFound, err := cl.Get(ctx, x)
		if err != nil {
			w.problem("%s: get %s: %v", who, x, err)
			return true
		}
		yi, _ := strconv.Atoi(string(yv))
		xi, _ := strconv.Atoi(string(xv))
		if !xFound || xi < yi {
			w.mu.Lock()
			w.violations = append(w.violations, fmt.Sprintf("%s: read %s=%d, then %s=%q (found %v): the write it depends on is missing", who, y, yi, x, xv, xFound))
			w.mu.Unlock()
			return false
		}
		w.pairsSeen.Add(1)
		return true
	})
}

// conflictKeys are written at every site.
var conflictKeys = []string{"shared-a", "shared-b", "shared-c", "shared-d"}

// conflictWriter writes the shared keys at site.
func (w *sitesWorkload) conflictWriter(t *testing.T, c *cluster, site int) {
	cl, _ := dial(t, c.mAddr)
	n := 0
	w.run(func(ctx context.Context) bool {
		n++
		k := conflictKeys[n%len(conflictKeys)]
		v := fmt.Sprintf("site%d-%d", site, n)
		w.mu.Lock()
		if w.written == nil {
			w.written = map[string]map[string]bool{}
		}
		if w.written[k] == nil {
			w.written[k] = map[string]bool{}
		}
		w.written[k][v] = true
		w.mu.Unlock()
		if err := cl.Put(ctx, k, []byte(v)); err != nil {
			w.problem("put %s=%s at site %d: %v", k, v, site, err)
			return true
		}
		w.writes.Add(1)
		return true
	})
}

// uniqueWriter writes keys never written again at site, and records the
// acknowledged ones.
func (w *sitesWorkload) uniqueWriter(t *testing.T, c *cluster, site int) {
	cl, _ := dial(t, c.mAddr)
	n := 0
	w.run(func(ctx context.Context) bool {
		n++
		k, v := fmt.Sprintf("u%d/%d", site, n), fmt.Sprintf("v%d", n)
		if err := cl.Put(ctx, k, []byte(v)); err != nil {
			if !errors.Is(err, client.ErrUnavailable) {
				w.problem("put %s: %v", k, err)
			}
			return true
		}
		w.writes.Add(1)
		w.mu.Lock()
		w.acked[k] = v
		w.mu.Unlock()
		return true
	})
}

// awaitAcked waits until n more unique writes are acknowledged.
func (w *sitesWorkload) awaitAcked(t *testing.T, n int) {
	t.Helper()
	awaitGrowth(t, "unique writes acknowledged", n, w.ackedCount)
}

func (w *sitesWorkload) finish() {
	close(w.stop)
	w.wg.Wait()
}

// awaitSitesConverged waits until every site is quiet, ships nothing
// more, and the tails of each volume's sibling chains report the same
// vector; it returns how long that took and the vectors.
func awaitSitesConverged(t *testing.T, sites []*cluster) (time.Duration, map[wire.VolumeID]wire.Vector) {
	t.Helper()
	began := time.Now()
	deadline := began.Add(chainRepairWait)
	var why string
	for time.Now().Before(deadline) {
		why = ""
		var vectors map[wire.VolumeID]wire.Vector
		for i, c := range sites {
			s, err := c.status()
			if err != nil {
				why = fmt.Sprintf("site %d: %v", i+1, err)
				break
			}
			if !quiet(s.Keyspaces[0])(s) {
				why = fmt.Sprintf("site %d not quiet", i+1)
				break
			}
			tails := map[wire.VolumeID]wire.Vector{}
			for _, cfg := range s.Configs {
				for _, srv := range s.Servers {
					for _, v := range srv.Volumes {
						if srv.ID == cfg.Tail() && v.Volume == cfg.Volume && v.Epoch == cfg.Epoch {
							tails[cfg.Volume] = v.Stable
							own := v.Stable.Get(wire.SiteID(i + 1))
							for _, o := range cfg.Sites {
								if o != wire.SiteID(i+1) && v.Shipped.Get(o) < own {
									why = fmt.Sprintf("site %d volume %d: site %d holds %d of its %d updates stable", i+1, cfg.Volume, o, v.Shipped.Get(o), own)
								}
							}
						}
					}
				}
				if _, ok := tails[cfg.Volume]; !ok && why == "" {
					why = fmt.Sprintf("site %d volume %d: no report from the tail", i+1, cfg.Volume)
				}
			}
			if why != "" {
				break
			}
			if vectors == nil {
				vectors = tails
			} else if !maps.EqualFunc(vectors, tails, slices.Equal) {
				why = fmt.Sprintf("site 1's vectors %v, site %d's %v", vectors, i+1, tails)
				break
			}
		}
		if why == "" {
			return time.Since(began), vectors
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sites not converged within %s: %s", chainRepairWait, why)
	return 0, nil
}

// checkDurableAcrossSites writes at site 1 with client.WithSites(every
// site): each write returns only once every site holds it stable, so a
// client already connected at every other site reads it at once (a
// write without it reaches them a WAN trip later).
func checkDurableAcrossSites(t *testing.T, sites []*cluster) {
	writer, ctx := dial(t, sites[0].mAddr)
	readers := make([]*client.Client, len(sites))
	for i := 1; i < len(sites); i++ {
		readers[i], _ = dial(t, sites[i].mAddr)
	}
	for n := range 10 {
		key, value := fmt.Sprintf("durable-%d", n), fmt.Sprintf("at-%d-sites", len(sites))
		if err := writer.Put(client.WithSites(ctx, len(sites)), key, []byte(value)); err != nil {
			t.Fatalf("put %s for %d sites: %v", key, len(sites), err)
		}
		for i := 1; i < len(sites); i++ {
			if v, found, err := readers[i].Get(ctx, key); err != nil || !found || string(v) != value {
				t.Fatalf("site %d right after %s was put for %d sites: %q (found %v, %v)", i+1, key, len(sites), v, found, err)
			}
		}
	}
}
