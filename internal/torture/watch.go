package torture

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// Watches under faults (-watch; docs/adr/0032): before the workloads
// start, the harness starts a watch (client.Watch) of each prefix of the
// register, counter and set keys, in the first site's default keyspace,
// and keeps them running through the faults and the healing. A watch
// that ends (client.Watcher.Err) is resumed from its position after
// watchRetry; and every watchResumeMin to watchResumeMax (drawn from the
// seed) each watch's consumer stalls for watchStall, as one busy with
// its events, then stops, as one that crashed: the watch is resumed from
// the position it reported on its receiving goroutine, the events it
// had not received yet dropped. A watch can be resumed
// without a gap unless every member of a volume lost the changes after
// its position (members keep them in memory: every member restarted,
// a site crash); such a CompactedError is recorded, and the watch goes
// on for that volume from the oldest revision its members hold.
//
// Once the final reads are done, the watch verdict waits until each
// key's last event carries the value its final read found, stops the
// watches and checks every key's events against the history
// (checkWatch): each event a put of a value a client wrote to that key
// with an update not reported unapplied, none delivered twice, in an
// order the history allows (no event after one of an update that began
// after it returned), every acknowledged update delivered, revisions
// growing; a counter's events count 1, 2, 3, ..., a set's each add one
// element to the last. With a gap, the keys that lay in the volume are
// exempt from having every acknowledged update delivered: a run of one
// site, where every member of a volume never restarts at once, fails.

const (
	// watchRetry is the pause before a watch that ended is resumed.
	watchRetry = time.Second
	// A watch is stopped and resumed from its position every
	// watchResumeMin to watchResumeMax, after its consumer stalled for
	// watchStall.
	watchResumeMin = 5 * time.Second
	watchResumeMax = 15 * time.Second
	watchStall     = 250 * time.Millisecond
	// watchStream is the stream of the seed's random numbers the resume
	// times draw from: the other plans stay the same with -watch.
	watchStream = 0x7761746368 // "watch"
	// watchFindingsListed bounds the findings the verdict lists.
	watchFindingsListed = 5
)

// watchPrefixes are the prefixes watched: the register, counter and
// set keys (a watch of every key would cover the causal keyspace too,
// which cannot be watched).
var watchPrefixes = []string{registerPrefix, counterPrefix, setPrefix}

// watchGap is a stretch of a volume's changes a watch could not get:
// every member of the volume answered Compacted.
type watchGap struct {
	prefix string
	volume uint32
	from   int64
	oldest uint64
	at     int64
}

// keyWatch is one prefix's watch: its events by key, and what happened
// to it.
type keyWatch struct {
	prefix string
	rng    *rand.Rand
	// done is closed when run returns.
	done chan struct{}

	mu     sync.Mutex
	events map[string][]client.Event
	count  int
	// resumed counts the resumes on purpose (mid-stream, from the
	// position), unread the events they left in the channel, restarted
	// the resumes after the watch ended with ends.
	resumed, unread, restarted int
	ends                       map[string]int
	gaps                       []watchGap
}

// watchers runs the run's watches.
type watchers struct {
	masters string
	now     func() int64
	log     *eventLog
	seed    uint64
	cancel  context.CancelFunc
	watches []*keyWatch
	// skipped says why no watch runs ("" if they do), failure why not
	// every watch started.
	skipped, failure string
	cl               *client.Client
}

// newWatchers prepares the watches of a run through masters (the first
// site's).
func newWatchers(o Options, masters string, now func() int64, log *eventLog) *watchers {
	return &watchers{masters: masters, now: now, log: log, seed: o.Seed}
}

// start dials, and starts a watch of each prefix once the keyspace is
// known to be strong (else it records why it skips), each running until
// stop: it returns once every watch knows where each of its volumes
// stands, so the workloads that start next are watched from their
// first update. Watches that do not start are the verdict's failure.
func (ws *watchers) start(ctx context.Context, goSafe func(string, func())) {
	dctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	fail := func(why string) {
		ws.failure = why
		ws.log.printf("watch: %s", why)
	}
	cl, err := client.Dial(dctx, ws.masters)
	if err != nil {
		fail("dialing: " + err.Error())
		return
	}
	ks, err := defaultKeyspaceOf(dctx, cl)
	if err != nil {
		cl.Close()
		fail(err.Error())
		return
	}
	if ks.Mode != "strong" {
		cl.Close()
		ws.skipped = fmt.Sprintf("keyspace %s, the register and set workloads', is %s: only strong keyspaces can be watched (docs/adr/0032)", ks.Name, ks.Mode)
		ws.log.printf("watch: skipped: %s", ws.skipped)
		return
	}
	ws.cl = cl
	wctx, stop := context.WithCancel(ctx)
	ws.cancel = stop
	for i, prefix := range watchPrefixes {
		w, err := cl.Watch(wctx, prefix)
		if err != nil {
			fail(fmt.Sprintf("the watch of keys %s* did not start: %v", prefix, err))
			return
		}
		pos, err := awaitKnownPosition(dctx, w)
		if err != nil {
			w.Close()
			fail(fmt.Sprintf("the watch of keys %s* did not start: %v", prefix, err))
			return
		}
		kw := &keyWatch{prefix: prefix, rng: rand.New(rand.NewPCG(ws.seed, watchStream+uint64(i))), done: make(chan struct{}),
			events: map[string][]client.Event{}, ends: map[string]int{}}
		ws.watches = append(ws.watches, kw)
		ws.log.printf("watch: keys %s* watched from %v", prefix, pos)
		goSafe("watch "+prefix, func() { kw.run(wctx, cl, w, ws) })
	}
}

// defaultKeyspaceOf returns the default keyspace as cl knows it, once it
// does.
func defaultKeyspaceOf(ctx context.Context, cl *client.Client) (client.Keyspace, error) {
	for {
		for _, k := range cl.Keyspaces() {
			if k.Name == wire.DefaultKeyspace {
				return k, nil
			}
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return client.Keyspace{}, fmt.Errorf("keyspace %s unknown: %w", wire.DefaultKeyspace, ctx.Err())
		}
	}
}

// awaitKnownPosition waits until w knows the revision of each volume it
// follows, and returns its position.
func awaitKnownPosition(ctx context.Context, w *client.Watcher) (client.WatchPosition, error) {
	for {
		pos, known := w.Position(), true
		for _, at := range pos {
			known = known && at >= 0
		}
		if known && len(pos) > 0 {
			return pos, nil
		}
		if err := w.Err(); err != nil {
			return nil, err
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return nil, fmt.Errorf("no revision of every volume known (%v): %w", pos, ctx.Err())
		}
	}
}

// run takes w's events until ctx ends, resuming the watch from its
// position on purpose now and then, and after it ended.
func (kw *keyWatch) run(ctx context.Context, cl *client.Client, w *client.Watcher, ws *watchers) {
	defer close(kw.done)
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	resume := time.NewTimer(kw.resumeIn())
	defer resume.Stop()
	for {
		select {
		case e, ok := <-w.Events():
			if ok {
				kw.record(e)
				continue
			}
			// Ended, and the channel drained: its position is where it
			// ended.
			if ctx.Err() != nil {
				return
			}
			pos := w.Position()
			err := w.Err()
			if cerr := (*client.CompactedError)(nil); errors.As(err, &cerr) {
				g := watchGap{prefix: kw.prefix, volume: cerr.Volume, from: pos[cerr.Volume], oldest: cerr.Oldest, at: ws.now()}
				ws.log.printf("watch: keys %s*: volume %d compacted after revision %d, every member holding only from %d on: going on from there", kw.prefix, g.volume, g.from, g.oldest)
				pos[cerr.Volume] = int64(cerr.Oldest)
				kw.mu.Lock()
				kw.gaps = append(kw.gaps, g)
				kw.mu.Unlock()
			} else {
				ws.log.printf("watch: keys %s* ended (%v); resuming from %v in %s", kw.prefix, err, pos, watchRetry)
			}
			kw.mu.Lock()
			kw.restarted++
			kw.ends[endKind(err)]++
			kw.mu.Unlock()
			if !sleep(ctx, watchRetry) {
				return
			}
			if w = kw.resume(ctx, cl, pos); w == nil {
				return
			}
		case <-resume.C:
			// A consumer that stalls (the watch goes on filling the
			// channel), then stops: its position is through the events
			// it received; those still in the channel are dropped, and
			// the watch resumed from the position delivers them again.
			if !sleep(ctx, watchStall) {
				return
			}
			pos := w.Position()
			unread := len(w.Events())
			w.Close()
			kw.mu.Lock()
			kw.resumed++
			kw.unread += unread
			kw.mu.Unlock()
			if w = kw.resume(ctx, cl, pos); w == nil {
				return
			}
			resume.Reset(kw.resumeIn())
		case <-ctx.Done():
			return
		}
	}
}

// resume starts the watch again from pos, trying until ctx ends (nil).
func (kw *keyWatch) resume(ctx context.Context, cl *client.Client, pos client.WatchPosition) *client.Watcher {
	for {
		w, err := cl.Watch(ctx, kw.prefix, client.WatchFrom(pos))
		if err == nil {
			return w
		}
		if !sleep(ctx, watchRetry) {
			return nil
		}
	}
}

// resumeIn draws the time until the next resume on purpose.
func (kw *keyWatch) resumeIn() time.Duration {
	return watchResumeMin + time.Duration(kw.rng.Int64N(int64(watchResumeMax-watchResumeMin)))
}

func (kw *keyWatch) record(e client.Event) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	kw.events[e.Key] = append(kw.events[e.Key], e)
	kw.count++
}

// endKind names an error a watch ended with, for the counts.
func endKind(err error) string {
	switch {
	case errors.Is(err, client.ErrCompacted):
		return "compacted"
	case errors.Is(err, client.ErrClosed):
		return "client closed"
	case errors.Is(err, client.ErrInvalid):
		return "invalid"
	case errors.Is(err, client.ErrDenied):
		return "denied"
	case err == nil:
		return "no error"
	}
	return "other: " + err.Error()
}

// events returns every watch's events by key, and their count.
func (ws *watchers) events() (map[string][]client.Event, int) {
	out := map[string][]client.Event{}
	n := 0
	for _, kw := range ws.watches {
		kw.mu.Lock()
		for key, list := range kw.events {
			out[key] = slices.Clone(list)
		}
		n += kw.count
		kw.mu.Unlock()
	}
	return out, n
}

// progress returns the events delivered so far.
func (ws *watchers) progress() int {
	_, n := ws.events()
	return n
}

// stop ends the watches and waits for them.
func (ws *watchers) stop() {
	if ws.cancel != nil {
		ws.cancel()
	}
	for _, kw := range ws.watches {
		<-kw.done
	}
	if ws.cl != nil {
		ws.cl.Close()
		ws.cl = nil
	}
}

// watchVerdict waits, until deadline, for each watched key's last event
// to carry the value its final read found, stops the watches and
// checks their events against the history: the watch verdict. The
// error is for a run interrupted meanwhile.
func (r *run) watchVerdict(ctx context.Context, deadline time.Time) (Verdict, error) {
	v := Verdict{Checker: "watch"}
	fail := failVerdict(ctx, &v)
	ws := r.wt
	switch {
	case ws.failure != "":
		ws.stop()
		return fail(ws.failure)
	case ws.skipped != "":
		ws.stop()
		v.OK, v.Detail = true, "skipped: "+ws.skipped
		return v, nil
	}
	history := r.w.Snapshot()
	finals := finalValues(history)
	gaps := ws.gaps()
	exempt, err := r.gapKeys(ctx, history, gaps)
	if err != nil {
		ws.stop()
		return fail("the keys of the volumes compacted: " + err.Error())
	}
	var behind []string
	for {
		events, _ := ws.events()
		behind = watchBehind(events, finals, exempt)
		if len(behind) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 100*time.Millisecond)
	}
	ws.stop()
	if ctx.Err() != nil {
		return Verdict{}, interrupted(ctx)
	}
	events, n := ws.events()
	problems, c := checkWatch(history, events, exempt)
	if len(behind) > 0 {
		problems = append([]string{fmt.Sprintf("%d keys' last event not their final read's value %s after the final reads (%s)", len(behind), r.o.RecoveryTimeout, listSome(behind))}, problems...)
	}
	if len(gaps) > 0 && !r.gapsExpected() {
		problems = append([]string{fmt.Sprintf("%d volume(s) compacted past a watch's position (%s), with no fault that restarts every member of a volume at once", len(gaps), describeGaps(gaps))}, problems...)
	}
	if len(problems) > 0 {
		s := strings.Join(problems[:min(len(problems), watchFindingsListed)], "; ")
		if len(problems) > watchFindingsListed {
			s += "; ..."
		}
		return fail(fmt.Sprintf("%d findings: %s", len(problems), s))
	}
	var resumed, unread, restarted int
	ends := map[string]int{}
	for _, kw := range ws.watches {
		resumed += kw.resumed
		unread += kw.unread
		restarted += kw.restarted
		for k, n := range kw.ends {
			ends[k] += n
		}
	}
	var endList []string
	for _, k := range slices.Sorted(maps.Keys(ends)) {
		endList = append(endList, fmt.Sprintf("%s %d", k, ends[k]))
	}
	restarts := fmt.Sprintf("%d times after the watch ended", restarted)
	if restarted > 0 {
		restarts += " (" + strings.Join(endList, ", ") + ")"
	}
	v.OK = true
	v.Detail = fmt.Sprintf("%d watches (keys %s*) resumed from their positions %d times mid-stream (leaving %d events unread in their channels, delivered again) and %s; %d events of %d keys: all %d acknowledged updates delivered once and %d of %d unknown ones, none twice, none unwritten or reported unapplied, each key's in an order the history allows, its revisions growing, its last event its final read's value",
		len(ws.watches), strings.Join(watchPrefixes, "*, "), resumed, unread, restarts, n, len(events), c.acked, c.unknownDelivered, c.unknown)
	if len(gaps) > 0 {
		v.Detail += fmt.Sprintf("; %d volume(s) compacted past a watch's position (%s): the %d keys that lay there not required to have every acknowledged update delivered", len(gaps), describeGaps(gaps), len(exempt))
	}
	return v, nil
}

// gaps returns every watch's gaps.
func (ws *watchers) gaps() []watchGap {
	var out []watchGap
	for _, kw := range ws.watches {
		kw.mu.Lock()
		out = append(out, kw.gaps...)
		kw.mu.Unlock()
	}
	return out
}

// gapsExpected reports whether the run's faults may restart every member
// of a volume at once (a site crash), so that a watch finds its volume
// compacted.
func (r *run) gapsExpected() bool {
	return r.o.Sites > 1 && slices.Contains(r.o.Nemesis, SiteCrash)
}

func describeGaps(gaps []watchGap) string {
	var out []string
	for _, g := range gaps {
		out = append(out, fmt.Sprintf("keys %s* in volume %d after revision %d, held from %d on, at %s", g.prefix, g.volume, g.from, g.oldest, at(g.at)))
	}
	return listSome(out)
}

// gapKeys returns the keys of the history that lay, at any split of the
// default keyspace, in a volume of a gap.
func (r *run) gapKeys(ctx context.Context, history []Record, gaps []watchGap) (map[string]bool, error) {
	if len(gaps) == 0 {
		return nil, nil
	}
	dctx, cancel := context.WithTimeout(ctx, r.o.RecoveryTimeout)
	defer cancel()
	cl, err := client.Dial(dctx, r.sites[0].MasterAddrs())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	st, err := cl.Status(dctx)
	if err != nil {
		return nil, err
	}
	var ks client.Keyspace
	for _, k := range st.Keyspaces {
		if k.Name == wire.DefaultKeyspace {
			ks = k
		}
	}
	gapped := map[uint32]bool{}
	for _, g := range gaps {
		gapped[g.volume] = true
	}
	out := map[string]bool{}
	for _, h := range history {
		if out[h.Op.Key] || !watchedKey(h.Op.Key) {
			continue
		}
		for _, v := range volumesOfKey(ks, h.Op.Key) {
			if gapped[v] {
				out[h.Op.Key] = true
			}
		}
	}
	return out, nil
}

// volumesOfKey returns the volumes keyspace k routed key to, before each
// of its splits and after the last: with 2^s times the volumes it had
// first, after s splits, the volume at the key's hash modulo their count
// in the volume list (whose first volumes are the older ones).
func volumesOfKey(k client.Keyspace, key string) []uint32 {
	list := k.VolumeList()
	var out []uint32
	for s := 0; s <= k.Splits; s++ {
		n := k.Volumes >> (k.Splits - s)
		if n <= 0 || n > len(list) {
			continue
		}
		out = append(out, list[wire.KeyHash(key)%uint32(n)])
	}
	return out
}

func watchedKey(key string) bool {
	return slices.ContainsFunc(watchPrefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}

// watchBehind returns the keys, not exempt, whose last event does not
// carry the value their final read found (none: found absent).
func watchBehind(events map[string][]client.Event, finals map[string]finalValue, exempt map[string]bool) []string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(finals)) {
		f := finals[key]
		if !watchedKey(key) || exempt[key] {
			continue
		}
		list := events[key]
		switch {
		case !f.found && len(list) > 0, f.found && (len(list) == 0 || string(list[len(list)-1].Value) != string(f.value)):
			out = append(out, key)
		}
	}
	return out
}

// watchCounts are what checkWatch counted: the acknowledged updates
// (each delivered once, if no finding says otherwise), and the updates
// of unknown outcome, of which unknownDelivered were.
type watchCounts struct {
	acked, unknown, unknownDelivered int
}

// checkWatch checks the watches' events, by key, against the history
// (the final reads included); keys in exempt need not have every
// acknowledged update delivered (a gap). It returns the problems found.
func checkWatch(history []Record, events map[string][]client.Event, exempt map[string]bool) ([]string, watchCounts) {
	updates := map[string][]Record{}
	for _, h := range history {
		if watchedKey(h.Op.Key) && !h.Op.Kind.IsQuery() {
			updates[h.Op.Key] = append(updates[h.Op.Key], h)
		}
	}
	var problems []string
	var c watchCounts
	keys := slices.Sorted(maps.Keys(updates))
	for key := range events {
		if _, ok := updates[key]; !ok {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		list, recs := events[key], updates[key]
		if !watchedKey(key) {
			problems = append(problems, fmt.Sprintf("%s: %d events of a key no watch covers", key, len(list)))
			continue
		}
		if p := checkEventOrder(key, list); p != "" {
			problems = append(problems, p)
			continue
		}
		var p []string
		if strings.HasPrefix(key, counterPrefix) {
			p = checkCounterEvents(key, list, recs, exempt[key], &c)
		} else {
			p = checkWriteEvents(key, list, recs, exempt[key], &c)
		}
		problems = append(problems, p...)
	}
	return problems, c
}

// checkEventOrder checks that a key's events are puts at growing
// revisions.
func checkEventOrder(key string, list []client.Event) string {
	for i, e := range list {
		switch {
		case e.Kind != client.EventPut:
			return fmt.Sprintf("%s: event %d (revision %d) is a %v; the workloads only write", key, i, e.Revision, e.Kind)
		case i > 0 && e.Revision == list[i-1].Revision && e.Volume == list[i-1].Volume:
			return fmt.Sprintf("%s: events %d and %d are both revision %d: delivered twice", key, i-1, i, e.Revision)
		case i > 0 && e.Revision <= list[i-1].Revision:
			return fmt.Sprintf("%s: event %d at revision %d after revision %d", key, i, e.Revision, list[i-1].Revision)
		}
	}
	return ""
}

// checkWriteEvents checks a register's or a set's events. A register's
// event carries the value a put or compare-and-set wrote; a set's adds
// one element to the set the last event carried (several, after a
// gap). Each must be an update of that key not reported unapplied (nor
// a compare-and-set that failed), delivered once; an event may not
// follow an update's that began after its own update returned (an
// unknown outcome never returned); every acknowledged update must be
// delivered, unless the key is exempt.
func checkWriteEvents(key string, list []client.Event, recs []Record, exempt bool, c *watchCounts) []string {
	set := strings.HasPrefix(key, setPrefix)
	written := map[string]*Record{}
	for i := range recs {
		written[string(recs[i].Op.Value)] = &recs[i]
	}
	var problems []string
	delivered := map[string]int{} // update value → event
	var latest *Record            // the update delivered so far that was called last
	prev := ""
	for i, e := range list {
		value := string(e.Value)
		var parts []string // the update values the event delivers
		switch {
		case !set:
			parts = []string{value}
		case !strings.HasPrefix(value, prev):
			what := "orders its elements otherwise"
			if missing := firstMissing([]byte(prev), e.Value); missing != "" {
				what = fmt.Sprintf("lacks the element %q", missing)
			}
			return append(problems, fmt.Sprintf("%s: event %d (revision %d) does not extend event %d's set of %d elements: it %s", key, i, e.Revision, i-1, len(strings.Fields(prev)), what))
		default:
			for _, el := range strings.SplitAfter(value[len(prev):], " ") {
				if el != "" {
					parts = append(parts, el)
				}
			}
			if len(parts) != 1 && !exempt {
				return append(problems, fmt.Sprintf("%s: event %d (revision %d) adds %q to event %d's set: %d elements, want one", key, i, e.Revision, value[len(prev):], i-1, len(parts)))
			}
		}
		prev = value
		for _, part := range parts {
			r := written[part]
			switch {
			case r == nil:
				return append(problems, fmt.Sprintf("%s: event %d (revision %d) delivers %s, which no client wrote there", key, i, e.Revision, short([]byte(part))))
			case r.Outcome == Failed:
				return append(problems, fmt.Sprintf("%s: event %d (revision %d) delivers the %s", key, i, e.Revision, r.describe()))
			case r.Outcome == OK && !r.tookEffect():
				return append(problems, fmt.Sprintf("%s: event %d (revision %d) delivers the value of the %s", key, i, e.Revision, r.describe()))
			}
			if j, twice := delivered[part]; twice {
				return append(problems, fmt.Sprintf("%s: events %d and %d (revisions %d and %d) both deliver the %s", key, j, i, list[j].Revision, e.Revision, r.describe()))
			}
			delivered[part] = i
			if latest != nil && r.Outcome == OK && r.Return < latest.Call {
				return append(problems, fmt.Sprintf("%s: event %d (revision %d) delivers the %s after the %s, called after it returned", key, i, e.Revision, r.describe(), latest.describe()))
			}
			if latest == nil || r.Call > latest.Call {
				latest = r
			}
		}
	}
	for i := range recs {
		r := &recs[i]
		_, ok := delivered[string(r.Op.Value)]
		switch {
		case r.tookEffect():
			c.acked++
			if !ok && !exempt {
				problems = append(problems, fmt.Sprintf("%s: the %s was never delivered", key, r.describe()))
			}
		case r.Outcome == Unknown:
			c.unknown++
			if ok {
				c.unknownDelivered++
			}
		}
	}
	return problems
}

// checkCounterEvents checks a counter's events: each increment by 1
// once, so the counts 1, 2, 3, ... (growing counts after a gap), as many
// as the acknowledged increments at least (unless exempt) and as the
// increments not reported unapplied at most; every acknowledged
// increment's count among them.
func checkCounterEvents(key string, list []client.Event, recs []Record, exempt bool, c *watchCounts) []string {
	acked, unknown := 0, 0
	highest := int64(0)
	for _, r := range recs {
		switch {
		case r.tookEffect():
			acked++
			if n, err := strconv.ParseInt(string(r.Result.Value), 10, 64); err == nil {
				highest = max(highest, n)
			}
		case r.Outcome == Unknown:
			unknown++
		}
	}
	c.acked += acked
	c.unknown += unknown
	c.unknownDelivered += max(0, min(len(list)-acked, unknown))
	last := int64(0)
	for i, e := range list {
		n, err := strconv.ParseInt(string(e.Value), 10, 64)
		switch {
		case err != nil:
			return []string{fmt.Sprintf("%s: event %d (revision %d) delivers %s, not a count", key, i, e.Revision, short(e.Value))}
		case !exempt && n != last+1, exempt && n <= last:
			return []string{fmt.Sprintf("%s: event %d (revision %d) delivers the count %d after %d: each increment by 1 once, in order, wants %d", key, i, e.Revision, n, last, last+1)}
		}
		last = n
	}
	switch {
	case last > int64(acked+unknown):
		return []string{fmt.Sprintf("%s: the events count to %d, but only %d increments were acknowledged and %d of unknown outcome", key, last, acked, unknown)}
	case !exempt && (len(list) < acked || last < highest):
		return []string{fmt.Sprintf("%s: %d events, counting to %d, for %d acknowledged increments (the highest answered %d)", key, len(list), last, acked, highest)}
	}
	return nil
}
