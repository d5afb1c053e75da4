package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/faults"
)

// Kind is one kind of fault the nemesis injects.
type Kind string

// The kinds of fault. Partitions cut hosts off from each other, never
// from the harness: its clients reach every host throughout, as a
// client beside any server would.
const (
	// KillServer: kill -9 a server, restart it when the fault ends.
	KillServer Kind = "kill-server"
	// KillMasterLeader and KillMasterFollower: kill -9 the master leader
	// or another member, restart it when the fault ends.
	KillMasterLeader   Kind = "kill-master-leader"
	KillMasterFollower Kind = "kill-master-follower"
	// PauseServer and PauseMasterLeader: SIGSTOP, and SIGCONT when the
	// fault ends; every pause is longer than the lease.
	PauseServer       Kind = "pause-server"
	PauseMasterLeader Kind = "pause-master-leader"
	// Isolate cuts one host off from every other host.
	Isolate Kind = "partition-isolate"
	// Split cuts the hosts into a majority and a minority.
	Split Kind = "partition-split"
	// Bridge cuts the hosts into two halves that both still reach one
	// host, the bridge, but not each other.
	Bridge Kind = "partition-bridge"
	// OneWay loses the messages in one direction between a host and its
	// peers (all other hosts, or the masters), or between two servers
	// that are neighbours in a chain, while the other direction works.
	OneWay Kind = "partition-one-way"
	// ClockSkew makes a process's protocol clock jump by more than the
	// lease guard and the failure timeout (1–5 s), in the direction leases
	// tolerate: a server's forward (its lease ends early), a master
	// member's back (it waits longer before it removes anyone). The jump
	// is not undone: that would be a jump the other way.
	ClockSkew Kind = "clock-skew"
	// ClockRate makes a process's clock run fast or slow (2–4 times, or a
	// quarter to half, as fast as real time), again in the direction
	// leases tolerate: a server's fast, a master member's slow; real
	// speed again when the fault ends.
	ClockRate Kind = "clock-rate"
	// ClockSkewUnsafe and ClockRateUnsafe are the same faults in the
	// other direction (a server's clock jumps back or runs slow, a
	// master's jumps forward or runs fast), undone when the fault ends:
	// outside the drift bound leases assume (docs/adr/0002), so they may
	// break linearizability. They are in no group: a run names them to
	// show what the checkers catch.
	ClockSkewUnsafe Kind = "clock-skew-unsafe"
	ClockRateUnsafe Kind = "clock-rate-unsafe"
	// DiskFull and DiskSyncError fail a process's Pebble writes: every
	// write with ENOSPC (after writing half its bytes), or every fsync
	// with EIO. The process stops at its first failed commit and is
	// restarted, with the fault cleared, when the fault ends.
	DiskFull      Kind = "disk-full"
	DiskSyncError Kind = "disk-fsync-error"
	// SiteCrash and SitePartition, in a run of several sites: kill -9
	// every process of one site (restarted when the fault ends), or cut
	// every host of one site off from every host of the others, as a
	// WAN outage would (the site's own hosts still reach each other).
	// The other kinds hit one site's processes and hosts.
	SiteCrash     Kind = "site-crash"
	SitePartition Kind = "site-partition"
)

// Kinds lists every kind, in the order the summary prints them.
var Kinds = []Kind{KillServer, KillMasterLeader, KillMasterFollower, PauseServer, PauseMasterLeader, Isolate, Split, Bridge, OneWay,
	ClockSkew, ClockRate, DiskFull, DiskSyncError, SiteCrash, SitePartition, ClockSkewUnsafe, ClockRateUnsafe}

// AllKinds is the group all: every kind but the unsafe clock faults (and
// in a run of one site, ParseKinds leaves the site kinds out).
var AllKinds = []Kind{KillServer, KillMasterLeader, KillMasterFollower, PauseServer, PauseMasterLeader, Isolate, Split, Bridge, OneWay,
	ClockSkew, ClockRate, DiskFull, DiskSyncError, SiteCrash, SitePartition}

// kindGroups are the names -nemesis accepts besides single kinds.
var kindGroups = map[string][]Kind{
	"all":       AllKinds,
	"kill":      {KillServer, KillMasterLeader, KillMasterFollower},
	"pause":     {PauseServer, PauseMasterLeader},
	"partition": {Isolate, Split, Bridge, OneWay},
	"clock":     {ClockSkew, ClockRate},
	"disk":      {DiskFull, DiskSyncError},
	"site":      {SiteCrash, SitePartition},
	"none":      {},
}

// injectsFaults reports whether kinds need the processes' control files
// (faults.EnvVar): a clock or disk fault.
func injectsFaults(kinds []Kind) bool {
	for _, k := range kinds {
		switch k {
		case ClockSkew, ClockRate, ClockSkewUnsafe, ClockRateUnsafe, DiskFull, DiskSyncError:
			return true
		}
	}
	return false
}

// ParseKinds parses a comma-separated list of kinds and groups (all,
// kill, pause, partition, clock, disk, site, none). With a single master,
// the follower kind is left out; in a run of one site, the site kinds.
func ParseKinds(list string, masters, sites int) ([]Kind, error) {
	var kinds []Kind
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if g, ok := kindGroups[name]; ok {
			kinds = append(kinds, g...)
			continue
		}
		if !slices.Contains(Kinds, Kind(name)) {
			var names []string
			for _, k := range Kinds {
				names = append(names, string(k))
			}
			return nil, fmt.Errorf("unknown nemesis %q: want a comma-separated list of all, none, kill, pause, partition, clock, disk, site or %s", name, strings.Join(names, ", "))
		}
		kinds = append(kinds, Kind(name))
	}
	var out []Kind
	for _, k := range Kinds {
		if slices.Contains(kinds, k) && !(k == KillMasterFollower && masters == 1) && !((k == SiteCrash || k == SitePartition) && sites == 1) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Timing of the nemesis. A fault lasts long enough to be noticed: every
// pause is longer than the lease (600 ms by default), every partition
// longer than the failure timeout (1 s).
var (
	gapRange       = [2]time.Duration{2 * time.Second, 6 * time.Second}
	killRange      = [2]time.Duration{time.Second, 8 * time.Second}
	pauseRange     = [2]time.Duration{time.Second, 6 * time.Second}
	partitionRange = [2]time.Duration{2 * time.Second, 10 * time.Second}
	// A clock jumps by more than the lease guard (612 ms by default) and
	// the failure timeout; a skew fault then lasts long enough for a
	// master whose clock jumped back to stall (its timers wait out the
	// jump). A rate is far outside the drift bound (1%).
	jumpRange      = [2]time.Duration{time.Second, 5 * time.Second}
	skewRange      = [2]time.Duration{2 * time.Second, 8 * time.Second}
	fastRange      = [2]float64{2, 4}
	slowRange      = [2]float64{0.25, 0.5}
	clockRateRange = [2]time.Duration{2 * time.Second, 10 * time.Second}
	diskRange      = [2]time.Duration{2 * time.Second, 10 * time.Second}
	// diskClearWait is how long after clearing a disk fault the harness
	// still expects the process to exit: it reads its control file every
	// faults.PollInterval, and a commit that failed just before may end
	// it a little later.
	diskClearWait = time.Second
)

// Step is one fault of the plan.
type Step struct {
	// Gap is the quiet time before the fault, Duration how long it lasts.
	Gap, Duration time.Duration
	Kind          Kind
	// Pick chooses among the candidates when the fault starts (which
	// server, which follower, which two chain neighbours), and its bits
	// draw a clock fault's size (Step.fraction); Order is a permutation
	// of the site's hosts that partitions draw their sides from; Variant
	// picks a one-way fault's direction and peers.
	Pick    uint64
	Order   []int
	Variant int
	// Site is the index of the site the fault hits (0 in a run of one
	// site).
	Site int
}

// Plan draws a run's faults from its seed: one after another, each after
// a quiet gap, until total is used up; hosts is the hosts of one site.
// The seed fixes the plan (a run of one site draws the plans it drew
// before sites were added); which process a "leader" fault hits depends
// on the cluster at the time.
func Plan(seed uint64, kinds []Kind, hosts, sites int, total time.Duration) []Step {
	if len(kinds) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x746f7274757265)) // "torture"
	between := func(r [2]time.Duration) time.Duration {
		return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])))
	}
	var plan []Step
	for used := time.Duration(0); ; {
		s := Step{Gap: between(gapRange), Kind: kinds[rng.IntN(len(kinds))], Pick: rng.Uint64(), Order: rng.Perm(hosts), Variant: rng.IntN(6)}
		if sites > 1 {
			s.Site = rng.IntN(sites)
		}
		switch s.Kind {
		case KillServer, KillMasterLeader, KillMasterFollower:
			s.Duration = between(killRange)
		case PauseServer, PauseMasterLeader:
			s.Duration = between(pauseRange)
		case ClockSkew, ClockSkewUnsafe:
			s.Duration = between(skewRange)
		case ClockRate, ClockRateUnsafe:
			s.Duration = between(clockRateRange)
		case DiskFull, DiskSyncError:
			s.Duration = between(diskRange)
		case SiteCrash:
			s.Duration = between(killRange)
		default:
			s.Duration = between(partitionRange)
		}
		if used+s.Gap+s.Duration > total {
			return plan
		}
		used += s.Gap + s.Duration
		plan = append(plan, s)
	}
}

// fraction returns a number in [0, 1) drawn from s.Pick's bits, mixed
// (splitmix64's finalizer) so that it does not follow Pick modulo the
// candidates: a clock fault's size, without a draw of its own that would
// change the plans seeds already make.
func (s Step) fraction() float64 {
	z := s.Pick
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// jump returns a clock skew step's jump, to the millisecond.
func (s Step) jump() time.Duration {
	return (jumpRange[0] + time.Duration(s.fraction()*float64(jumpRange[1]-jumpRange[0]))).Round(time.Millisecond)
}

// rate returns a clock rate step's rate, fast or slow as asked, to two
// decimals.
func (s Step) rate(fast bool) float64 {
	r := slowRange
	if fast {
		r = fastRange
	}
	return math.Round((r[0]+s.fraction()*(r[1]-r[0]))*100) / 100
}

// eventLog writes the nemesis's events, with the time since the run
// started and the wall-clock time, to the nemesis log and the progress
// output.
type eventLog struct {
	mu     sync.Mutex
	start  time.Time
	file   io.Writer
	out    io.Writer
	counts map[Kind]int
	events int
	// windows are the faults injected, with when they began and ended.
	windows []faultWindow
}

func (l *eventLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	line := fmt.Sprintf("%9s  %s  %s\n", now.Sub(l.start).Round(time.Millisecond), now.Format("15:04:05.000"), fmt.Sprintf(format, args...))
	io.WriteString(l.file, line)
	io.WriteString(l.out, "nemesis "+line)
}

func (l *eventLog) count(k Kind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[k]++
	l.events++
}

// window records when a fault of kind k at the site of index site began
// and ended.
func (l *eventLog) window(k Kind, site int, start, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, faultWindow{kind: k, site: site, start: start.Sub(l.start), end: end.Sub(l.start)})
}

// Windows returns the faults injected, in order.
func (l *eventLog) Windows() []faultWindow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.windows)
}

// Events returns how many faults were injected, in all and per kind.
func (l *eventLog) Events() (int, map[Kind]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := map[Kind]int{}
	for k, n := range l.counts {
		counts[k] = n
	}
	return l.events, counts
}

// nemesis injects a plan's faults into the clusters of a run's sites
// (one in a run of one site), on their shared network.
type nemesis struct {
	sites []*Cluster
	log   *eventLog
	// turn, if set, is held from a fault's start to its end; the upgrade
	// nemesis holds it during a step, so the two take turns.
	turn *sync.Mutex
	// current describes the fault in force ("" for none), for progress
	// lines.
	mu      sync.Mutex
	current string
}

func (n *nemesis) setCurrent(s string) {
	n.mu.Lock()
	n.current = s
	n.mu.Unlock()
}

// Current describes the fault in force, or "none".
func (n *nemesis) Current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.current == "" {
		return "none"
	}
	return n.current
}

// run injects the plan's faults until it is done or ctx ends; a fault in
// force when ctx ends is healed at once.
func (n *nemesis) run(ctx context.Context, plan []Step) {
	for _, s := range plan {
		if !sleep(ctx, s.Gap) {
			return
		}
		n.fault(ctx, s)
	}
}

// fault injects s's fault, waits for its duration (or until ctx ends),
// and heals it, holding n.turn throughout.
func (n *nemesis) fault(ctx context.Context, s Step) {
	if n.turn != nil {
		n.turn.Lock()
		defer n.turn.Unlock()
	}
	what, heal := n.inject(ctx, s)
	if heal == nil {
		n.log.printf("skip %s: %s", s.Kind, what)
		return
	}
	n.log.count(s.Kind)
	began := time.Now()
	n.log.printf("start %s: %s (for %s)", s.Kind, what, s.Duration.Round(time.Millisecond))
	n.setCurrent(string(s.Kind) + " " + what)
	sleep(ctx, s.Duration)
	if err := heal(); err != nil {
		n.log.printf("end %s: %s: healing failed: %v", s.Kind, what, err)
	} else {
		n.log.printf("end %s: %s", s.Kind, what)
	}
	n.log.window(s.Kind, s.Site, began, time.Now())
	n.setCurrent("")
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// leader returns c's master leader's process, or nil.
func leader(ctx context.Context, c *Cluster) *Process {
	if len(c.Masters) == 1 {
		return c.Masters[0]
	}
	s, err := c.Status(ctx)
	if err != nil || s.Leader == "" {
		return nil
	}
	return c.Process(s.Leader)
}

// inject starts step s's fault and returns what it did and how to end
// it; a nil heal means the fault could not be injected (what says why).
func (n *nemesis) inject(ctx context.Context, s Step) (what string, heal func() error) {
	c := n.sites[s.Site]
	describe := func(p *Process) string { return fmt.Sprintf("%s (%s, pid %d)", p.Name, p.Addr, p.Pid()) }
	kill := func(p *Process) (string, func() error) {
		what := describe(p)
		c.Kill(p)
		return what, func() error { return c.Start(p) }
	}
	pause := func(p *Process) (string, func() error) {
		what := describe(p)
		c.Pause(p)
		return what, func() error { c.Resume(p); return nil }
	}
	switch s.Kind {
	case KillServer:
		return kill(c.Servers[s.Pick%uint64(len(c.Servers))])
	case PauseServer:
		return pause(c.Servers[s.Pick%uint64(len(c.Servers))])
	case KillMasterLeader, PauseMasterLeader:
		l := leader(ctx, c)
		if l == nil {
			return "no master leader", nil
		}
		if s.Kind == KillMasterLeader {
			return kill(l)
		}
		return pause(l)
	case KillMasterFollower:
		l := leader(ctx, c)
		if l == nil {
			return "no master leader", nil
		}
		var followers []*Process
		for _, p := range c.Masters {
			if p != l {
				followers = append(followers, p)
			}
		}
		return kill(followers[s.Pick%uint64(len(followers))])
	case ClockSkew, ClockSkewUnsafe, ClockRate, ClockRateUnsafe, DiskFull, DiskSyncError:
		return n.injectFault(c, s, describe)
	case SiteCrash:
		what := fmt.Sprintf("site %d (%s)", c.Site, names(c.Hosts))
		for _, p := range c.All() {
			c.Kill(p)
		}
		return what, func() error {
			var errs []error
			for _, p := range c.All() {
				errs = append(errs, c.Start(p))
			}
			return errors.Join(errs...)
		}
	}
	var desc string
	var rules []Rule
	switch {
	case s.Kind == SitePartition:
		desc, rules = sitePartition(c, n.sites)
	case s.Kind == OneWay && s.Variant%3 == 2:
		desc, rules = partition(c, s, chainLink(ctx, c, s.Pick))
	default:
		desc, rules = partition(c, s, [2]*Host{})
	}
	if err := c.Net.Apply(rules); err != nil {
		c.Net.Heal()
		return fmt.Sprintf("%s: %v", desc, err), nil
	}
	return desc, c.Net.Heal
}

// chainLink returns the hosts of two servers of c that are neighbours in
// a chain, predecessor first, as the master's status shows the chains
// now (pick chooses among the links); none if the status cannot be had.
func chainLink(ctx context.Context, c *Cluster, pick uint64) [2]*Host {
	st, err := c.Status(ctx)
	if err != nil {
		return [2]*Host{}
	}
	var links [][2]*Host
	for _, v := range st.Volumes {
		for i := 0; i+1 < len(v.Chain); i++ {
			a, b := c.Process(v.Chain[i]), c.Process(v.Chain[i+1])
			if a != nil && b != nil && !a.Master && !b.Master {
				links = append(links, [2]*Host{a.Host, b.Host})
			}
		}
	}
	if len(links) == 0 {
		return [2]*Host{}
	}
	return links[pick%uint64(len(links))]
}

// injectFault starts a clock or disk fault through the victim's control
// file (faults.EnvVar): any process, but a disk fault only a server or a
// member of a replicated master (a single master keeps its state without
// Pebble).
func (n *nemesis) injectFault(c *Cluster, s Step, describe func(*Process) string) (string, func() error) {
	victims := c.All()
	if (s.Kind == DiskFull || s.Kind == DiskSyncError) && len(c.Masters) == 1 {
		victims = c.Servers
	}
	p := victims[s.Pick%uint64(len(victims))]
	f := p.Faults()
	failed := func(what string, err error) (string, func() error) { return fmt.Sprintf("%s: %v", what, err), nil }
	// The direction leases tolerate: a server's clock ahead or fast, a
	// master's behind or slow (docs/adr/0002); the unsafe kinds go the
	// other way.
	safe := s.Kind == ClockSkew || s.Kind == ClockRate
	ahead := !p.Master
	if !safe {
		ahead = !ahead
	}
	switch s.Kind {
	case ClockSkew, ClockSkewUnsafe:
		jump, dir := s.jump(), "forward"
		if !ahead {
			jump, dir = -jump, "back"
		}
		f.ClockOffset += jump
		what := fmt.Sprintf("%s's clock jumps %s by %s (now %s off)", describe(p), dir, s.jump(), f.ClockOffset)
		if err := c.SetFaults(p, f); err != nil {
			return failed(what, err)
		}
		if safe {
			return what + "; not undone", func() error { return nil }
		}
		return what, func() error {
			f := p.Faults()
			f.ClockOffset -= jump
			return c.SetFaults(p, f)
		}
	case ClockRate, ClockRateUnsafe:
		f.ClockRate = s.rate(ahead)
		what := fmt.Sprintf("%s's clock runs at %g× real time", describe(p), f.ClockRate)
		if err := c.SetFaults(p, f); err != nil {
			return failed(what, err)
		}
		return what, func() error {
			f := p.Faults()
			f.ClockRate = 0
			return c.SetFaults(p, f)
		}
	}
	f.Disk = faults.DiskFull
	what := fmt.Sprintf("%s's disk is full (writes fail with ENOSPC)", describe(p))
	if s.Kind == DiskSyncError {
		f.Disk = faults.DiskSyncError
		what = fmt.Sprintf("%s's fsyncs fail (EIO)", describe(p))
	}
	if err := c.SetFaults(p, f); err != nil {
		return failed(what, err)
	}
	began := time.Now()
	return what, func() error {
		f := p.Faults()
		f.Disk = faults.DiskOK
		err := c.SetFaults(p, f)
		time.Sleep(diskClearWait)
		exited, status, startErr := c.DiskFaultEnded(p)
		if !exited.IsZero() {
			n.log.printf("%s had exited %s into the disk fault (%s); restarted", p.Name, exited.Sub(began).Round(time.Millisecond), status)
		}
		return errors.Join(err, startErr)
	}
}

// sitePartition returns the rules that cut site c off from every other
// site of sites, and a description.
func sitePartition(c *Cluster, sites []*Cluster) (string, []Rule) {
	var others []*Host
	for _, o := range sites {
		if o != c {
			others = append(others, o.Hosts...)
		}
	}
	return fmt.Sprintf("site %d %s cut off from the other sites", c.Site, names(c.Hosts)), cutBetween(c.Hosts, others)
}

// cutBetween returns the rules that cut every host of a off from every
// host of b, both ways.
func cutBetween(a, b []*Host) []Rule {
	var rules []Rule
	for _, x := range a {
		for _, y := range b {
			rules = append(rules, Cut(x, y)...)
		}
	}
	return rules
}

// partition returns the rules of a partition step and a description. A
// one-way fault between two servers (Variant%3 == 2) cuts link, two
// chain neighbours (chainLink), or else the first two servers of the
// step's order.
func partition(c *Cluster, s Step, link [2]*Host) (string, []Rule) {
	hosts := c.Hosts
	ordered := make([]*Host, len(s.Order))
	for i, j := range s.Order {
		ordered[i] = hosts[j]
	}
	switch s.Kind {
	case Isolate:
		return fmt.Sprintf("%s cut off from every other host", ordered[0].Name), cutBetween(ordered[:1], ordered[1:])
	case Split:
		minority := 1 + int(s.Pick%uint64((len(ordered)-1)/2))
		a, b := ordered[:minority], ordered[minority:]
		return fmt.Sprintf("%s | %s", names(a), names(b)), cutBetween(a, b)
	case Bridge:
		half := (len(ordered) - 1) / 2
		a, b := ordered[1:1+half], ordered[1+half:]
		return fmt.Sprintf("%s | %s, both reach %s", names(a), names(b), ordered[0].Name), cutBetween(a, b)
	}
	// OneWay: the host, its peers, and which way messages are lost.
	x := ordered[0]
	var peers []*Host
	switch s.Variant % 3 {
	case 0:
		peers = ordered[1:]
	case 1:
		for _, p := range c.Masters {
			if p.Host != x {
				peers = append(peers, p.Host)
			}
		}
	case 2:
		// Two servers, every master link working: the chain's own
		// failure detection (the predecessor reports the link stalled,
		// master/links.go) is all that can notice.
		if link[0] == nil {
			var servers []*Host
			for _, h := range ordered {
				if slices.ContainsFunc(c.Servers, func(p *Process) bool { return p.Host == h }) {
					servers = append(servers, h)
				}
			}
			if len(servers) < 2 {
				servers = ordered[:2] // a cluster of one server
			}
			link = [2]*Host{servers[0], servers[1]}
		}
		x, peers = link[0], link[1:]
	}
	var rules []Rule
	for _, p := range peers {
		if s.Variant/3 == 0 {
			rules = append(rules, Lose(p, x)...)
		} else {
			rules = append(rules, Lose(x, p)...)
		}
	}
	if s.Variant/3 == 0 {
		return fmt.Sprintf("%s hears nothing from %s (its own messages arrive)", x.Name, names(peers)), rules
	}
	return fmt.Sprintf("%s's messages to %s are lost (it hears them)", x.Name, names(peers)), rules
}

func names(hosts []*Host) string {
	var s []string
	for _, h := range hosts {
		s = append(s, h.Name)
	}
	return "[" + strings.Join(s, " ") + "]"
}
