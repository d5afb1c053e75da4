// Package torture is catena torture: a Jepsen-style fault test of the
// real binary. It builds a network of namespaces (one host per process,
// netns.go), runs masters and servers on it (cluster.go; one cluster per
// site, with several), drives clients that record a history
// (workload.go) while a nemesis kills, pauses and partitions processes
// and whole sites on a plan drawn from a seed (nemesis.go), or upgrades
// the cluster from an old binary to the new one process by process, a
// Redis proxy and its clients included (upgrade.go, proxywork.go), heals
// everything, reads every key once more, and checks the history
// (checker.go): linearizability per key with porcupine, no lost,
// duplicated or invented element in the set workload, and causal+ with
// the same final values at every site in the causal one. With backups
// (backup.go), it also takes backups while the faults go on, restores
// the last into a new cluster, and checks what each backup and the new
// cluster hold against the history (backupcheck.go). With splits
// (split.go), it splits the workloads' keyspace while the faults go on,
// and checks that every split finished and that every volume holds
// exactly the keys the final keyspace map routes to it. With watches
// (watch.go), it watches the register, counter and set keys throughout,
// resuming the watches from their positions, and checks that every
// acknowledged update was delivered once, in an order the history
// allows.
package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/causalwork"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/wire"
)

// Options configure a run.
type Options struct {
	// Exe is the catena binary the processes run.
	Exe string
	// PipeEnv names the environment variable that hands each process the
	// harness's pipe (see clusterOptions.pipeEnv).
	PipeEnv string
	// Duration is how long the workload runs under faults.
	Duration time.Duration
	// Seed draws the nemesis plan and the clients' choices.
	Seed uint64
	// Nemesis lists the kinds of fault the plan draws from.
	Nemesis []Kind
	// Out is the directory for the results; "" makes a temporary one
	// that is removed when the verdict is ok.
	Out string
	// Masters, Servers, Volumes and Replicas shape the cluster (each
	// site's, in a run of several).
	Masters, Servers, Volumes, Replicas int
	// Sites is how many sites (whole clusters) the run starts; with more
	// than one, the causal keyspace is replicated by all of them, the
	// nemesis may crash or cut off a whole site, and messages between
	// sites are delayed by WANRTT (± a twelfth) as over a WAN.
	Sites  int
	WANRTT time.Duration
	// Rate is the clients' operations per second, in all.
	Rate float64
	// OpTimeout bounds one operation; an update that times out is
	// maybe-applied.
	OpTimeout time.Duration
	// Prefix names the namespaces and links (a run removes what a
	// crashed run of the same prefix left); Subnet is the hosts' /24.
	Prefix, Subnet string
	// RecoveryTimeout bounds the wait for a healthy cluster after
	// healing, and the final reads.
	RecoveryTimeout time.Duration
	// Progress is the interval between progress lines.
	Progress time.Duration
	// CheckTimeout bounds porcupine's check of one key.
	CheckTimeout time.Duration
	// Stdout receives progress lines, the nemesis's events and the
	// summary.
	Stdout io.Writer
	// Upgrade, if set, starts every process from Upgrade.Old and runs
	// the upgrade nemesis to Exe (beside the faults of Nemesis, if any),
	// with a Redis proxy and its workload; one site only.
	Upgrade *Upgrade
	// Backup takes backups of the (first) site during the fault phase,
	// restores the last into a new cluster at the end, and checks both
	// against the history (backup.go); not with Upgrade.
	Backup bool
	// Split splits the register and set workloads' keyspace (the first
	// site's default keyspace) once or a few times during the fault
	// phase, and checks the splits at the end (split.go); not with
	// Upgrade.
	Split bool
	// Watch watches the register, counter and set keys (of the first
	// site) from before the workloads start to the end, resuming the
	// watches from their positions, and checks what they delivered
	// against the history (watch.go); not with Upgrade.
	Watch bool
}

// DefaultOptions are catena torture's defaults.
var DefaultOptions = Options{
	Duration: 2 * time.Minute, Nemesis: AllKinds,
	Masters: 3, Servers: 5, Volumes: 8, Replicas: 3, Sites: 1, WANRTT: 60 * time.Millisecond,
	Rate: 200, OpTimeout: 3 * time.Second,
	Prefix: "ctort", Subnet: "10.213.0",
	RecoveryTimeout: time.Minute, Progress: 5 * time.Second, CheckTimeout: time.Minute,
}

// Result is a run's outcome.
type Result struct {
	// OK is the verdict; Reason says why not.
	OK     bool
	Reason string
	// Verdicts holds each checker's verdict.
	Verdicts []Verdict
	// Out is the directory that holds the results ("" if removed).
	Out string
}

// startupTimeout bounds the wait for a healthy cluster after starting it.
const startupTimeout = time.Minute

// maxSites bounds Options.Sites.
const maxSites = 5

// Validate reports the first option that cannot make a run.
func (o *Options) Validate() error {
	switch {
	case o.Exe == "" || o.PipeEnv == "" || o.Stdout == nil:
		return errors.New("torture: Exe, PipeEnv and Stdout are required")
	case o.Duration <= 0:
		return errors.New("-duration must be positive")
	case o.Masters != 1 && o.Masters != 3 && o.Masters != 5:
		return errors.New("-masters must be 1, 3 or 5")
	case o.Servers < 1 || o.Servers > 20:
		return errors.New("-servers must be 1 to 20")
	case o.Replicas < 1 || o.Replicas > o.Servers:
		return errors.New("-replicas must be 1 to the number of servers")
	case o.Volumes < 1:
		return errors.New("-volumes must be positive")
	case o.Sites < 1 || o.Sites > maxSites:
		return fmt.Errorf("-sites must be 1 to %d", maxSites)
	case o.WANRTT < 0:
		return errors.New("-wan-rtt must not be negative")
	case o.Rate <= 0 || o.OpTimeout <= 0 || o.RecoveryTimeout <= 0 || o.Progress <= 0 || o.CheckTimeout <= 0:
		return errors.New("-rate and the timeouts must be positive")
	}
	return o.validateUpgrade()
}

// validateUpgrade reports what keeps o.Upgrade from making a run: a run
// of one site, from an old binary other than the new one.
func (o *Options) validateUpgrade() error {
	u := o.Upgrade
	switch {
	case u == nil:
		return nil
	case u.Old == "":
		return errors.New("torture: Upgrade.Old is required")
	case o.Sites != 1:
		return errors.New("-upgrade-from: the upgrade nemesis runs one site (-sites 1)")
	case u.Downgrade && u.NoFinalize:
		return errors.New("-no-finalize: a downgrade does not finalize anyway")
	case o.Backup:
		return errors.New("-backup: not with -upgrade-from (the old binary may not serve the exports a backup reads)")
	case o.Split:
		return errors.New("-split: not with -upgrade-from (a cluster splits only once its upgrade is finalized)")
	case o.Watch:
		return errors.New("-watch: not with -upgrade-from (the old binary may not serve watches)")
	}
	old, err := os.Stat(u.Old)
	if err != nil {
		return fmt.Errorf("-upgrade-from: %w", err)
	}
	// o.Exe may not be found yet (catena-lab looks for it once the
	// options are valid); Run validates again.
	if exe, err := os.Stat(o.Exe); err == nil && os.SameFile(old, exe) {
		return fmt.Errorf("-upgrade-from %s is the new binary itself: build the old one apart (catena-lab build-release)", u.Old)
	}
	return nil
}

// Run runs the test and returns its verdict. The error is for a run
// that could not be made (environment, interruption); a run that found
// a problem returns a Result that is not OK. Whatever happens, the
// processes are stopped and the network removed before Run returns.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := CheckEnvironment(o.Prefix); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, o.Prefix, o.Stdout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if removed, err := RemoveLeftovers(o.Prefix); err != nil {
		return nil, fmt.Errorf("removing what an earlier run left: %w", err)
	} else if len(removed) > 0 {
		fmt.Fprintf(o.Stdout, "removed what an earlier run left: %s\n", strings.Join(removed, ", "))
	}

	tempOut := o.Out == ""
	if tempOut {
		if o.Out, err = os.MkdirTemp("", "catena-torture-"); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				os.RemoveAll(o.Out)
			}
		}()
	}
	logDir, dataDir, err := makeOutDirs(o.Out)
	if err != nil {
		return nil, err
	}
	nemesisFile, err := os.Create(filepath.Join(o.Out, "nemesis.log"))
	if err != nil {
		return nil, err
	}
	defer nemesisFile.Close()

	names := runHostNames(o)
	netw, err := NewNet(o.Prefix, o.Subnet, names)
	if err != nil {
		return nil, err
	}
	announce(o, len(names))
	if err := netw.Create(); err != nil {
		return nil, err
	}
	defer netw.Remove()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	goSafe := safeGo(cancel)
	faultsDir, err := makeFaultsDir(o)
	if err != nil {
		return nil, err
	}
	sites, err := newSites(netw, o, clusterOptions{exe: startExe(o), masters: o.Masters, servers: o.Servers, volumes: o.Volumes,
		replicas: o.Replicas, dataDir: dataDir, logDir: logDir, pipeEnv: o.PipeEnv, faultsDir: faultsDir})
	if err != nil {
		return nil, err
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			for _, c := range sites {
				c.StopAll()
			}
		})
	}
	defer stop()
	r := &run{o: o, sites: sites, begin: begin, log: &eventLog{file: nemesisFile, out: o.Stdout, counts: map[Kind]int{}}}
	defer func() {
		// A run that ends early stops its backup in progress before its
		// results may be removed.
		if r.bk != nil {
			r.bk.cancel()
			<-r.bk.done
		}
		if r.sp != nil {
			r.sp.cancel()
			<-r.sp.done
		}
		if r.wt != nil {
			r.wt.stop()
		}
	}()
	failed, err := r.start(ctx)
	if err != nil {
		return nil, err
	}
	if failed != nil {
		if ctx.Err() != nil {
			return nil, interrupted(ctx)
		}
		r.verdicts = append(r.verdicts, *failed)
		stop()
		return r.finish(tempOut, nil)
	}
	if err := r.faultPhase(ctx, goSafe); err != nil {
		return nil, err
	}

	// Heal, wait for recovery, read every key.
	healed, err := r.heal(netw)
	if err != nil {
		return nil, err
	}
	// The final reads come after the last split finished, so they read
	// every key from the volume the final keyspace map routes it to.
	// They have the whole recovery timeout after that.
	var splits []splitRecord
	var splitFrom client.Keyspace
	var splitsUnfinished string
	recoveryDeadline := healed.Add(o.RecoveryTimeout)
	if r.sp != nil {
		splits, splitFrom, splitsUnfinished = r.sp.wait(recoveryDeadline)
		recoveryDeadline = time.Now().Add(o.RecoveryTimeout)
	}
	recovery, err := r.recoveryVerdict(ctx, healed, recoveryDeadline)
	if err != nil {
		return nil, err
	}
	r.verdicts = append(r.verdicts, recovery)
	if r.sp != nil {
		split, err := r.splitVerdict(ctx, splits, splitFrom, splitsUnfinished)
		if err != nil {
			return nil, err
		}
		r.verdicts = append(r.verdicts, split)
	}
	if r.wt != nil {
		// The final reads are done: the watches have until the recovery
		// timeout to deliver every key's last update.
		watch, err := r.watchVerdict(ctx, time.Now().Add(o.RecoveryTimeout))
		if err != nil {
			return nil, err
		}
		r.verdicts = append(r.verdicts, watch)
	}
	causal, err := r.causalVerdict(ctx)
	if err != nil {
		return nil, err
	}
	r.verdicts = append(r.verdicts, causal)
	if r.up != nil {
		r.verdicts = append(r.verdicts, r.up.verdict())
	}
	if r.pw != nil {
		r.verdicts = append(r.verdicts, r.proxyVerdict(ctx, healed))
		if ctx.Err() != nil {
			return nil, interrupted(ctx)
		}
	}
	var taken []takenBackup
	var unfinished string
	if r.bk != nil {
		taken, unfinished = r.bk.wait(healed.Add(o.RecoveryTimeout))
	}
	if slices.ContainsFunc(r.verdicts, func(v Verdict) bool { return !v.OK }) {
		// Where each process stands, in its log, before it is stopped.
		for _, c := range sites {
			c.DumpStacks()
		}
	}
	stop()
	if r.bk != nil {
		backups, err := r.backupVerdict(ctx, netw, taken, unfinished)
		if err != nil {
			return nil, err
		}
		r.verdicts = append(r.verdicts, backups)
	}
	netw.Remove()
	return r.finish(tempOut, r.w.Snapshot())
}

// startExe returns the binary every process of a run of o starts from:
// the old one of an upgrade, else o.Exe.
func startExe(o Options) string {
	if o.Upgrade != nil {
		return o.Upgrade.Old
	}
	return o.Exe
}

// makeOutDirs creates the directories of the processes' logs and data
// in out.
func makeOutDirs(out string) (logDir, dataDir string, err error) {
	logDir, dataDir = filepath.Join(out, "logs"), filepath.Join(out, "data")
	for _, d := range []string{logDir, dataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", err
		}
	}
	return logDir, dataDir, nil
}

// makeFaultsDir creates, when the nemesis injects faults in processes,
// the directory of their control files in o.Out; "" when it does not.
func makeFaultsDir(o Options) (string, error) {
	if !injectsFaults(o.Nemesis) {
		return "", nil
	}
	dir := filepath.Join(o.Out, "faults")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// announce prints what the run is about to do, on how many hosts.
func announce(o Options, hosts int) {
	var kinds []string
	for _, k := range o.Nemesis {
		kinds = append(kinds, string(k))
	}
	if len(kinds) == 0 {
		kinds = []string{"none"}
	}
	shape := fmt.Sprintf("%d masters, %d servers, %d volumes of %d replicas", o.Masters, o.Servers, o.Volumes, o.Replicas)
	if o.Sites > 1 {
		shape = fmt.Sprintf("%d sites of %s each, %s round trip between sites", o.Sites, shape, o.WANRTT)
	}
	if withProxy(o) {
		shape += ", a Redis proxy"
	}
	fmt.Fprintf(o.Stdout, "catena torture: seed %d, %s of faults (%s); %s; hosts %s.11-%d; results in %s\n",
		o.Seed, o.Duration, strings.Join(kinds, ", "), shape, o.Subnet, 10+hosts, o.Out)
	if o.Split {
		var times []string
		for _, t := range splitPlan(o.Seed, o.Duration) {
			times = append(times, t.Round(time.Millisecond).String())
		}
		fmt.Fprintf(o.Stdout, "split: keyspace %s, %d time(s), asked for at %s into the fault phase\n", wire.DefaultKeyspace, len(times), strings.Join(times, ", "))
	}
	if u := o.Upgrade; u != nil {
		fmt.Fprintf(o.Stdout, "upgrade: every process starts from the old binary %s (%s); the new one is %s (%s)\n",
			u.Old, binaryVersion(u.Old), o.Exe, binaryVersion(o.Exe))
	}
}

// binaryVersion returns the first line catena version prints for exe, or
// why there is none.
func binaryVersion(exe string) string {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		return fmt.Sprintf("catena version: %v: %s", err, line)
	}
	return line
}

// safeGo returns how the harness starts its goroutines: a panic in any
// of them ends the run (cancel), and so removes the processes and the
// network, instead of the process.
func safeGo(cancel context.CancelCauseFunc) func(name string, f func()) {
	return func(name string, f func()) {
		go func() {
			defer func() {
				if r := recover(); r != nil {
					cancel(fmt.Errorf("panic in %s: %v\n%s", name, r, debug.Stack()))
				}
			}()
			f()
		}()
	}
}

// start starts every site's processes and waits until they are healthy
// and hold the causal keyspace. A cluster that does not get there is the
// startup verdict it returns; the error is for a run that cannot be made.
func (r *run) start(ctx context.Context) (*Verdict, error) {
	o := r.o
	for _, c := range r.sites {
		if err := c.StartAll(); err != nil {
			return nil, err
		}
	}
	for _, c := range r.sites {
		if err := c.AwaitHealthy(ctx, startupTimeout); err != nil {
			return startupFailure(c.describe()+" did not start", err), nil
		}
	}
	for _, c := range r.sites {
		if err := c.CreateKeyspace(ctx, causalKeyspace(o.Replicas, o.Sites), startupTimeout); err != nil {
			return startupFailure(c.describe()+": the causal keyspace", err), nil
		}
	}
	if p := r.sites[0].Proxy; p != nil {
		if err := awaitProxy(ctx, p.Addr, startupTimeout); err != nil {
			return startupFailure("the Redis proxy at "+p.Addr, err), nil
		}
	}
	fmt.Fprintf(o.Stdout, "cluster healthy after %s; running the workload at %g ops/s\n", time.Since(r.begin).Round(time.Millisecond), o.Rate)
	return nil, nil
}

// startupFailure is the verdict of a cluster that did not start: what
// did not, and why.
func startupFailure(what string, err error) *Verdict {
	return &Verdict{Checker: "startup", Reason: what + ": " + err.Error(), Detail: err.Error()}
}

// faultPhase runs the workload and the nemesis for o.Duration, with a
// progress line every o.Progress; with the upgrade nemesis, until its
// steps are done too. Times in the history and the nemesis log count
// from its start.
func (r *run) faultPhase(ctx context.Context, goSafe func(name string, f func())) error {
	o := r.o
	faultStart := time.Now()
	r.log.start = faultStart
	var masters []string
	for _, c := range r.sites {
		masters = append(masters, c.MasterAddrs())
	}
	var turn sync.Mutex
	upgradeDone := make(chan struct{})
	if o.Upgrade != nil {
		c := r.sites[0]
		r.up = &upgrader{c: c, u: *o.Upgrade, newExe: o.Exe, log: r.log, timeout: o.RecoveryTimeout, turn: &turn,
			proxyUp: func(ctx context.Context) error { return proxyAnswers(ctx, c.Proxy.Addr) }}
	}
	phase, endPhase := r.phaseContext(ctx, upgradeDone)
	defer endPhase()
	r.w = newWorkload(faultStart, masters, o.Seed, o.Rate, o.OpTimeout)
	if o.Watch {
		// Watching from before the workloads' first update, until the
		// watch verdict.
		r.wt = newWatchers(o, masters[0], r.w.now, r.log)
		r.wt.start(ctx, goSafe)
	}
	if err := r.w.run(phase, goSafe); err != nil {
		return err
	}
	if p := r.sites[0].Proxy; p != nil {
		r.pw = newProxyWorkload(faultStart, p.Addr, o.Seed, o.OpTimeout)
		r.pw.run(phase, goSafe)
	}
	if o.Split {
		// A split still asked for or starting when the phase ends goes
		// on through the healing; Run waits for it (splitter.wait).
		r.sp = newSplitter(o, masters[0], faultStart, r.w.now, r.log)
	}
	if o.Backup {
		// The backup in progress when the phase ends goes on through the
		// healing; Run waits for it (backupTaker.wait).
		bctx, cancelBackups := context.WithCancel(ctx)
		r.bk = newBackupTaker(o, masters[0], r.w.now, r.log)
		r.bk.cancel = cancelBackups
		if r.sp != nil {
			// A backup and a split never overlap (backup.go).
			turn := newOperatorTurn()
			r.bk.turn, r.bk.splits, r.sp.turn = turn, r.sp.applied, turn
		}
		goSafe("backup", func() { r.bk.run(bctx, phase, backupEvery(o.Duration)) })
	}
	if r.sp != nil {
		sctx, cancelSplits := context.WithCancel(ctx)
		r.sp.cancel = cancelSplits
		goSafe("split", func() { r.sp.run(sctx) })
	}
	r.nem = &nemesis{sites: r.sites, log: r.log, turn: &turn}
	nemesisDone := make(chan struct{})
	goSafe("nemesis", func() {
		defer close(nemesisDone)
		r.nem.run(phase, Plan(o.Seed, o.Nemesis, o.Masters+o.Servers, o.Sites, o.Duration))
	})
	if r.up == nil {
		close(upgradeDone)
	} else {
		c := r.sites[0]
		proxy := ""
		if c.Proxy != nil {
			proxy = c.Proxy.Name
		}
		steps := UpgradeSchedule(processNames(c.Servers), processNames(c.Masters), proxy, *o.Upgrade)
		goSafe("upgrade", func() {
			defer close(upgradeDone)
			r.up.run(ctx, steps, faultStart, o.Duration/time.Duration(len(steps)+1))
		})
	}
	ticker := time.NewTicker(o.Progress)
	for phase.Err() == nil {
		select {
		case <-ticker.C:
			r.progress(time.Since(faultStart))
		case <-phase.Done():
		}
	}
	ticker.Stop()
	<-nemesisDone
	<-upgradeDone
	r.w.wait()
	if r.pw != nil {
		r.pw.wait()
	}
	if ctx.Err() != nil {
		return interrupted(ctx)
	}
	return nil
}

// phaseContext returns the fault phase's context: it ends after
// o.Duration, or with the upgrade nemesis once upgradeDone is closed too.
func (r *run) phaseContext(ctx context.Context, upgradeDone chan struct{}) (context.Context, context.CancelFunc) {
	if r.up == nil {
		return context.WithTimeout(ctx, r.o.Duration)
	}
	phase, endPhase := context.WithCancel(ctx)
	go func() {
		if sleep(phase, r.o.Duration) {
			select {
			case <-upgradeDone:
			case <-phase.Done():
			}
		}
		endPhase()
	}()
	return phase, endPhase
}

// heal removes every partition and runs every process again, and
// returns when it did.
func (r *run) heal(netw *Net) (time.Time, error) {
	if err := netw.Heal(); err != nil {
		return time.Time{}, err
	}
	for _, c := range r.sites {
		if err := c.Revive(); err != nil {
			return time.Time{}, err
		}
	}
	healed := time.Now()
	r.log.printf("heal: every partition removed, every process running")
	return healed, nil
}

// recoveryVerdict waits for the cluster healed at healed to be healthy
// and reads every key, until deadline: the recovery verdict.
func (r *run) recoveryVerdict(ctx context.Context, healed, deadline time.Time) (Verdict, error) {
	recovery := Verdict{Checker: "recovery"}
	var unhealthy error
	for _, c := range r.sites {
		if unhealthy = c.AwaitHealthy(ctx, time.Until(deadline)); unhealthy != nil {
			unhealthy = fmt.Errorf("%s: %w", c.describe(), unhealthy)
			break
		}
	}
	if unhealthy != nil {
		recovery.Reason = "the cluster did not recover after healing: " + unhealthy.Error()
		recovery.Detail = recovery.Reason
	} else {
		recovery.OK = true
		recovery.Detail = fmt.Sprintf("healthy %s after healing", time.Since(healed).Round(100*time.Millisecond))
	}
	unread, err := r.w.finalReads(ctx, deadline)
	if ctx.Err() != nil {
		return Verdict{}, interrupted(ctx)
	}
	switch {
	case err != nil:
		recovery.OK, recovery.Reason = false, err.Error()
		recovery.Detail += "; " + err.Error()
	case len(unread) > 0:
		recovery.OK = false
		recovery.Reason = fmt.Sprintf("%d keys unreadable %s after healing (%s)", len(unread), time.Since(healed).Round(time.Second), listSome(unread))
		recovery.Detail += "; " + recovery.Reason
	default:
		recovery.Detail += fmt.Sprintf("; final reads of every key done %s after healing", time.Since(healed).Round(100*time.Millisecond))
	}
	return recovery, nil
}

// causalVerdict waits for the causal keyspace to be quiet, reads it at
// every site and checks what the causal workload recorded: the causal
// verdict.
func (r *run) causalVerdict(ctx context.Context) (Verdict, error) {
	o := r.o
	causal := Verdict{Checker: "causal"}
	if err := AwaitQuiet(ctx, r.sites, causalKeyspace(o.Replicas, o.Sites).Name, o.RecoveryTimeout); err != nil {
		causal.Reason, causal.Detail = err.Error(), err.Error()
	} else if report, err := r.w.finalCausalReads(time.Now().Add(o.RecoveryTimeout)); err != nil {
		causal.Reason, causal.Detail = err.Error(), err.Error()
	} else {
		r.causal = &report
		causal = checkCausal(report)
		if causal.OK && o.Sites > 1 {
			causal.Detail += fmt.Sprintf("; %d sessions at each of %d sites read the same final values", causalClients, o.Sites)
		}
	}
	if ctx.Err() != nil {
		return Verdict{}, interrupted(ctx)
	}
	return causal, nil
}

// interrupted is the error of a run whose context ended.
func interrupted(ctx context.Context) error {
	return fmt.Errorf("interrupted: %w", context.Cause(ctx))
}

// run is one run's state, for progress lines and the summary.
type run struct {
	o Options
	// sites holds the run's clusters, one per site.
	sites []*Cluster
	begin time.Time
	log   *eventLog
	w     *workload
	nem   *nemesis
	// up is the upgrade nemesis and pw the proxy workload (nil without);
	// bk takes the backups (nil without -backup), sp the splits (nil
	// without -split).
	up *upgrader
	pw *proxyWorkload
	bk *backupTaker
	sp *splitter
	// wt runs the watches (nil without -watch).
	wt       *watchers
	verdicts []Verdict
	// causal is what the causal workload recorded (nil until its final
	// reads are done).
	causal *causalwork.Report
	// lastOK and lastAt are the successful operations and the time of
	// the last progress line.
	lastOK int
	lastAt time.Duration
}

// progress prints a progress line: operations by outcome, the rate of
// successful ones since the last line, and the fault in force.
func (r *run) progress(elapsed time.Duration) {
	ops, ok, unknown, failed, _ := r.w.counts()
	events, _ := r.log.Events()
	rate := float64(ok-r.lastOK) / (elapsed - r.lastAt).Seconds()
	r.lastOK, r.lastAt = ok, elapsed
	now := r.nem.Current()
	var extra string
	if r.pw != nil {
		pops, pok := r.pw.counts()
		extra = fmt.Sprintf("  proxy ops %d (ok %d)", pops, pok)
	}
	if r.sp != nil {
		planned, applied, finished := r.sp.progress()
		extra += fmt.Sprintf("  splits applied %d/%d (finished %d)", applied, planned, finished)
	}
	if r.wt != nil {
		extra += fmt.Sprintf("  watch events %d", r.wt.progress())
	}
	if r.up != nil {
		done, steps := r.up.progress()
		extra += fmt.Sprintf("  upgrade steps done %d/%d", done, steps)
		if step := r.up.Current(); step != "" {
			now = "upgrade " + step
		}
	}
	fmt.Fprintf(r.o.Stdout, "%7s/%s  ops %d (ok %d, unknown %d, failed %d)  ok/s %.0f  causal writes acknowledged %d%s  faults %d  now: %s\n",
		elapsed.Round(time.Second), r.o.Duration, ops, ok, unknown, failed, rate, r.w.causal.Acked(), extra, events, now)
}

// proxyVerdict waits for the proxy to answer, reads every key its
// clients wrote through it, and checks their history: the proxy verdict.
func (r *run) proxyVerdict(ctx context.Context, healed time.Time) Verdict {
	o := r.o
	addr := r.sites[0].Proxy.Addr
	deadline := healed.Add(o.RecoveryTimeout)
	if err := awaitProxy(ctx, addr, max(time.Until(deadline), time.Second)); err != nil {
		return Verdict{Checker: "proxy", Reason: err.Error(), Detail: err.Error()}
	}
	if unread := r.pw.finalReads(ctx, deadline); len(unread) > 0 {
		why := fmt.Sprintf("%d keys unreadable through the proxy %s after healing (%s)", len(unread), o.RecoveryTimeout, listSome(unread))
		return Verdict{Checker: "proxy", Reason: why, Detail: why}
	}
	return checkProxy(r.pw.Snapshot(), o.CheckTimeout)
}

// processNames returns the processes' names.
func processNames(ps []*Process) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// finish runs the checkers, prints the summary and keeps or removes the
// results.
func (r *run) finish(tempOut bool, history []Record) (*Result, error) {
	o := r.o
	if history != nil {
		fmt.Fprintf(o.Stdout, "checking %d operations\n", len(history))
		r.verdicts = append(r.verdicts, checkRegisters(history, o.Out, o.CheckTimeout), checkSets(history))
	}
	processes := Verdict{Checker: "processes", OK: true, Detail: "none exited by itself"}
	var exits []string
	for _, c := range r.sites {
		exits = append(exits, c.UnexpectedExits()...)
	}
	if len(exits) > 0 {
		processes = Verdict{Checker: "processes", Reason: exits[0], Detail: strings.Join(exits, "; ")}
	}
	if hung := hungLoops(r.sites); hung != "" {
		// Not a failure by itself (the server stopped heartbeating and
		// the master took it out, as designed), but a bug to look into.
		processes.Detail += "; " + hung
	}
	r.verdicts = append(r.verdicts, processes)
	res := &Result{OK: true, Verdicts: r.verdicts, Out: o.Out}
	var reasons []string
	for _, v := range r.verdicts {
		if !v.OK {
			res.OK = false
			// One line: the verdict line is the output's last.
			reasons = append(reasons, v.Checker+": "+strings.Join(strings.Fields(v.Reason), " "))
		}
	}
	res.Reason = strings.Join(reasons, "; ")
	if !res.OK && history != nil {
		if err := writeHistory(filepath.Join(o.Out, "history.jsonl"), history); err != nil {
			fmt.Fprintf(o.Stdout, "writing the history: %v\n", err)
		}
	}
	if !res.OK && r.pw != nil {
		if err := writeHistory(filepath.Join(o.Out, proxyHistoryFile), r.pw.Snapshot()); err != nil {
			fmt.Fprintf(o.Stdout, "writing the proxy history: %v\n", err)
		}
	}
	if !res.OK && r.causal != nil {
		if err := writeCausalReport(filepath.Join(o.Out, causalHistoryFile), *r.causal); err != nil {
			fmt.Fprintf(o.Stdout, "writing the causal history: %v\n", err)
		}
	}
	var keep string
	switch {
	case !res.OK:
		keep = fmt.Sprintf("results (history, nemesis log, every process's log, data): %s", o.Out)
	case tempOut:
		os.RemoveAll(o.Out)
		res.Out = ""
	default:
		os.RemoveAll(filepath.Join(o.Out, "logs"))
		os.RemoveAll(filepath.Join(o.Out, "data"))
		os.RemoveAll(filepath.Join(o.Out, backupsDir))
		keep = fmt.Sprintf("summary and nemesis log: %s", o.Out)
	}
	summary := r.summary(history, res, keep)
	if res.Out != "" {
		os.WriteFile(filepath.Join(o.Out, "summary.txt"), []byte(summary), 0o644)
	}
	io.WriteString(o.Stdout, summary)
	return res, nil
}

// hungLogMessages are what a process logs when one of its event loops
// hangs (process.logStuck, and a server fencing itself off for a silent
// loop).
var hungLogMessages = []string{process.LogLoopStuck, process.LogLoopSilent}

// hungLoops says which processes logged a hung event loop, and how
// often; empty if none did.
func hungLoops(sites []*Cluster) string {
	var found []string
	for _, c := range sites {
		for _, p := range c.every() {
			b, err := os.ReadFile(p.log)
			if err != nil {
				continue
			}
			n := 0
			for _, m := range hungLogMessages {
				n += bytes.Count(b, []byte(m))
			}
			if n > 0 {
				found = append(found, fmt.Sprintf("%s %d", p.Name, n))
			}
		}
	}
	if len(found) == 0 {
		return ""
	}
	return "event loops logged as hung (see the processes' logs): " + strings.Join(found, ", ")
}

// summary renders the end of a run; its last line is the verdict.
func (r *run) summary(history []Record, res *Result, keep string) string {
	var b strings.Builder
	o := r.o
	fmt.Fprintf(&b, "summary: seed %d, %s of faults, run time %s\n", o.Seed, o.Duration, time.Since(r.begin).Round(time.Second))
	if history != nil {
		var regs, sets, reads, updates, unknown, failed int
		for _, h := range history {
			if h.Set {
				sets++
			} else {
				regs++
			}
			switch {
			case h.Outcome == Unknown:
				unknown++
			case h.Outcome == Failed:
				failed++
			case h.Op.Kind.IsQuery():
				reads++
			default:
				updates++
			}
		}
		causal := 0
		if r.causal != nil {
			causal = len(r.causal.History)
		}
		fmt.Fprintf(&b, "  operations      %d (registers %d, sets %d), causal %d\n", len(history), regs, sets, causal)
		fmt.Fprintf(&b, "  acknowledged    %d updates, %d reads\n", updates, reads)
		fmt.Fprintf(&b, "  unknown         %d updates (timed out: maybe applied)\n", unknown)
		fmt.Fprintf(&b, "  failed          %d (no effect: reported unavailable, or a read without an answer)\n", failed)
	}
	var proxyHistory []Record
	if r.pw != nil {
		proxyHistory = r.pw.Snapshot()
		fmt.Fprintf(&b, "  proxy           %s\n", proxyCounts(proxyHistory))
	}
	events, counts := r.log.Events()
	var per []string
	for _, k := range Kinds {
		if counts[k] > 0 {
			per = append(per, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	fmt.Fprintf(&b, "  nemesis events  %d", events)
	if len(per) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(per, ", "))
	}
	b.WriteString("\n")
	// The register and set clients use the first site: its faults are
	// the ones whose outages they show.
	var firstSite []faultWindow
	for _, w := range r.log.Windows() {
		if w.site == 0 {
			firstSite = append(firstSite, w)
		}
	}
	var steps []stepResult
	var stepStarts []time.Duration
	if r.up != nil {
		steps = r.up.Results()
		for _, s := range steps {
			stepStarts = append(stepStarts, s.start)
		}
	}
	if lines := availability(history, firstSite, stepStarts, o.Volumes); len(lines) > 0 {
		where := ""
		if o.Sites > 1 {
			where = " at site 1 (the register and set clients' site), of its faults"
		}
		fmt.Fprintf(&b, "  availability    the worst volume's longest wait for a successful write and read%s, from a fault's start (median and max per kind):\n", where)
		for _, l := range lines {
			fmt.Fprintf(&b, "                    %s\n", l)
		}
	}
	if r.up != nil && history != nil {
		fmt.Fprintf(&b, "  upgrade steps   %d: how each process stopped and how soon the cluster was healthy again; the worst volume's longest wait for a successful write and read from the step's start, and the proxy clients':\n", len(steps))
		for _, l := range stepAvailability(steps, firstSite, history, proxyHistory, o.Volumes) {
			fmt.Fprintf(&b, "                    %s\n", l)
		}
	}
	for _, v := range r.verdicts {
		verdict := "ok"
		if !v.OK {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "  %-15s %s: %s\n", v.Checker, verdict, v.Detail)
	}
	if keep != "" {
		fmt.Fprintf(&b, "  %s\n", keep)
	}
	if res.OK {
		b.WriteString("verdict: ok\n")
	} else {
		fmt.Fprintf(&b, "verdict: FAIL %s\n", res.Reason)
	}
	return b.String()
}

// proxyCounts describes the proxy workload's history by outcome.
func proxyCounts(history []Record) string {
	var sets, gets, acked, unknown, failed int
	for _, h := range history {
		if h.Client == finalClient {
			continue
		}
		if h.Op.Kind == wire.OpPut {
			sets++
		} else {
			gets++
		}
		switch {
		case h.Outcome == Unknown:
			unknown++
		case h.Outcome == Failed:
			failed++
		case h.Op.Kind == wire.OpPut:
			acked++
		}
	}
	return fmt.Sprintf("%d operations through the Redis proxy (SET %d, GET %d): %d SETs acknowledged, %d unknown, %d failed", sets+gets, sets, gets, acked, unknown, failed)
}

// jsonRecord is a Record as one line of history.jsonl.
type jsonRecord struct {
	Workload     string `json:"workload"`
	Client       int    `json:"client"`
	Op           string `json:"op"`
	Key          string `json:"key"`
	Value        string `json:"value,omitempty"`
	Expected     string `json:"expected,omitempty"`
	ExpectAbsent bool   `json:"expect_absent,omitempty"`
	Delta        int64  `json:"delta,omitempty"`
	CallNs       int64  `json:"call_ns"`
	ReturnNs     int64  `json:"return_ns"`
	Outcome      string `json:"outcome"`
	Status       string `json:"status,omitempty"`
	Found        bool   `json:"found"`
	Result       string `json:"result,omitempty"`
	Err          string `json:"err,omitempty"`
}

func writeHistory(path string, history []Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, h := range history {
		j := jsonRecord{Workload: "register", Client: h.Client, Op: h.Op.Kind.String(), Key: h.Op.Key, Value: string(h.Op.Value),
			Expected: string(h.Op.Expected), ExpectAbsent: h.Op.ExpectAbsent, Delta: h.Op.Delta, CallNs: h.Call, ReturnNs: h.Return,
			Outcome: h.Outcome.String(), Found: h.Result.Found, Result: string(h.Result.Value), Err: h.Err}
		if h.Set {
			j.Workload = "set"
		}
		if h.Outcome == OK {
			j.Status = h.Result.Status.String()
		}
		if err := enc.Encode(j); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// lock takes the run's lock file (one run per prefix at a time), waiting
// for another run to finish, and returns its release.
func lock(ctx context.Context, prefix string, out io.Writer) (func(), error) {
	path := filepath.Join(os.TempDir(), "catena-torture-"+prefix+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for waited := false; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !waited {
			pid, _ := os.ReadFile(path)
			fmt.Fprintf(out, "waiting for another catena torture run (pid %s, lock %s) to finish\n", strings.TrimSpace(string(pid)), path)
			waited = true
		}
		if !sleep(ctx, time.Second) {
			f.Close()
			return nil, interrupted(ctx)
		}
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// proxyHistoryFile is where a failed run keeps the proxy workload's
// history (as history.jsonl, one operation a line).
const proxyHistoryFile = "history-proxy.jsonl"

// causalHistoryFile is where a failed run keeps the causal workload's
// history, final reads and problems (causalwork.Report as JSON).
const causalHistoryFile = "history-causal.json"

func writeCausalReport(path string, report causalwork.Report) error {
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func readCausalReport(path string) (causalwork.Report, error) {
	var report causalwork.Report
	data, err := os.ReadFile(path)
	if err != nil {
		return report, err
	}
	return report, json.Unmarshal(data, &report)
}
