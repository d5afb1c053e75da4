package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// Splits under faults (-split): while the workloads and the nemesis run,
// the harness splits the keyspace of the register and set workloads
// (the default keyspace of the first site) as an operator does (catena
// keyspace split, docs/adr/0031): once to splitsMax times, at times
// drawn from the seed, so the same seed splits at the same times. Each
// request names the splits the harness saw applied before it
// (client.SplitKeyspace), so a retry after an unanswered request splits
// nothing more. The master refuses a split while the volumes of the
// last one have not all started; the harness asks again splitRetry
// later, as it does after any request the master did not answer, until
// the split is applied. A split in progress when the fault phase ends
// goes on through the healing; Run waits for it (splitter.wait).
//
// The run's checkers cover the keys that move like any other: each
// key's history is checked for linearizability across its move, and
// the final reads (after the last split finished) must find every
// acknowledged write. The split verdict adds, once the cluster has
// recovered: every split requested was applied and every new volume
// serves; the keyspace has 2^splits times its volumes; and, once its
// chains are quiet, every volume's contents (exported at its tail,
// client.ExportVolume) hold only keys the final keyspace map routes to
// that volume, no key in two volumes, and every key the final reads
// found, with the value they read (checkSplitPlacement).

const (
	// splitsMax bounds a run's splits (the volumes grow 2^splitsMax
	// times); a run has one split per splitSpacing of its fault phase
	// at most, and at least one.
	splitsMax    = 3
	splitSpacing = 40 * time.Second
	// splitAttempt bounds one request; a request refused while the last
	// split is still starting, or unanswered, is made again splitRetry
	// later.
	splitAttempt = 10 * time.Second
	splitRetry   = time.Second
	// splitPoll is how often the harness asks the status whether a
	// split's new volumes serve.
	splitPoll = 200 * time.Millisecond
	// splitStream is the stream of the seed's random numbers the split
	// plan draws from: the nemesis plan stays the same with -split.
	splitStream = 0x73706c6974 // "split"
	// splitAtOnce: one split in splitAtOnce after the first follows the
	// last one at once.
	splitAtOnce = 3
	// stillSplitting is in the master's refusal of a split while the
	// last one's new volumes have not all started (master.splittable).
	stillSplitting = "still splitting"
	// splitFindingsListed bounds the findings the split verdict lists.
	splitFindingsListed = 5
)

// splitPlan returns when a run whose fault phase lasts d splits its
// keyspace, counted from the phase's start: one to min(splitsMax, 1 +
// d/splitSpacing) times, each at a random time in its share of the
// phase between a tenth and three quarters of it, or (one in
// splitAtOnce after the first) at the same time as the last: that one is
// asked for as soon as the last was applied, and refused until the last
// one's volumes started, then asked again.
func splitPlan(seed uint64, d time.Duration) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, splitStream))
	n := 1 + rng.IntN(min(splitsMax, 1+int(d/splitSpacing)))
	from, until := d/10, 3*d/4
	span := (until - from) / time.Duration(n)
	var plan []time.Duration
	for i := range n {
		at := from + time.Duration(i)*span + time.Duration(rng.Int64N(int64(span)+1))
		if i > 0 && rng.IntN(splitAtOnce) == 0 {
			at = plan[i-1]
		}
		plan = append(plan, at)
	}
	return plan
}

// splitRecord is one split the harness asked for, times in the
// history's clock (zero: not yet).
type splitRecord struct {
	n int
	// from and to are the keyspace's volumes before and after it.
	from, to int
	// due is when the plan asked for it; applied when the master's
	// answer said it was; finished when the status first showed every
	// volume of the keyspace with a chain.
	due, applied, finished int64
	// attempts counts the requests, refused those the master refused
	// because the last split was still starting.
	attempts, refused int
	// keyspace is the keyspace as the master's answer gave it.
	keyspace client.Keyspace
	// waiting says, until it finished, what the last status showed
	// missing (or why there was none).
	waiting string
}

// splitter splits the workload's keyspace during the run.
type splitter struct {
	masters string
	plan    []time.Duration
	start   time.Time
	now     func() int64
	log     *eventLog
	cancel  context.CancelFunc
	done    chan struct{}
	// turn, with backups, is the operator turn: held from a split's
	// request until its new volumes serve (several splits share it), so
	// no backup runs meanwhile (backup.go). Nil without backups.
	turn operatorTurn

	mu sync.Mutex
	// holding counts the splits asked for and not finished (or given
	// up) that hold turn.
	holding int
	splits  []splitRecord
	initial client.Keyspace
	// failure says why the splitter stopped before every split of the
	// plan finished ("" if it did not).
	failure string
}

// newSplitter prepares the splits of a run through masters (the first
// site's), whose fault phase began at start (the history's clock now).
func newSplitter(o Options, masters string, start time.Time, now func() int64, log *eventLog) *splitter {
	return &splitter{masters: masters, plan: splitPlan(o.Seed, o.Duration), start: start, now: now, log: log, done: make(chan struct{})}
}

// run makes the plan's splits, each once its time came and the last one
// was applied, and watches each until its new volumes serve; it returns
// when all did or ctx ends.
func (s *splitter) run(ctx context.Context) {
	defer close(s.done)
	var cl *client.Client
	for cl == nil {
		dctx, cancel := context.WithTimeout(ctx, splitAttempt)
		cl, _ = client.Dial(dctx, s.masters)
		cancel()
		if cl == nil && !sleep(ctx, splitRetry) {
			s.stop("no master answered the splitter's client")
			return
		}
	}
	defer cl.Close()
	var watching sync.WaitGroup
	defer watching.Wait() // (before cl closes)
	before, ok := s.keyspace(ctx, cl)
	if !ok {
		s.stop("the splitter never learned keyspace " + wire.DefaultKeyspace)
		return
	}
	s.mu.Lock()
	s.initial = before
	s.mu.Unlock()
	for i, due := range s.plan {
		if !sleep(ctx, time.Until(s.start.Add(due))) {
			s.stop(fmt.Sprintf("split %d of %d was not asked for", i+1, len(s.plan)))
			return
		}
		if !s.acquire(ctx, i+1) {
			s.stop(fmt.Sprintf("split %d of %d was not asked for (a backup held the turn)", i+1, len(s.plan)))
			return
		}
		rec, ok := s.split(ctx, cl, i+1, before, int64(due))
		if !ok {
			s.release()
			return
		}
		before = rec.keyspace
		watching.Add(1)
		go func() {
			defer watching.Done()
			defer s.release()
			s.watch(ctx, cl, rec)
		}()
	}
}

// acquire takes the operator turn for split n, unless a split still
// starting holds it; it may wait for a backup in progress, until ctx
// ends (false). Only run calls it, so only a release changes holding
// meanwhile.
func (s *splitter) acquire(ctx context.Context, n int) bool {
	if s.turn == nil {
		return true
	}
	s.mu.Lock()
	if s.holding > 0 {
		s.holding++
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	began := time.Now()
	if !s.turn.take(ctx) {
		return false
	}
	if waited := time.Since(began); waited >= 10*time.Millisecond {
		s.log.printf("split %d: waited %s for the backup in progress", n, waited.Round(time.Millisecond))
	}
	s.mu.Lock()
	s.holding++
	s.mu.Unlock()
	return true
}

// release gives up one split's hold on the operator turn, and the turn
// with the last one.
func (s *splitter) release() {
	if s.turn == nil {
		return
	}
	s.mu.Lock()
	s.holding--
	last := s.holding == 0
	s.mu.Unlock()
	if last {
		s.turn.give()
	}
}

// operatorTurn lets one operator action run at a time: a backup, or
// splits until their new volumes serve.
type operatorTurn chan struct{}

func newOperatorTurn() operatorTurn { return make(operatorTurn, 1) }

// take waits for the turn until ctx ends (false).
func (t operatorTurn) take(ctx context.Context) bool {
	select {
	case t <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// give hands the turn on.
func (t operatorTurn) give() { <-t }

// applied returns how many splits the master applied so far.
func (s *splitter) applied() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initial.Splits + len(s.splits)
}

// keyspace returns the keyspace to split as cl knows it, once it does.
func (s *splitter) keyspace(ctx context.Context, cl *client.Client) (client.Keyspace, bool) {
	for {
		for _, k := range cl.Keyspaces() {
			if k.Name == wire.DefaultKeyspace {
				return k, true
			}
		}
		if !sleep(ctx, splitPoll) {
			return client.Keyspace{}, false
		}
	}
}

// split asks for split n of the keyspace before until the master
// applied it, and records it.
func (s *splitter) split(ctx context.Context, cl *client.Client, n int, before client.Keyspace, due int64) (splitRecord, bool) {
	rec := splitRecord{n: n, from: before.Volumes, due: due}
	s.log.printf("split %d: asking for it (keyspace %s, %d volumes, split %d times)", n, before.Name, before.Volumes, before.Splits)
	for {
		rec.attempts++
		actx, cancel := context.WithTimeout(ctx, splitAttempt)
		k, err := cl.SplitKeyspace(actx, before.Name, before.Splits)
		cancel()
		switch {
		case err == nil && k.Splits == before.Splits+1 && k.Volumes == 2*before.Volumes:
			rec.applied, rec.to, rec.keyspace = s.now(), k.Volumes, k
			s.log.printf("split %d: applied after %s and %d request(s) (%d refused while the last split was starting): %d volumes into %d",
				n, at(rec.applied-due), rec.attempts, rec.refused, rec.from, rec.to)
			s.mu.Lock()
			s.splits = append(s.splits, rec)
			s.mu.Unlock()
			return rec, true
		case err == nil:
			s.stop(fmt.Sprintf("split %d: the master's answer has keyspace %s split %d times with %d volumes, want %d times with %d", n, k.Name, k.Splits, k.Volumes, before.Splits+1, 2*before.Volumes))
			return rec, false
		case errors.Is(err, client.ErrRefused) && strings.Contains(err.Error(), stillSplitting):
			if rec.refused++; rec.refused == 1 {
				s.log.printf("split %d: refused (%v); asking again every %s", n, err, splitRetry)
			}
		case errors.Is(err, client.ErrRefused):
			s.stop(fmt.Sprintf("split %d refused: %v", n, err))
			return rec, false
		case ctx.Err() != nil:
			s.stop(fmt.Sprintf("split %d was not applied (%d requests; the last: %v)", n, rec.attempts, err))
			return rec, false
		}
		if !sleep(ctx, splitRetry) {
			s.stop(fmt.Sprintf("split %d was not applied (%d requests; the last: %v)", n, rec.attempts, err))
			return rec, false
		}
	}
}

// watch polls the status until every volume of split rec's keyspace has
// a chain, and records when.
func (s *splitter) watch(ctx context.Context, cl *client.Client, rec splitRecord) {
	for {
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := cl.Status(sctx)
		cancel()
		waiting := ""
		switch {
		case err != nil:
			waiting = "no status: " + err.Error()
		default:
			started, volumes := client.SplitDone(st, rec.keyspace)
			if started == volumes {
				finished := s.now()
				s.log.printf("split %d: every one of the %d volumes serves, %s after it applied", rec.n, volumes, at(finished-rec.applied))
				s.mu.Lock()
				s.splits[rec.n-1].finished = finished
				s.mu.Unlock()
				return
			}
			waiting = fmt.Sprintf("%d of %d volumes with a chain; without: %s", started, volumes, unstarted(st, rec.keyspace))
		}
		s.mu.Lock()
		s.splits[rec.n-1].waiting = waiting
		s.mu.Unlock()
		if !sleep(ctx, splitPoll) {
			return
		}
	}
}

// unstarted lists the volumes of keyspace k that status st shows without
// a chain.
func unstarted(st *client.ClusterStatus, k client.Keyspace) string {
	chains := map[uint32]bool{}
	for _, v := range st.Volumes {
		chains[v.Volume] = len(v.Chain) > 0
	}
	var out []string
	for _, v := range k.VolumeList() {
		if !chains[v] {
			out = append(out, fmt.Sprint(v))
		}
	}
	return strings.Join(out, ", ")
}

// stop records why the splitter stopped early (the first reason).
func (s *splitter) stop(why string) {
	s.log.printf("splitter: %s", why)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == "" {
		s.failure = why
	}
}

// wait waits until every split of the plan finished or deadline passed
// (then it stops the splitter), and returns the splits applied, the
// keyspace before them, and why not every one finished ("" if all did).
func (s *splitter) wait(deadline time.Time) ([]splitRecord, client.Keyspace, string) {
	select {
	case <-s.done:
	case <-time.After(time.Until(deadline)):
		s.cancel()
		<-s.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	why := s.failure
	for _, rec := range s.splits {
		if why == "" && rec.finished == 0 {
			why = fmt.Sprintf("split %d's new volumes did not all start (the last status: %s)", rec.n, rec.waiting)
		}
	}
	if why == "" && len(s.splits) < len(s.plan) {
		why = fmt.Sprintf("%d of %d splits applied", len(s.splits), len(s.plan))
	}
	return slices.Clone(s.splits), s.initial, why
}

// progress returns the splits of the plan, and how many were applied and
// finished so far.
func (s *splitter) progress() (planned, applied, finished int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.splits {
		if rec.finished != 0 {
			finished++
		}
	}
	return len(s.plan), len(s.splits), finished
}

// splitVerdict checks the splits once the cluster has recovered and the
// final reads are done: every split of the plan applied and finished;
// the keyspace split as many times, with 2^splits times its volumes,
// each with a chain of the run's length; and every volume's contents
// against the final keyspace map and the final reads
// (checkSplitPlacement). The error is for a run interrupted meanwhile.
func (r *run) splitVerdict(ctx context.Context, splits []splitRecord, initial client.Keyspace, unfinished string) (Verdict, error) {
	v := Verdict{Checker: "split"}
	fail := failVerdict(ctx, &v)
	if unfinished != "" {
		return fail(unfinished)
	}
	c := r.sites[0]
	dctx, cancel := context.WithTimeout(ctx, r.o.RecoveryTimeout)
	defer cancel()
	cl, err := client.Dial(dctx, c.MasterAddrs())
	if err != nil {
		return fail("dialing for the split check: " + err.Error())
	}
	defer cl.Close()
	st, err := cl.Status(dctx)
	if err != nil {
		return fail("the cluster's status: " + err.Error())
	}
	var final client.Keyspace
	for _, k := range st.Keyspaces {
		if k.Name == initial.Name {
			final = k
		}
	}
	want := initial.Volumes << len(splits)
	if final.Splits != initial.Splits+len(splits) || final.Volumes != want || len(final.VolumeList()) != want {
		return fail(fmt.Sprintf("keyspace %s: split %d times into %d volumes (listing %d), want %d times into %d",
			initial.Name, final.Splits, final.Volumes, len(final.VolumeList()), initial.Splits+len(splits), want))
	}
	chains := map[uint32]int{}
	for _, vc := range st.Volumes {
		chains[vc.Volume] = len(vc.Chain)
	}
	for _, vol := range final.VolumeList() {
		if chains[vol] != r.o.Replicas {
			return fail(fmt.Sprintf("keyspace %s's volume %d has a chain of %d members, want %d", final.Name, vol, chains[vol], r.o.Replicas))
		}
	}
	if err := AwaitQuiet(ctx, r.sites[:1], final.Name, r.o.RecoveryTimeout); err != nil {
		return fail(err.Error())
	}
	exports := map[uint32][]client.ExportedObject{}
	for _, vol := range final.VolumeList() {
		var objects []client.ExportedObject
		err := cl.ExportVolume(dctx, vol, func(p client.ExportPage) error {
			if p.Restart {
				objects = nil
			}
			objects = append(objects, p.Objects...)
			return nil
		})
		if err != nil {
			return fail(fmt.Sprintf("exporting volume %d: %v", vol, err))
		}
		exports[vol] = objects
	}
	history := r.w.Snapshot()
	problems, keys := checkSplitPlacement(final, exports, finalValues(history))
	if len(problems) > 0 {
		s := strings.Join(problems[:min(len(problems), splitFindingsListed)], "; ")
		if len(problems) > splitFindingsListed {
			s += "; ..."
		}
		return fail(fmt.Sprintf("%d findings: %s", len(problems), s))
	}
	var each []string
	for _, rec := range splits {
		each = append(each, fmt.Sprintf("split %d at %s: %d into %d volumes, applied %s after it was due (%d request(s), %d refused while the last split was starting), every new volume serving %s later",
			rec.n, at(rec.applied), rec.from, rec.to, at(rec.applied-rec.due), rec.attempts, rec.refused, at(rec.finished-rec.applied)))
	}
	v.OK = true
	v.Detail = fmt.Sprintf("%d of %d splits applied and finished (%s); keyspace %s: %d volumes, each with a chain of %d; %d keys moved with operations on both sides of their split (their histories checked across the move); every volume's contents, exported at its tail: %d keys, each in the volume the final map routes it to and in no other, and each of the %d keys read at the end there with the value read (or in no volume, if read absent)",
		len(splits), len(r.sp.plan), strings.Join(each, "; "), final.Name, final.Volumes, r.o.Replicas, movedAcross(history, splits), totalObjects(exports), keys)
	return v, nil
}

// finalValue is what the final read of a key found.
type finalValue struct {
	found bool
	value []byte
}

// finalValues returns, per key, what the last successful final read
// (after healing) found.
func finalValues(history []Record) map[string]finalValue {
	out := map[string]finalValue{}
	for _, h := range history {
		if h.Client == finalClient && h.Outcome == OK && h.Op.Kind == wire.OpGet {
			out[h.Op.Key] = finalValue{found: h.Result.Found, value: h.Result.Value}
		}
	}
	return out
}

// routeIn returns the volume of keyspace k that key belongs to: its
// hash (wire.KeyHash) modulo the volumes, as an index of the volume
// list. It restates placement.VolumeIn for a keyspace without partition
// depth, so the check does not trust the code it checks.
func routeIn(k client.Keyspace, key string) uint32 {
	return k.VolumeList()[wire.KeyHash(key)%uint32(k.Volumes)]
}

// checkSplitPlacement checks the volumes' contents, exports (of every
// volume of keyspace k, whose keys are those of final and perhaps
// others no workload writes), against k's map and the final reads
// (final, by key): every object lies in the volume k routes its key to,
// in no other volume; every key the final reads found is there with the
// value they read, and every key they found absent is absent. It returns
// the problems and how many keys were checked.
func checkSplitPlacement(k client.Keyspace, exports map[uint32][]client.ExportedObject, final map[string]finalValue) (problems []string, keys int) {
	held := map[string]uint32{}
	values := map[string][]byte{}
	for _, vol := range slices.Sorted(maps.Keys(exports)) {
		for _, o := range exports[vol] {
			if other, dup := held[o.Key]; dup {
				problems = append(problems, fmt.Sprintf("%s is in volumes %d and %d", o.Key, other, vol))
				continue
			}
			held[o.Key], values[o.Key] = vol, o.Value
			if want := routeIn(k, o.Key); want != vol {
				problems = append(problems, fmt.Sprintf("%s is in volume %d, the final map routes it to volume %d", o.Key, vol, want))
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(final)) {
		if !strings.HasPrefix(key, k.Prefix) {
			continue
		}
		keys++
		f := final[key]
		vol, ok := held[key]
		switch {
		case f.found && !ok:
			problems = append(problems, fmt.Sprintf("%s: the final read found %s, no volume holds it (volume %d should)", key, short(f.value), routeIn(k, key)))
		case !f.found && ok:
			problems = append(problems, fmt.Sprintf("%s: the final read found it absent, volume %d holds %s", key, vol, short(values[key])))
		case ok && !bytes.Equal(values[key], f.value):
			problems = append(problems, fmt.Sprintf("%s: the final read found %s, volume %d holds %s", key, short(f.value), vol, short(values[key])))
		}
	}
	return problems, keys
}

// movedAcross counts the keys that a split moved and that have an
// operation called before the split applied and one that returned after
// its new volumes served: their histories cross the move.
func movedAcross(history []Record, splits []splitRecord) int {
	type span struct{ first, last int64 }
	spans := map[string]*span{}
	for _, h := range history {
		if h.Client == finalClient {
			continue // the final reads cross every split
		}
		s := spans[h.Op.Key]
		if s == nil {
			s = &span{first: h.Call, last: h.Return}
			spans[h.Op.Key] = s
		}
		s.first, s.last = min(s.first, h.Call), max(s.last, h.Return)
	}
	moved := map[string]bool{}
	for _, rec := range splits {
		for key, s := range spans {
			// With 2n volumes a key moves from index h mod n to h mod 2n.
			if h := wire.KeyHash(key); h%uint32(rec.to) != h%uint32(rec.from) && s.first < rec.applied && s.last > rec.finished {
				moved[key] = true
			}
		}
	}
	return len(moved)
}

func totalObjects(exports map[uint32][]client.ExportedObject) int {
	n := 0
	for _, objects := range exports {
		n += len(objects)
	}
	return n
}
