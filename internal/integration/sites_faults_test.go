package integration

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Three sites through the faults of issue 13's real-process test
// (docs/adr/0013-sites-and-geo-causal.md): causal sessions at every site
// write unique values and read shared keys, writers at every site write
// keys of their own, while, one after the other, the shipping tail of a
// volume at site 1 is killed with SIGKILL, the master leader of site 2 is
// killed with SIGKILL, and site 3 is cut off from the other two (every
// link between its processes and theirs, -wan-cut-file) for a few
// seconds and healed. Afterwards every site converges, every
// acknowledged write is at every site, and the recorded history of all
// the sites' sessions is causal+ (check.CausalConvergence, with the
// checks of causal_test.go).

// sitesFaultsCase sizes one run.
type sitesFaultsCase struct {
	sitesCase
	// sessions are the causal sessions per site; keys the keys they
	// share.
	sessions, keys int
	// cut is how long site 3 stays cut off.
	cut time.Duration
}

// TestSitesThreeKillsAndACutSite: 3 sites of 3 masters and 3 servers,
// 60 ms apart.
func TestSitesThreeKillsAndACutSite(t *testing.T) {
	runSitesFaults(t, sitesFaultsCase{
		sitesCase: sitesCase{sites: 3, masters: 3, servers: 3, volumes: 2, k: 2, t: 3, rtt: 60 * time.Millisecond, load: time.Second},
		sessions:  2, keys: 8, cut: 3 * time.Second,
	})
}

// TestSitesThreeKillsAndACutSiteLong: the paper's 120 ms, more sessions,
// longer load and cut. CATENA_SITES_LONG=1 runs it.
func TestSitesThreeKillsAndACutSiteLong(t *testing.T) {
	if os.Getenv("CATENA_SITES_LONG") == "" {
		t.Skip("set CATENA_SITES_LONG=1: three sites 120 ms apart, longer load and cut")
	}
	runSitesFaults(t, sitesFaultsCase{
		sitesCase: sitesCase{sites: 3, masters: 3, servers: 3, volumes: 3, k: 2, t: 3, rtt: 120 * time.Millisecond, load: 5 * time.Second},
		sessions:  3, keys: 12, cut: 10 * time.Second,
	})
}

func runSitesFaults(t *testing.T, fc sitesFaultsCase) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	began := time.Now()
	sites := startSites(t, fc.sitesCase)
	t.Logf("%d sites ready after %s: %d masters and %d servers each, %s between sites",
		len(sites), time.Since(began).Round(100*time.Millisecond), fc.masters, fc.servers, fc.rtt)

	var addrs []string
	for _, c := range sites {
		addrs = append(addrs, c.mAddr)
	}
	var keys []string
	for i := range fc.keys {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	// Session i is at site i mod 3.
	cw := startCausalWorkload(t, addrs, fc.sessions*len(sites), keys)
	defer cw.stopSessions()
	uw := &sitesWorkload{stop: make(chan struct{}), acked: map[string]string{}}
	for i, c := range sites {
		uw.uniqueWriter(t, c, i+1)
	}
	progress := func(what string) {
		t.Helper()
		cw.awaitAcked(t, 10)
		uw.awaitAcked(t, 10)
		t.Logf("%s: %d causal writes and %d unique writes acknowledged so far (%s)", what, cw.Acked(), uw.ackedCount(),
			time.Since(began).Round(100*time.Millisecond))
	}
	progress("load running")
	time.Sleep(fc.load)

	// 1. The tail of volume 0 at site 1, which ships its updates to
	// sites 2 and 3.
	first := sites[0]
	victim := configOf(first.awaitHealthy("site 1 healthy before the kill", nil), 0).Tail()
	p := first.server(string(victim))
	first.kill(p)
	first.awaitStatusWithin(string(victim)+" removed from site 1's volume 0", chainRepairWait,
		func(s *wire.StatusReply) bool { return configOf(s, 0).Index(victim) < 0 })
	progress("site 1's shipping tail killed")
	first.start(p)
	first.awaitHealthy("site 1 healthy with "+string(victim)+" back", []wire.NodeID{victim})
	progress("site 1's shipping tail restarted")

	// 2. Site 2's master leader.
	second := sites[1]
	leader := second.leader()
	second.kill(leader)
	second.awaitStatusWithin("site 2 to elect another master leader", chainRepairWait, func(s *wire.StatusReply) bool {
		return s.Leader != "" && string(s.Leader) != leader.args[2]
	})
	progress("site 2's master leader killed")
	second.start(leader)

	// 3. Site 3 cut off from sites 1 and 2, both ways: its processes
	// from theirs, theirs from its.
	third := sites[2]
	setCuts(t, sites, third)
	t.Logf("site 3 cut off for %s", fc.cut)
	cutAt := time.Now()
	progress("site 3 cut off")
	// The cut holds: once what was in flight has settled, site 1's
	// tails ship nothing more to site 3 while site 1 goes on writing.
	// The cut lasts until site 1 wrote, so that the check tests
	// something however slowly the processes run (go test -race).
	time.Sleep(time.Second)
	during := tailReports(t, first, "every tail of site 1 to report a second into the cut", nil)
	time.Sleep(max(0, fc.cut-time.Since(cutAt)))
	after := tailReports(t, first, "site 1 to write during the cut", func(after map[wire.VolumeID]wire.VolumeStatus) bool {
		for v, a := range after {
			if a.Stable.Get(1) > during[v].Stable.Get(1) {
				return true
			}
		}
		return false
	})
	for v, a := range after {
		if b := during[v]; a.Shipped.Get(3) != b.Shipped.Get(3) {
			t.Errorf("site 1's volume %d: %d updates stable at site 3 a second into the cut, %d at its end: the cut let shipments through",
				v, b.Shipped.Get(3), a.Shipped.Get(3))
		}
	}
	setCuts(t, sites, nil)
	t.Logf("site 3 healed")
	progress("site 3 healed")
	time.Sleep(fc.load)
	cw.stopSessions()
	uw.finish()

	converged, vectors := awaitSitesConverged(t, sites)
	t.Logf("converged %s after the load stopped: volume vectors %v", converged.Round(100*time.Millisecond), vectors)
	cw.finalReads(t, keys)
	cw.check(t, keys)
	uw.checkAckedEverywhere(t, sites)
	uw.mu.Lock()
	for _, pr := range uw.problems[:min(len(uw.problems), 5)] {
		t.Log("unique writer: ", pr)
	}
	t.Logf("%d unique writes acknowledged (at every site: checked); run time %s", len(uw.acked), time.Since(began).Round(100*time.Millisecond))
	uw.mu.Unlock()
	checkProtocolLogs(t, sites)
}

// setCuts cuts site off from every other site (nil: lifts every cut):
// its processes' cut file lists every other site's processes, and theirs
// its processes.
func setCuts(t *testing.T, sites []*cluster, cut *cluster) {
	t.Helper()
	// The processes read their cut files every 100 ms (process.wanCutPoll)
	// and log each change: wait until every process whose cut changed has
	// taken it, so what the test does next meets the cut (a write sent
	// before would reach the other site anyway).
	logged := func(p *process) int {
		data, _ := os.ReadFile(p.log)
		return strings.Count(string(data), "emulated partition")
	}
	type pending struct {
		p      *process
		before int
	}
	var wait []pending
	for _, c := range sites {
		var peers []string
		for _, o := range sites {
			if cut != nil && o != c && (c == cut || o == cut) {
				peers = append(peers, o.processAddrs()...)
			}
		}
		list := strings.Join(peers, "\n")
		if list != c.cut {
			for _, p := range append(slices.Clone(c.masters), c.servers...) {
				wait = append(wait, pending{p, logged(p)})
			}
		}
		if err := os.WriteFile(c.cutFile+".tmp", []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(c.cutFile+".tmp", c.cutFile); err != nil {
			t.Fatal(err)
		}
		c.cut = list
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range wait {
		for logged(w.p) == w.before {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not take its new -wan-cut-file within 10 s", w.p.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// processAddrs returns the addresses of the cluster's masters and servers.
func (c *cluster) processAddrs() []string {
	return append(strings.Split(c.mAddr, ","), c.addrs...)
}

// ackedCount returns how many unique writes are acknowledged so far.
func (w *sitesWorkload) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Two sites of different deployments (-cluster prod and staging) given
// each other's masters in -sites: each side refuses the other and logs
// it, and nothing written at one is applied at the other.
func TestSitesOfAnotherDeploymentRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	sites := startSites(t, sitesCase{sites: 2, masters: 1, servers: 3, volumes: 1, k: 1, t: 3, rtt: 20 * time.Millisecond,
		clusters: []string{"prod", "staging"}})
	cl, ctx := dial(t, sites[0].mAddr)
	if err := cl.Put(ctx, "x", []byte("from prod")); err != nil {
		t.Fatal(err)
	}
	// Both sides refuse: site 1's tail asks site 2's master for its
	// configurations (refused there, and the reply ignored here), and
	// site 2's servers ask site 1's master likewise.
	for _, want := range []struct {
		c    *cluster
		what string
	}{
		{sites[0], `deployment \"staging\": this is \"prod\"`},
		{sites[1], `deployment \"prod\": this is \"staging\"`},
	} {
		deadline := time.Now().Add(chainRepairWait)
		for {
			if line := logLine(want.c, "refused a site of another deployment", want.what); line != "" {
				t.Logf("%s", line)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no process of %s logged a refusal containing %s", want.c.mAddr, want.what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	other, ctx2 := dial(t, sites[1].mAddr)
	if v, found, err := other.Get(ctx2, "x"); err != nil || found {
		t.Fatalf("site 2 of another deployment reads x=%q (found %v, %v)", v, found, err)
	}
	s := sites[0].awaitHealthy("site 1's status", nil)
	for _, srv := range s.Servers {
		for _, v := range srv.Volumes {
			if v.Shipped.Get(2) != 0 {
				t.Errorf("%s reports %d updates stable at site 2 of another deployment", srv.ID, v.Shipped.Get(2))
			}
		}
	}
}

// logLine returns a line a process of the cluster logged that contains
// every one of parts, "" if none.
func logLine(c *cluster, parts ...string) string {
	for _, p := range append(c.masters[:len(c.masters):len(c.masters)], c.servers...) {
		data, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			all := true
			for _, part := range parts {
				all = all && strings.Contains(l, part)
			}
			if all {
				return p.name + ": " + l
			}
		}
	}
	return ""
}

// tailReports waits until the tail of every volume of the site has
// reported to its master at its configuration's epoch, and cond (if
// set) holds of the reports, and returns them by volume.
func tailReports(t *testing.T, c *cluster, what string, cond func(map[wire.VolumeID]wire.VolumeStatus) bool) map[wire.VolumeID]wire.VolumeStatus {
	t.Helper()
	var out map[wire.VolumeID]wire.VolumeStatus
	c.awaitStatus(what, func(s *wire.StatusReply) bool {
		out = map[wire.VolumeID]wire.VolumeStatus{}
		for _, cfg := range s.Configs {
			for _, srv := range s.Servers {
				for _, v := range srv.Volumes {
					if srv.ID == cfg.Tail() && v.Volume == cfg.Volume && v.Epoch == cfg.Epoch {
						out[cfg.Volume] = v
					}
				}
			}
		}
		return len(out) == len(s.Configs) && (cond == nil || cond(out))
	})
	return out
}
