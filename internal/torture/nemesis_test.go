package torture

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/faults"
)

func TestParseKinds(t *testing.T) {
	oneSite := slices.DeleteFunc(slices.Clone(AllKinds), func(k Kind) bool { return k == SiteCrash || k == SitePartition })
	for _, tc := range []struct {
		list           string
		masters, sites int
		want           []Kind
	}{
		{"all", 3, 1, oneSite},
		{"all", 3, 3, AllKinds},
		{"none", 3, 1, nil},
		{"kill", 3, 1, []Kind{KillServer, KillMasterLeader, KillMasterFollower}},
		{"kill", 1, 1, []Kind{KillServer, KillMasterLeader}},
		{"partition-one-way, pause-server,kill-server", 3, 1, []Kind{KillServer, PauseServer, OneWay}},
		{"partition,partition-split", 3, 1, []Kind{Isolate, Split, Bridge, OneWay}},
		{"clock", 3, 1, []Kind{ClockSkew, ClockRate}},
		{"disk,kill-server", 3, 1, []Kind{KillServer, DiskFull, DiskSyncError}},
		{"clock-rate-unsafe,clock-skew-unsafe", 3, 1, []Kind{ClockSkewUnsafe, ClockRateUnsafe}},
		{"site", 3, 1, nil},
		{"site,kill-server", 3, 2, []Kind{KillServer, SiteCrash, SitePartition}},
	} {
		got, err := ParseKinds(tc.list, tc.masters, tc.sites)
		if err != nil || !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
			t.Errorf("ParseKinds(%q, %d, %d) = %v, %v; want %v", tc.list, tc.masters, tc.sites, got, err, tc.want)
		}
	}
	if _, err := ParseKinds("kill,flood", 3, 1); err == nil || !strings.Contains(err.Error(), `"flood"`) {
		t.Errorf("an unknown kind: err = %v", err)
	}
	// all: every kind but the unsafe clock faults, which break the
	// assumption leases rest on.
	for _, k := range Kinds {
		unsafe := k == ClockSkewUnsafe || k == ClockRateUnsafe
		if slices.Contains(AllKinds, k) == unsafe {
			t.Errorf("all contains %s: %v", k, !unsafe)
		}
	}
}

// The seed fixes the plan; the plan fits the duration; every fault lasts
// longer than the lease (600 ms) and, for partitions, the failure
// timeout (1 s); a long plan uses every kind.
func TestPlan(t *testing.T) {
	a := Plan(7, AllKinds, 8, 1, 30*time.Minute)
	if !reflect.DeepEqual(a, Plan(7, AllKinds, 8, 1, 30*time.Minute)) {
		t.Fatal("the same seed made two plans")
	}
	if reflect.DeepEqual(a, Plan(8, AllKinds, 8, 1, 30*time.Minute)) {
		t.Fatal("seeds 7 and 8 made the same plan")
	}
	var total time.Duration
	used := map[Kind]bool{}
	for _, s := range a {
		total += s.Gap + s.Duration
		used[s.Kind] = true
		if s.Duration <= time.Second || s.Gap < gapRange[0] {
			t.Errorf("step %+v: too short", s)
		}
		if len(s.Order) != 8 {
			t.Errorf("step %+v: order of %d hosts", s, len(s.Order))
		}
	}
	if total > 30*time.Minute {
		t.Errorf("plan takes %s, longer than 30m", total)
	}
	if len(used) != len(AllKinds) {
		t.Errorf("a 30-minute plan used only %v", used)
	}
	if n := len(Plan(1, AllKinds, 8, 1, 2*time.Minute)); n < 5 {
		t.Errorf("a 2-minute plan has %d faults", n)
	}
	if p := Plan(1, nil, 8, 1, time.Hour); p != nil {
		t.Errorf("no kinds: plan %v", p)
	}
	if p := Plan(1, AllKinds, 8, 1, time.Second); p != nil {
		t.Errorf("a plan longer than its duration: %v", p)
	}
	// With several sites, every step names one, and a long plan hits
	// every site.
	sites := map[int]bool{}
	for _, s := range Plan(7, AllKinds, 6, 3, 30*time.Minute) {
		if s.Site < 0 || s.Site >= 3 || len(s.Order) != 6 {
			t.Fatalf("step %+v of a plan of 3 sites of 6 hosts", s)
		}
		sites[s.Site] = true
	}
	if len(sites) != 3 {
		t.Errorf("a 30-minute plan of 3 sites hit only sites %v", sites)
	}
}

// Clock and disk faults: their durations are in their ranges, and their
// sizes are drawn from the plan (the seed), in their ranges, not all alike.
func TestPlanClockAndDisk(t *testing.T) {
	kinds := []Kind{ClockSkew, ClockRate, DiskFull, DiskSyncError, ClockSkewUnsafe, ClockRateUnsafe}
	plan := Plan(3, kinds, 8, 1, time.Hour)
	jumps, rates := map[time.Duration]bool{}, map[float64]bool{}
	for _, s := range plan {
		r := diskRange
		switch s.Kind {
		case ClockSkew, ClockSkewUnsafe:
			r = skewRange
			j := s.jump()
			if j < jumpRange[0] || j > jumpRange[1] || j%time.Millisecond != 0 {
				t.Errorf("step %+v: jump %s", s, j)
			}
			jumps[j] = true
		case ClockRate, ClockRateUnsafe:
			r = clockRateRange
			fast, slow := s.rate(true), s.rate(false)
			if fast < fastRange[0] || fast > fastRange[1] || slow < slowRange[0] || slow > slowRange[1] {
				t.Errorf("step %+v: rates %g and %g", s, fast, slow)
			}
			rates[fast] = true
		}
		if s.Duration < r[0] || s.Duration >= r[1] {
			t.Errorf("step %+v: duration outside %v", s, r)
		}
	}
	if len(jumps) < 10 || len(rates) < 10 {
		t.Errorf("an hour's plan drew %d jumps and %d rates", len(jumps), len(rates))
	}
	// Adding clock and disk faults drew nothing more per step: a seed
	// makes the plan it made before for the older kinds.
	old := []Kind{KillServer, Isolate, OneWay}
	a, b := Plan(5, old, 8, 1, 10*time.Minute), Plan(5, old, 8, 1, 10*time.Minute)
	if !reflect.DeepEqual(a, b) || a[0].Kind != OneWay || a[0].Duration != 7113895284 {
		t.Errorf("the plan of seed 5 changed: first step %+v", a[0])
	}
}

// testCluster is a cluster of 3 masters and 5 servers that exists only on
// paper: enough for partition's rules.
func testCluster(t *testing.T) *Cluster {
	n, err := NewNet("ctort", "10.1.2", []string{"m1", "m2", "m3", "s1", "s2", "s3", "s4", "s5"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Net: n, Hosts: n.Hosts}
	for _, h := range n.Hosts[:3] {
		c.Masters = append(c.Masters, &Process{Name: h.Name, Master: true, Host: h})
	}
	for _, h := range n.Hosts[3:] {
		c.Servers = append(c.Servers, &Process{Name: h.Name, Host: h})
	}
	return c
}

// cuts returns, for rules made of Cut, the unordered pairs they cut.
func cuts(t *testing.T, rules []Rule) map[[2]string]bool {
	t.Helper()
	pairs := map[[2]string]int{}
	for _, r := range rules {
		if len(r.Args) != 4 || r.Args[0] != "-s" || r.Args[3] != "DROP" {
			t.Fatalf("not a cut: %v", r)
		}
		pair := [2]string{r.At.IP, r.Args[1]}
		slices.Sort(pair[:])
		pairs[pair]++
	}
	out := map[[2]string]bool{}
	for p, n := range pairs {
		if n != 2 {
			t.Fatalf("pair %v cut one way only", p)
		}
		out[p] = true
	}
	return out
}

// Three sites of one master and two servers: names, addresses and each
// process's flags (its site, every site's masters, the other sites'
// processes as WAN peers).
func TestSites(t *testing.T) {
	o := DefaultOptions
	o.Masters, o.Servers, o.Sites, o.WANRTT = 1, 2, 3, 120*time.Millisecond
	names := hostNames(o.Masters, o.Servers, o.Sites)
	if want := []string{"1m1", "1s1", "1s2", "2m1", "2s1", "2s2", "3m1", "3s1", "3s2"}; !slices.Equal(names, want) {
		t.Fatalf("host names %v, want %v", names, want)
	}
	n, err := NewNet("ctort", "10.1.2", names)
	if err != nil {
		t.Fatal(err)
	}
	sites, err := newSites(n, o, clusterOptions{masters: o.Masters, servers: o.Servers, volumes: 4, replicas: 2, dataDir: "/d", logDir: "/l"})
	if err != nil {
		t.Fatal(err)
	}
	flag := func(args []string, name string) string {
		i := slices.Index(args, name)
		if i < 0 || i+1 == len(args) {
			return ""
		}
		return args[i+1]
	}
	for i, c := range sites {
		if c.Site != i+1 || len(c.Hosts) != 3 || c.Masters[0].Name != fmt.Sprintf("%dm1", i+1) || c.describe() != fmt.Sprintf("site %d", i+1) {
			t.Fatalf("site %d: %+v", i+1, c)
		}
		for _, p := range c.All() {
			if got := flag(p.args, "-site"); got != strconv.Itoa(i+1) {
				t.Errorf("%s: -site %q", p.Name, got)
			}
			if got, want := flag(p.args, "-wan-rtt"), "120ms"; got != want {
				t.Errorf("%s: -wan-rtt %q", p.Name, got)
			}
			peers := strings.Split(flag(p.args, "-wan-peers"), ",")
			if len(peers) != 6 {
				t.Errorf("%s: WAN peers %v, want the 6 processes of the other sites", p.Name, peers)
			}
			for _, q := range c.All() {
				if slices.Contains(peers, q.Addr) {
					t.Errorf("%s: its own site's %s is a WAN peer", p.Name, q.Name)
				}
			}
		}
		if got, want := flag(c.Masters[0].args, "-sites"), "1=site1@10.1.2.11:7100;2=site2@10.1.2.14:7100;3=site3@10.1.2.17:7100"; got != want {
			t.Errorf("site %d's master: -sites %q, want %q", i+1, got, want)
		}
	}
	// One site: no site flags.
	o.Sites = 1
	one, err := newSites(testCluster(t).Net, o, clusterOptions{masters: 3, servers: 5})
	if err == nil {
		t.Fatalf("3 masters and 5 servers of DefaultOptions with 1 master and 2 servers: %v", one)
	}
	o.Masters, o.Servers = 3, 5
	one, err = newSites(testCluster(t).Net, o, clusterOptions{masters: 3, servers: 5})
	if err != nil || len(one) != 1 || one[0].Site != 0 || slices.Contains(one[0].Servers[0].args, "-site") || one[0].describe() != "the cluster" {
		t.Fatalf("one site: %v, %v", one, err)
	}

	// A site partition cuts every host of the site off from every host
	// of the others, and nothing within a site.
	_, rules := sitePartition(sites[1], sites)
	got := cuts(t, rules)
	for _, a := range n.Hosts {
		for _, b := range n.Hosts {
			if a.IP >= b.IP {
				continue
			}
			inSite2 := func(h *Host) bool { return strings.HasPrefix(h.Name, "2") }
			if want := inSite2(a) != inSite2(b); got[[2]string{a.IP, b.IP}] != want {
				t.Errorf("%s–%s cut: %v, want %v", a.Name, b.Name, !want, want)
			}
		}
	}
}

func TestPartitionRules(t *testing.T) {
	c := testCluster(t)
	ip := func(name string) string { return c.Net.Host(name).IP }
	pair := func(a, b string) [2]string {
		p := [2]string{ip(a), ip(b)}
		slices.Sort(p[:])
		return p
	}
	order := []int{3, 0, 4, 1, 5, 2, 6, 7} // s1 m1 s2 m2 s3 m3 s4 s5

	desc, rules := partition(c, Step{Kind: Isolate, Order: order}, [2]*Host{})
	got := cuts(t, rules)
	if len(got) != 7 || !got[pair("s1", "m1")] || !got[pair("s1", "s5")] {
		t.Errorf("isolate %s: cuts %v", desc, got)
	}

	desc, rules = partition(c, Step{Kind: Split, Order: order, Pick: 2}, [2]*Host{}) // minority of 3
	got = cuts(t, rules)
	if len(got) != 3*5 || !got[pair("s1", "m2")] || got[pair("s1", "m1")] || got[pair("m2", "s3")] {
		t.Errorf("split %s: cuts %v", desc, got)
	}

	desc, rules = partition(c, Step{Kind: Bridge, Order: order}, [2]*Host{})
	got = cuts(t, rules)
	for p := range got {
		if p[0] == ip("s1") || p[1] == ip("s1") {
			t.Errorf("bridge %s: the bridge s1 is cut (%v)", desc, p)
		}
	}
	if len(got) != 3*4 || !got[pair("m1", "s3")] || got[pair("m1", "m2")] {
		t.Errorf("bridge %s: cuts %v", desc, got)
	}

	// One way: variant 1 is "s1 hears nothing from the masters": each
	// master's connections to s1 are dropped at s1.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 1}, [2]*Host{})
	if len(rules) != 3 || !strings.Contains(desc, "s1 hears nothing from [m1 m2 m3]") {
		t.Fatalf("one-way %s: %v", desc, rules)
	}
	for _, r := range rules {
		if r.At.Name != "s1" || !slices.Contains(r.Args, "ORIGINAL") {
			t.Errorf("one-way %s: rule %v", desc, r)
		}
	}
	// Variants 2 and 5 are between two servers only: chain neighbours
	// (predecessor first) when the status names them, else the first two
	// servers of the order. Variant 5: the predecessor's messages (its
	// forwards) are lost: the rule is at the successor, against it.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 5}, [2]*Host{})
	if len(rules) != 1 || rules[0].At.Name != "s2" || rules[0].Args[1] != ip("s1") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
	link := [2]*Host{c.Net.Host("s4"), c.Net.Host("s3")}
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 5}, link)
	if len(rules) != 1 || rules[0].At.Name != "s3" || rules[0].Args[1] != ip("s4") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
	// Variant 2: the successor's messages (its acknowledgements) are
	// lost: the rule is at the predecessor, against the successor.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 2}, link)
	if len(rules) != 1 || rules[0].At.Name != "s4" || rules[0].Args[1] != ip("s3") || !strings.Contains(desc, "s4 hears nothing from [s3]") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
}

// Clock and disk faults rewrite the victim's control file: a safe skew
// is not undone, an unsafe one is, a rate goes back to real speed, and a
// disk fault is cleared; the direction of a clock fault depends on the
// victim (a server's ahead or fast, a master's behind or slow, the
// other way for the unsafe kinds). Under a disk fault the victim's exit
// is expected, and it is not restarted before the fault ends.
func TestClockAndDiskFaults(t *testing.T) {
	c := testCluster(t)
	dir := t.TempDir()
	for _, p := range c.All() {
		p.faultsFile = filepath.Join(dir, p.Name)
		p.cmd = &exec.Cmd{Process: &os.Process{Pid: 1}} // running, on paper
	}
	defer func(d time.Duration) { diskClearWait = d }(diskClearWait)
	diskClearWait = 0
	n := &nemesis{sites: []*Cluster{c}, log: &eventLog{file: io.Discard, out: io.Discard, counts: map[Kind]int{}}}
	read := func(p *Process) faults.Faults {
		t.Helper()
		text, err := os.ReadFile(p.faultsFile)
		if err != nil {
			t.Fatal(err)
		}
		f, err := faults.Parse(string(text))
		if err != nil {
			t.Fatal(err)
		}
		if f != p.Faults() {
			t.Fatalf("%s's control file holds %+v, the harness remembers %+v", p.Name, f, p.Faults())
		}
		return f
	}
	// inject starts step s, checks the fault in force with during, heals
	// it and checks what is left with after.
	inject := func(s Step, victim string, during, after func(f faults.Faults) bool) {
		t.Helper()
		var p *Process
		for _, q := range c.All() {
			if q.Name == victim {
				p = q
			}
		}
		what, heal := n.inject(t.Context(), s)
		if heal == nil {
			t.Fatalf("%s: not injected: %s", s.Kind, what)
		}
		if !strings.HasPrefix(what, victim+" ") || !during(read(p)) {
			t.Fatalf("%s (%s): the control file holds %+v", s.Kind, what, read(p))
		}
		if err := heal(); err != nil {
			t.Fatal(err)
		}
		if !after(read(p)) {
			t.Fatalf("%s (%s) healed: the control file holds %+v", s.Kind, what, read(p))
		}
	}
	// Victims are drawn from every process, masters first: Pick 0 is m1,
	// 3 is s1.
	var s1Jump time.Duration
	inject(Step{Kind: ClockSkew, Pick: 3}, "s1",
		func(f faults.Faults) bool { s1Jump = f.ClockOffset; return f.ClockOffset >= jumpRange[0] },
		func(f faults.Faults) bool { return f.ClockOffset == s1Jump })
	inject(Step{Kind: ClockSkew, Pick: 0}, "m1",
		func(f faults.Faults) bool { return f.ClockOffset <= -jumpRange[0] },
		func(f faults.Faults) bool { return f.ClockOffset <= -jumpRange[0] })
	inject(Step{Kind: ClockSkewUnsafe, Pick: 11}, "s1",
		func(f faults.Faults) bool { return f.ClockOffset <= s1Jump-jumpRange[0] },
		func(f faults.Faults) bool { return f.ClockOffset == s1Jump })
	inject(Step{Kind: ClockSkewUnsafe, Pick: 1}, "m2",
		func(f faults.Faults) bool { return f.ClockOffset >= jumpRange[0] },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: ClockRate, Pick: 4}, "s2",
		func(f faults.Faults) bool { return f.ClockRate >= fastRange[0] },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: ClockRate, Pick: 2}, "m3",
		func(f faults.Faults) bool { return f.ClockRate > 0 && f.ClockRate <= slowRange[1] },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: ClockRateUnsafe, Pick: 4}, "s2",
		func(f faults.Faults) bool { return f.ClockRate > 0 && f.ClockRate <= slowRange[1] },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: ClockRateUnsafe, Pick: 2}, "m3",
		func(f faults.Faults) bool { return f.ClockRate >= fastRange[0] },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: DiskSyncError, Pick: 6}, "s4",
		func(f faults.Faults) bool { return f == faults.Faults{Disk: faults.DiskSyncError} },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	inject(Step{Kind: DiskFull, Pick: 1}, "m2",
		func(f faults.Faults) bool { return f == faults.Faults{Disk: faults.DiskFull} },
		func(f faults.Faults) bool { return f == faults.Faults{} })
	if p := c.Servers[3]; p.Down() || p.diskFault {
		t.Fatalf("s4 after its disk fault: down %v, expecting an exit %v", p.Down(), p.diskFault)
	}

	// A process that exits under a disk fault: expected, not restarted.
	s5 := c.Servers[4]
	if _, heal := n.inject(t.Context(), Step{Kind: DiskFull, Pick: 7}); heal == nil || !s5.diskFault {
		t.Fatal("disk fault on s5 not injected")
	}
	c.exited(s5, s5.cmd)
	if !s5.Down() || len(c.UnexpectedExits()) != 0 || s5.diskExit.IsZero() {
		t.Fatalf("s5 exited under its disk fault: down %v, unexpected exits %v, exit %q", s5.Down(), c.UnexpectedExits(), s5.diskExit)
	}

	// With a single master, a disk fault hits only servers.
	c.Masters = c.Masters[:1]
	if what, _ := n.inject(t.Context(), Step{Kind: DiskSyncError, Pick: 0}); !strings.HasPrefix(what, "s1 ") {
		t.Fatalf("single master: the disk fault hit %s", what)
	}
}
