package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
)

// The upgrade nemesis: a rolling upgrade of a loaded cluster (issue 33).
// The run starts every process from an old catena binary; while the
// workloads run, the nemesis replaces one process at a time with the new
// binary (servers, then master members, followers first and the leader
// last, then the Redis proxy: the procedure of docs/upgrades.md), each
// stopped cleanly and started again with the same arguments and data
// directory, and waits for the cluster to be healthy before the next;
// then it finalizes the upgrade (catena upgrade finalize). The downgrade
// variant then replaces every process back with the old binary, in the
// same order, instead of finalizing. The run's checkers judge the whole
// history.

// Upgrade configures the upgrade nemesis.
type Upgrade struct {
	// Old is the catena binary the cluster starts from; the new one is
	// Options.Exe.
	Old string
	// Downgrade: once every process runs the new binary, replace every
	// one with the old binary again, in the same order, and do not
	// finalize.
	Downgrade bool
	// NoFinalize leaves out the finalize step.
	NoFinalize bool
}

// UpgradeStep is one step of the upgrade schedule: a process replaced
// by the new binary (or by the old, ToOld), or the finalize.
type UpgradeStep struct {
	// Process names the process to replace (its host's name); "" for
	// the finalize.
	Process string
	// ToOld replaces it with the old binary: a downgrade step.
	ToOld bool
	// Finalize runs catena upgrade finalize.
	Finalize bool
}

func (s UpgradeStep) String() string {
	switch {
	case s.Finalize:
		return "finalize"
	case s.ToOld:
		return s.Process + " → old"
	}
	return s.Process + " → new"
}

// action names what the step does in the run's lines: upgrade,
// downgrade or finalize.
func (s UpgradeStep) action() string {
	switch {
	case s.Finalize:
		return "finalize"
	case s.ToOld:
		return "downgrade"
	}
	return "upgrade"
}

// label names the step in the run's lines: "upgrade s1 → new",
// "downgrade s1 → old", "finalize".
func (s UpgradeStep) label() string {
	if s.Finalize {
		return "finalize"
	}
	return s.action() + " " + s.String()
}

// UpgradeSchedule returns the upgrade's steps for a cluster of these
// servers and masters and the proxy ("" if none): every server, then
// every master, then the proxy replaced by the new binary; then, with
// u.Downgrade, every process replaced by the old binary in the same
// order (docs/upgrades.md, rolling back), or else the finalize unless
// u.NoFinalize. Which master member goes when is settled during the run
// (leaderLast).
func UpgradeSchedule(servers, masters []string, proxy string, u Upgrade) []UpgradeStep {
	order := append(slices.Clone(servers), masters...)
	if proxy != "" {
		order = append(order, proxy)
	}
	var steps []UpgradeStep
	for _, name := range order {
		steps = append(steps, UpgradeStep{Process: name})
	}
	switch {
	case u.Downgrade:
		for _, name := range order {
			steps = append(steps, UpgradeStep{Process: name, ToOld: true})
		}
	case !u.NoFinalize:
		steps = append(steps, UpgradeStep{Finalize: true})
	}
	return steps
}

// leaderLast returns steps with step i, if it replaces the master leader
// while a later step of the same run of master steps (the same
// direction) replaces a follower, swapped with that step: the followers
// go first and the leader last, as docs/upgrades.md asks. isMaster tells
// a master member's name.
func leaderLast(steps []UpgradeStep, i int, leader string, isMaster func(string) bool) []UpgradeStep {
	s := steps[i]
	if s.Finalize || s.Process != leader || !isMaster(s.Process) {
		return steps
	}
	for j := i + 1; j < len(steps); j++ {
		t := steps[j]
		if t.Finalize || t.ToOld != s.ToOld || !isMaster(t.Process) {
			break
		}
		if t.Process != leader {
			steps = slices.Clone(steps)
			steps[i], steps[j] = t, s
			return steps
		}
	}
	return steps
}

// Timing of the upgrade nemesis.
const (
	// upgradeDwell is the least time the workload runs on the cluster
	// between one step's end and the next step.
	upgradeDwell = time.Second
	// finalizeAttempt bounds one run of catena upgrade finalize, and
	// finalizeRetry is the pause before the next when one fails.
	finalizeAttempt = 30 * time.Second
	finalizeRetry   = 2 * time.Second
)

// stepResult is what one step of the upgrade did.
type stepResult struct {
	step UpgradeStep
	// start is when the step began (the process was asked to stop, the
	// finalize command started), end when it ended (the cluster healthy
	// again, or the step failed), both counted from the start of the
	// fault phase.
	start, end time.Duration
	// how says what happened: how the process stopped, what the
	// finalize command printed.
	how string
	err error
}

// upgrader runs the upgrade schedule on a cluster (one site).
type upgrader struct {
	c      *Cluster
	u      Upgrade
	newExe string
	log    *eventLog
	// timeout bounds each step's wait for a healthy cluster, and the
	// finalize's retries.
	timeout time.Duration
	// turn is held during a step, and by the fault nemesis during a
	// fault: one of them at a time.
	turn *sync.Mutex
	// proxyUp reports whether the proxy answers (nil: no proxy).
	proxyUp func(context.Context) error

	mu      sync.Mutex
	steps   []UpgradeStep
	results []stepResult
	current string
}

// exeOf returns the binary a step replaces its process with.
func (up *upgrader) exeOf(s UpgradeStep) string {
	if s.ToOld {
		return up.u.Old
	}
	return up.newExe
}

// process returns the cluster's process named name, or nil.
func (up *upgrader) process(name string) *Process {
	for _, p := range up.c.every() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// run takes the steps one after another, step i planned gap×(i+1) after
// start and at least upgradeDwell after the previous step ended, until
// they are done, one fails, or ctx ends.
func (up *upgrader) run(ctx context.Context, steps []UpgradeStep, start time.Time, gap time.Duration) {
	up.mu.Lock()
	up.steps = steps
	up.mu.Unlock()
	ended := start
	for i := 0; i < len(steps); i++ {
		at := start.Add(time.Duration(i+1) * gap)
		if earliest := ended.Add(upgradeDwell); at.Before(earliest) {
			at = earliest
		}
		if !sleep(ctx, time.Until(at)) {
			return
		}
		up.turn.Lock()
		up.setCurrent(fmt.Sprintf("step %d/%d: waiting for a healthy cluster", i+1, len(steps)))
		res := up.awaitHealthyBefore(ctx, steps[i])
		if res.err == nil {
			steps = up.leaderLast(ctx, steps, i)
			up.setCurrent(fmt.Sprintf("step %d/%d %s", i+1, len(steps), steps[i]))
			res = up.do(ctx, steps[i])
		}
		s := res.step
		up.setCurrent("")
		up.turn.Unlock()
		ended = time.Now()
		if ctx.Err() != nil {
			return
		}
		up.mu.Lock()
		up.results = append(up.results, res)
		up.mu.Unlock()
		if res.err != nil {
			up.log.printf("%s FAILED: %v; the upgrade stops here", s.label(), res.err)
			return
		}
	}
}

// leaderLast puts the master leader's step after its followers' (the
// package's leaderLast), as the master's status names the leader now.
func (up *upgrader) leaderLast(ctx context.Context, steps []UpgradeStep, i int) []UpgradeStep {
	isMaster := func(name string) bool {
		p := up.process(name)
		return p != nil && p.Master
	}
	if !isMaster(steps[i].Process) {
		return steps
	}
	l := leader(ctx, up.c)
	if l == nil {
		return steps
	}
	steps = leaderLast(steps, i, l.Name, isMaster)
	up.mu.Lock()
	up.steps = steps
	up.mu.Unlock()
	return steps
}

func (up *upgrader) setCurrent(s string) {
	up.mu.Lock()
	up.current = s
	up.mu.Unlock()
}

// Current describes the step in progress, or "".
func (up *upgrader) Current() string {
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.current
}

// progress returns how many steps are done, of how many.
func (up *upgrader) progress() (done, steps int) {
	up.mu.Lock()
	defer up.mu.Unlock()
	return len(up.results), len(up.steps)
}

// Results returns the steps taken so far, in order.
func (up *upgrader) Results() []stepResult {
	up.mu.Lock()
	defer up.mu.Unlock()
	return slices.Clone(up.results)
}

// awaitHealthyBefore waits until the cluster is healthy before step s
// (a fault of the other nemesis may just have ended), as an operator
// would; a cluster still unhealthy after up.timeout fails the step.
func (up *upgrader) awaitHealthyBefore(ctx context.Context, s UpgradeStep) stepResult {
	err := up.c.AwaitHealthy(ctx, up.timeout)
	res := stepResult{step: s, start: time.Since(up.log.start)}
	res.end = res.start
	if err != nil {
		res.err = fmt.Errorf("the cluster was not healthy before the step: %w", err)
	}
	return res
}

// do takes one step and returns what it did.
func (up *upgrader) do(ctx context.Context, s UpgradeStep) stepResult {
	res := stepResult{step: s, start: time.Since(up.log.start)}
	if s.Finalize {
		res.how, res.err = up.finalize(ctx)
	} else {
		res.how, res.err = up.replace(ctx, s)
	}
	res.end = time.Since(up.log.start)
	return res
}

// replace replaces the step's process with its binary and waits until
// the cluster is healthy with the new process in it.
func (up *upgrader) replace(ctx context.Context, s UpgradeStep) (string, error) {
	p := up.process(s.Process)
	if p == nil {
		return "", fmt.Errorf("no process %s", s.Process)
	}
	exe := up.exeOf(s)
	incarnation := up.incarnation(ctx, p)
	role := ""
	if p.Master && len(up.c.Masters) > 1 {
		role = "a follower; "
		if leader(ctx, up.c) == p {
			role = "the leader; "
		}
	}
	began := time.Now()
	stopped, err := up.c.Replace(p, exe)
	stopped = role + stopped
	if err != nil {
		return stopped, err
	}
	up.log.printf("%s: %s now runs %s (pid %d; the old process was %s)", s.action(), p.Name, exe, p.Pid(), stopped)
	if err := up.awaitBack(ctx, p, incarnation); err != nil {
		return stopped, err
	}
	if err := p.CheckExe(exe); err != nil {
		return stopped, err
	}
	how := fmt.Sprintf("%s; healthy %s after", stopped, time.Since(began).Round(10*time.Millisecond))
	up.log.printf("%s: %s: the cluster is healthy again (%s)", s.action(), p.Name, how)
	return how, nil
}

// incarnation returns the server p's incarnation as the master reports
// it (0 for a master or the proxy, or when there is no status).
func (up *upgrader) incarnation(ctx context.Context, p *Process) uint64 {
	if p.Master || p == up.c.Proxy {
		return 0
	}
	s, err := up.c.Status(ctx)
	if err != nil {
		return 0
	}
	for _, srv := range s.Servers {
		if srv.Addr == p.Addr {
			return srv.Incarnation
		}
	}
	return 0
}

// awaitBack waits until the cluster is healthy and p's new process takes
// part: a server's new incarnation (above incarnation) has reached the
// master, a master member answers a status naming a leader, the proxy
// answers.
func (up *upgrader) awaitBack(ctx context.Context, p *Process, incarnation uint64) error {
	return awaitCondition(ctx, up.timeout, "not healthy after replacing "+p.Name, func() string {
		s, err := up.c.Status(ctx)
		if err != nil {
			return "no status from the master: " + err.Error()
		}
		if ok, missing := up.c.Healthy(s); !ok {
			return missing
		}
		switch {
		case p == up.c.Proxy:
			if err := up.proxyUp(ctx); err != nil {
				return "the proxy does not answer: " + err.Error()
			}
			return ""
		case p.Master:
			return memberAnswers(ctx, p)
		}
		for _, srv := range s.Servers {
			if srv.Addr == p.Addr && srv.Incarnation > incarnation {
				return ""
			}
		}
		return fmt.Sprintf("the master has not heard from %s's new process (incarnation above %d)", p.Name, incarnation)
	})
}

// memberAnswers says why the master member p does not answer a status
// request naming a leader, or "" if it does.
func memberAnswers(ctx context.Context, p *Process) string {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, p.Addr)
	if err != nil {
		return fmt.Sprintf("%s does not answer: %v", p.Name, err)
	}
	defer cl.Close()
	s, err := cl.Status(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("%s does not answer: %v", p.Name, err)
	case s.Leader == "":
		return fmt.Sprintf("%s knows no leader", p.Name)
	}
	return ""
}

// finalize runs the new binary's catena upgrade finalize against the
// masters, again after finalizeRetry while it fails, until up.timeout;
// a usage error (exit status 2: a command or flag this binary does not
// have) is not retried. Then it waits for a healthy cluster. It returns
// what the command printed.
func (up *upgrader) finalize(ctx context.Context) (string, error) {
	args := []string{"upgrade", "finalize", "-master", up.c.MasterAddrs()}
	command := up.newExe + " " + strings.Join(args, " ")
	deadline := time.Now().Add(up.timeout)
	for attempt := 1; ; attempt++ {
		out, err := runFinalize(ctx, up.newExe, args)
		if err == nil {
			up.log.printf("finalize: %s: ok after %d attempt(s): %s", command, attempt, out)
			if err := up.c.AwaitHealthy(ctx, up.timeout); err != nil {
				return out, err
			}
			return out, nil
		}
		var exit *exec.ExitError
		usage := errors.As(err, &exit) && exit.ExitCode() == 2
		if usage || time.Now().After(deadline) || ctx.Err() != nil {
			return out, fmt.Errorf("%s failed (%v, attempt %d): %s", command, err, attempt, out)
		}
		if attempt == 1 {
			up.log.printf("finalize: %s failed (%v): %s; trying again every %s for up to %s", command, err, out, finalizeRetry, up.timeout)
		}
		if !sleep(ctx, finalizeRetry) {
			return out, ctx.Err()
		}
	}
}

// runFinalize runs exe with args, bounded by finalizeAttempt, and returns
// its output (standard output and error) on one line.
func runFinalize(ctx context.Context, exe string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, finalizeAttempt)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
	return strings.Join(strings.Fields(string(bytes.TrimSpace(out))), " "), err
}

// verdict judges the upgrade: every step done, the cluster healthy after
// each, the finalize done (or left out as asked), and at the end every
// process running the binary the schedule ends on (the new one, or the
// old after a downgrade).
func (up *upgrader) verdict() Verdict {
	v := Verdict{Checker: "upgrade"}
	results := up.Results()
	up.mu.Lock()
	steps := up.steps
	up.mu.Unlock()
	for _, r := range results {
		if r.err != nil {
			v.Reason = fmt.Sprintf("%s: %v", r.step, r.err)
			v.Detail = fmt.Sprintf("%d of %d steps done; %s", len(results)-1, len(steps), v.Reason)
			return v
		}
	}
	if len(results) < len(steps) {
		v.Reason = fmt.Sprintf("only %d of %d steps done", len(results), len(steps))
		v.Detail = v.Reason
		return v
	}
	final := up.newExe
	if up.u.Downgrade {
		final = up.u.Old
	}
	var wrong []string
	for _, p := range up.c.every() {
		if err := p.CheckExe(final); err != nil {
			wrong = append(wrong, err.Error())
		}
	}
	if len(wrong) > 0 {
		v.Reason = "at the end, " + strings.Join(wrong, "; ")
		v.Detail = v.Reason
		return v
	}
	var slowest time.Duration
	for _, r := range results {
		slowest = max(slowest, r.end-r.start)
	}
	v.OK = true
	v.Detail = fmt.Sprintf("%d steps, one process at a time, the cluster healthy after each (the slowest step %s); at the end every process runs %s", len(steps), slowest.Round(10*time.Millisecond), final)
	switch {
	case up.u.Downgrade:
		v.Detail += "; downgraded before finalizing, not finalized"
	case up.u.NoFinalize:
		v.Detail += "; not finalized (left out as asked)"
	default:
		v.Detail += "; finalized"
	}
	return v
}
