package torture

import (
	"bytes"
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
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/backup"
	"github.com/catena-kv/catena/internal/wire"
)

// Backups under faults (-backup): while the workloads and the nemesis
// run, the harness takes backups of the first site (internal/backup.Run)
// into backups/1, backups/2, ... in the results directory, one
// backupEvery after the fault phase began and each next one backupEvery
// after the last finished, while the phase lasts. A backup an error
// interrupts (a volume's tail killed or cut off) is resumed, keeping the
// volumes it finished, until it finishes; one still unfinished when the
// cluster has recovered is given until --recovery-timeout after healing.
// Once the run's own verdicts are in and its processes stopped, a new
// cluster of one master and one server starts on two of the run's hosts,
// the last backup is restored into it (internal/backup.Restore), and
// the backup verdict checks every backup's contents, and the restored
// cluster's, against the history (checkBackupContents).
//
// With splits (-split), a backup and a split never overlap: a backup
// (all its attempts) waits for a split in progress to finish (its new
// volumes serve), and a split waits for a backup in progress (the
// operator turn, splitter.acquire). Before each attempt the backup's
// client learns the keyspaces as the last split left them.
// internal/backup.Run lists the volumes once, from its client's keyspace
// list, before it freezes them, and a resumed attempt keeps the volumes
// an earlier one finished: a split between the listing and the freeze,
// or between two attempts, or one the client has not heard of, leaves
// the moved keys out of the backup or puts them in it twice.

const (
	// backupsDir is the backups' directory in the results directory.
	backupsDir = "backups"
	// backupAttempt bounds one attempt at a backup; a failed one is
	// resumed backupRetry later.
	backupAttempt = 20 * time.Second
	backupRetry   = time.Second
	// restoreVolumes is the restored cluster's volume count (the default
	// keyspace's), unlike the run's, so the keys are placed anew.
	restoreVolumes = 2
	// restoreDir names the restored cluster's data and log directories
	// (in data/ and logs/).
	restoreDir = "restore"
	// backupFindingsListed bounds the findings a backup verdict's detail
	// lists, and its reason (the verdict line); a failed run's results
	// hold them all (backupFindingsFile).
	backupFindingsListed = 10
	backupFindingsReason = 2
	backupFindingsFile   = "backup-findings.txt"
)

// backupEvery is the wait before a run's first backup and after each:
// an eighth of the fault phase d, from 2 s to 30 s (some seven backups a
// run, up to two minutes; more in a longer run).
func backupEvery(d time.Duration) time.Duration { return min(max(d/8, 2*time.Second), 30*time.Second) }

// takenBackup is a finished backup.
type takenBackup struct {
	n   int
	dir string
	win backupWindow
	// attempts is how many runs of backup.Run it took.
	attempts int
}

// backupTaker takes the run's backups.
type backupTaker struct {
	masters string
	dir     string
	// keyspaces names what to back up (nil: every keyspace).
	keyspaces []string
	now       func() int64
	log       *eventLog
	cancel    context.CancelFunc
	done      chan struct{}
	// turn, with splits, is the operator turn a backup holds while it
	// is taken, and splits the splits applied so far (both nil without).
	turn   operatorTurn
	splits func() int

	mu    sync.Mutex
	taken []takenBackup
	// unfinished says why the last backup begun did not finish ("" if it
	// did).
	unfinished string
}

// newBackupTaker prepares the backups of a run of o through the masters
// of its first site; now is the history's clock. With several sites only
// the default keyspace is backed up: the causal keyspace is replicated by
// every site, and the restored cluster is one site.
func newBackupTaker(o Options, masters string, now func() int64, log *eventLog) *backupTaker {
	b := &backupTaker{masters: masters, dir: filepath.Join(o.Out, backupsDir), now: now, log: log, done: make(chan struct{})}
	if o.Sites > 1 {
		b.keyspaces = []string{wire.DefaultKeyspace}
	}
	return b
}

// run takes backups while phase lasts, the first every into it and each
// next every after the last finished; ctx bounds the one in progress when
// phase ends.
func (b *backupTaker) run(ctx, phase context.Context, every time.Duration) {
	defer close(b.done)
	var cl *client.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for n := 1; sleep(phase, every); n++ {
		if b.turn != nil && !b.turn.take(ctx) {
			b.mu.Lock()
			b.unfinished = fmt.Sprintf("backup %d did not begin: a split did not finish", n)
			b.mu.Unlock()
			return
		}
		var ok bool
		cl, ok = b.take(ctx, cl, n)
		if b.turn != nil {
			b.turn.give()
		}
		if !ok {
			return
		}
	}
}

// frozenMargin widens the window the manifest gives, for the two clocks
// it is read across.
const frozenMargin = int64(2 * time.Millisecond)

// frozenWindow narrows a backup's window win (history times) to the
// moments its volumes were frozen (Manifest.FrozenFrom and FrozenTo,
// wall times, mapped to the history's clock through its reading at and
// the wall time of the backup's beginning), widened by frozenMargin: each
// volume's state is from that window, so every key's value is checked
// against it.
func frozenWindow(win backupWindow, hist int64, wall time.Time, m backup.Manifest) backupWindow {
	if m.FrozenFrom.IsZero() || m.FrozenTo.Before(m.FrozenFrom) {
		return win
	}
	from := hist + int64(m.FrozenFrom.Sub(wall)) - frozenMargin
	to := hist + int64(m.FrozenTo.Sub(wall)) + frozenMargin
	narrowed := backupWindow{Begin: max(win.Begin, from), End: min(win.End, to)}
	if narrowed.End < narrowed.Begin {
		return win
	}
	return narrowed
}

// take takes backup n, resuming it after each failed attempt until it
// finishes or ctx ends; it returns the client it used (dialled if cl is
// nil) and whether the backup finished.
func (b *backupTaker) take(ctx context.Context, cl *client.Client, n int) (*client.Client, bool) {
	dir := filepath.Join(b.dir, strconv.Itoa(n))
	begin, beginWall := b.now(), time.Now()
	b.log.printf("backup %d: begins (into %s)", n, dir)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, backupAttempt)
		var m backup.Manifest
		var err error
		if cl == nil {
			cl, err = client.Dial(actx, b.masters)
		}
		if err == nil && b.splits != nil {
			err = awaitSplits(actx, cl, b.splits())
		}
		if err == nil {
			m, err = backup.Run(actx, backup.Options{Client: cl, Dir: dir, Keyspaces: b.keyspaces, Release: "catena-lab torture"})
		}
		cancel()
		if err == nil {
			end := b.now()
			var objects int64
			for _, v := range m.Volumes {
				objects += v.Objects
			}
			b.log.printf("backup %d: finished after %s and %d attempt(s): %d volumes, %d objects", n, time.Duration(end-begin).Round(time.Millisecond), attempt, len(m.Volumes), objects)
			b.mu.Lock()
			b.taken = append(b.taken, takenBackup{n: n, dir: dir, win: frozenWindow(backupWindow{Begin: begin, End: end}, begin, beginWall, m), attempts: attempt})
			b.mu.Unlock()
			return cl, true
		}
		if ctx.Err() != nil {
			b.mu.Lock()
			b.unfinished = fmt.Sprintf("backup %d did not finish (%d attempts; the last: %v)", n, attempt, err)
			b.mu.Unlock()
			b.log.printf("backup %d: stopped unfinished after %d attempt(s): %v", n, attempt, err)
			return cl, false
		}
		b.log.printf("backup %d: attempt %d failed: %v; resuming it in %s", n, attempt, err, backupRetry)
		sleep(ctx, backupRetry) // if ctx ends, the next attempt fails at once and says so
	}
}

// awaitSplits refreshes cl's keyspaces (a status reply carries them)
// until its default keyspace shows splits splits.
func awaitSplits(ctx context.Context, cl *client.Client, splits int) error {
	for {
		for _, k := range cl.Keyspaces() {
			if k.Name == wire.DefaultKeyspace && k.Splits >= splits {
				return nil
			}
		}
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		_, err := cl.Status(sctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("the client's keyspaces: %w", err)
		}
		if !sleep(ctx, splitPoll) {
			return fmt.Errorf("the client's keyspaces do not show the default keyspace split %d times: %w", splits, ctx.Err())
		}
	}
}

// wait waits until the backup in progress, if any, finished or deadline
// passed (then it stops it), and returns the finished backups and why
// the last one begun did not finish ("" if it did).
func (b *backupTaker) wait(deadline time.Time) ([]takenBackup, string) {
	select {
	case <-b.done:
	case <-time.After(time.Until(deadline)):
		b.cancel()
		<-b.done
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.taken), b.unfinished
}

// backupVerdict checks every finished backup's contents against the
// history, restores the last into a new cluster on the run's hosts
// (stopped by now) and checks what that holds: the backup verdict. The
// error is for a run interrupted meanwhile.
func (r *run) backupVerdict(ctx context.Context, netw *Net, taken []takenBackup, unfinished string) (Verdict, error) {
	v := Verdict{Checker: "backup"}
	fail := failVerdict(ctx, &v)
	if unfinished != "" {
		return fail(unfinished)
	}
	if len(taken) == 0 {
		return fail(fmt.Sprintf("no backup was taken: the first is due %s into the fault phase", backupEvery(r.o.Duration)))
	}
	history := r.w.Snapshot()
	causal := r.w.causal.Report(r.w.causalKeys).History
	var problems []string
	keys, required := 0, 0
	var last map[string][]byte
	for _, t := range taken {
		contents, err := backupContents(t.dir)
		if err != nil {
			return fail(fmt.Sprintf("backup %d: %v", t.n, err))
		}
		rep := checkBackupContents(history, causal, t.win, contents)
		keys, required = keys+rep.Keys, required+rep.Required
		for _, p := range rep.Problems {
			problems = append(problems, fmt.Sprintf("backup %d (%s to %s): %s", t.n, at(t.win.Begin), at(t.win.End), p))
		}
		last = contents
	}
	t := taken[len(taken)-1]
	restored, how, err := r.restore(ctx, netw, t.dir)
	if err != nil {
		if ctx.Err() != nil {
			return Verdict{}, interrupted(ctx)
		}
		return r.backupFindings(append([]string{fmt.Sprintf("restoring backup %d: %v", t.n, err)}, problems...)), nil
	}
	for _, p := range compareRestored(last, restored) {
		problems = append(problems, fmt.Sprintf("restored backup %d: %s", t.n, p))
	}
	rep := checkBackupContents(history, causal, t.win, restored)
	for _, p := range rep.Problems {
		problems = append(problems, fmt.Sprintf("restored backup %d: %s", t.n, p))
	}
	if len(problems) > 0 {
		return r.backupFindings(problems), nil
	}
	var took []string
	resumed := 0
	for _, t := range taken {
		took = append(took, at(t.win.End-t.win.Begin))
		resumed += t.attempts - 1
	}
	v.OK = true
	v.Detail = fmt.Sprintf("%d backups under faults (taking %s; %d failed attempts resumed): in each, every key's value one the history allows while its volumes were frozen, every key acknowledged before then present (%d keys checked in all, %d of them required); backup %d restored into a new cluster of 1 master and 1 server (%s): the same %d keys and values, checked against the history too",
		len(taken), strings.Join(took, ", "), resumed, keys, required, t.n, how, len(restored))
	return v, nil
}

// backupFindings is the backup verdict of a run whose backups or restore
// have problems: the first few listed, all written to
// backupFindingsFile.
func (r *run) backupFindings(problems []string) Verdict {
	v := Verdict{Checker: "backup"}
	some := func(n int) string {
		s := strings.Join(problems[:min(len(problems), n)], "; ")
		if len(problems) > n {
			s += "; ..."
		}
		return s
	}
	v.Reason = fmt.Sprintf("%d findings: %s", len(problems), some(backupFindingsReason))
	v.Detail = fmt.Sprintf("%d findings: %s", len(problems), some(backupFindingsListed))
	path := filepath.Join(r.o.Out, backupFindingsFile)
	if err := os.WriteFile(path, []byte(strings.Join(problems, "\n")+"\n"), 0o644); err == nil {
		v.Files = append(v.Files, path)
		v.Detail += "; every finding: " + path
	}
	return v
}

// backupContents reads a finished backup's keys and values. The
// workloads write strings only: a hash is reported.
func backupContents(dir string) (map[string][]byte, error) {
	contents := map[string][]byte{}
	_, err := backup.Objects(dir, func(_ backup.Volume, o backup.Object) error {
		if o.Hash {
			return fmt.Errorf("%s is a hash, which no workload writes", o.Key)
		}
		if _, dup := contents[o.Key]; dup {
			return fmt.Errorf("%s is in the backup twice", o.Key)
		}
		contents[o.Key] = o.Value
		return nil
	})
	return contents, err
}

// compareRestored lists the differences between a backup's contents and
// what the cluster it was restored into holds.
func compareRestored(backedUp, restored map[string][]byte) []string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(backedUp)) {
		switch v, ok := restored[k]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s missing (the backup holds %s)", k, short(backedUp[k])))
		case !bytes.Equal(v, backedUp[k]):
			diffs = append(diffs, fmt.Sprintf("%s = %s, the backup holds %s", k, short(v), short(backedUp[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(restored)) {
		if _, ok := backedUp[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %s, not in the backup", k, short(restored[k])))
		}
	}
	return diffs
}

// restore starts a new cluster of one master and one server on the first
// site's first master and first server hosts (their processes stopped),
// restores the backup in dir into it, reads every key it then holds, and
// stops it. It returns what it read and how the restore went.
func (r *run) restore(ctx context.Context, netw *Net, dir string) (map[string][]byte, string, error) {
	o := r.o
	site := r.sites[0]
	hosts := []*Host{site.Hosts[0], site.Hosts[o.Masters]}
	logDir, dataDir := filepath.Join(o.Out, "logs", restoreDir), filepath.Join(o.Out, "data", restoreDir)
	for _, d := range []string{logDir, dataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, "", err
		}
	}
	c, err := newCluster(netw, hosts, clusterOptions{exe: o.Exe, masters: 1, servers: 1, volumes: restoreVolumes, replicas: 1,
		dataDir: dataDir, logDir: logDir, pipeEnv: o.PipeEnv})
	if err != nil {
		return nil, "", err
	}
	defer c.StopAll()
	began := time.Now()
	r.log.printf("restore: a new cluster (%s, %s) for backup %s", hosts[0].Name, hosts[1].Name, dir)
	if err := c.StartAll(); err != nil {
		return nil, "", err
	}
	if err := c.AwaitHealthy(ctx, startupTimeout); err != nil {
		return nil, "", fmt.Errorf("the new cluster did not start: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, o.RecoveryTimeout)
	defer cancel()
	cl, err := client.Dial(dctx, c.MasterAddrs())
	if err != nil {
		return nil, "", err
	}
	defer cl.Close()
	st, err := backup.Restore(dctx, backup.RestoreOptions{Client: cl, Dir: dir, MaxReplicas: 1})
	if err != nil {
		return nil, "", err
	}
	restoredIn := time.Since(began)
	r.log.printf("restore: %d objects restored (keyspaces created: %d), %s after starting the cluster", st.Objects, st.Keyspaces, restoredIn.Round(time.Millisecond))
	// A client dialled anew learns the keyspaces the restore created.
	reader, err := client.Dial(dctx, c.MasterAddrs())
	if err != nil {
		return nil, "", err
	}
	defer reader.Close()
	contents, err := readAll(dctx, reader, o.OpTimeout)
	if err != nil {
		return nil, "", fmt.Errorf("reading the restored cluster: %w", err)
	}
	if exits := c.UnexpectedExits(); len(exits) > 0 {
		return nil, "", fmt.Errorf("the new cluster's %s", exits[0])
	}
	return contents, fmt.Sprintf("%d objects restored %s after it started", st.Objects, restoredIn.Round(100*time.Millisecond)), nil
}

// readAll lists every key of the cluster cl reaches (Scan) and reads
// each (Get), each call retried until ctx ends.
func readAll(ctx context.Context, cl *client.Client, timeout time.Duration) (map[string][]byte, error) {
	retry := func(f func(context.Context) error) error {
		for {
			octx, cancel := context.WithTimeout(ctx, timeout)
			err := f(octx)
			cancel()
			if err == nil || !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
				return err
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	var keys []string
	var cur client.Cursor
	for !cur.Done() {
		err := retry(func(ctx context.Context) error {
			page, next, err := cl.Scan(ctx, cur, "", 1000)
			if err == nil {
				keys, cur = append(keys, page...), next
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	contents := map[string][]byte{}
	for _, k := range keys {
		err := retry(func(ctx context.Context) error {
			v, found, err := cl.Get(ctx, k)
			if err == nil && found {
				contents[k] = v
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return contents, nil
}

// failVerdict returns how a verdict checker fails with a reason: v
// failed for why, or the run's interruption if ctx ended meanwhile.
func failVerdict(ctx context.Context, v *Verdict) func(why string) (Verdict, error) {
	return func(why string) (Verdict, error) {
		if ctx.Err() != nil {
			return Verdict{}, interrupted(ctx)
		}
		v.Reason, v.Detail = why, why
		return *v, nil
	}
}
