package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/causalwork"
	"github.com/catena-kv/catena/internal/wire"
)

// Outcome is what a client learned of an operation.
type Outcome uint8

const (
	// OK: the operation took effect and Result is its result.
	OK Outcome = iota
	// Unknown: an update whose outcome the client never learned (its
	// deadline passed after it was sent): it may or may not have taken
	// effect, at any time after Call.
	Unknown
	// Failed: the client reports that the operation did not take effect
	// (unavailable before it was sent, or a read that got no answer).
	Failed
)

func (o Outcome) String() string { return [...]string{"ok", "unknown", "failed"}[o] }

// Record is one operation of the history.
type Record struct {
	// Set marks the set workload's operations (appends of unique
	// elements and reads of set keys); the others are the registers'.
	Set    bool
	Client int
	Op     wire.Op
	// Call and Return are nanoseconds since the run started.
	Call, Return int64
	Outcome      Outcome
	Result       wire.Result
	// Err is the client's error, if any.
	Err string
}

// Workload shape. Keys are retired after a number of operations, so each
// key's history stays short enough for porcupine however long the run
// (Jepsen's independent keys).
const (
	registerSlots   = 12
	counterSlots    = 4
	setSlots        = 4
	opsPerKey       = 150
	appendsPerKey   = 300
	registerClients = 6
	setClients      = 2
	// finalClient is the client id of the reads after healing.
	finalClient = 1000
)

// The workloads' keys start with r (registers), n (counters) or a
// (sets), then the slot and the key's generation: r3.0, a1.7.
const (
	registerPrefix = "r"
	counterPrefix  = "n"
	setPrefix      = "a"
)

func isSetKey(key string) bool { return strings.HasPrefix(key, setPrefix) }

// The causal workload: sessions of a causal keyspace (ChainReaction's
// causal+ mode, k of the chain's t replicas answering writes; in a run of
// several sites, replicated by every site, with sessions at each) that
// write unique values to a few keys and read them, checked by causalwork:
// causal+, convergence of the final reads (across sites too), no lost
// acknowledged write.
const (
	// causalClients is the causal sessions per site.
	causalClients  = 2
	causalKeyCount = 8
	causalPrefix   = "c/"
	causalVolumes  = 2
)

// causalKeyspace is the causal workload's keyspace for chains of t
// replicas, replicated by sites 1 to sites: writes are answered after a
// majority of a site's replicas.
func causalKeyspace(t, sites int) client.Keyspace {
	k := client.Keyspace{Name: "causal", Prefix: causalPrefix, Mode: "causal", K: t/2 + 1, Replicas: t, Volumes: causalVolumes}
	if sites > 1 {
		for id := 1; id <= sites; id++ {
			k.Sites = append(k.Sites, uint32(id))
		}
	}
	return k
}

// keyRing hands out keys: slots of live keys, each replaced by a fresh
// one after perKey uses.
type keyRing struct {
	mu     sync.Mutex
	prefix string
	perKey int
	gen    []int
	uses   []int
	all    []string
}

func newKeyRing(prefix string, slots, perKey int) *keyRing {
	r := &keyRing{prefix: prefix, perKey: perKey, gen: make([]int, slots), uses: make([]int, slots)}
	for i := range slots {
		r.all = append(r.all, r.key(i))
	}
	return r
}

func (r *keyRing) key(slot int) string { return fmt.Sprintf("%s%d.%d", r.prefix, slot, r.gen[slot]) }

// next returns a live key chosen by rng.
func (r *keyRing) next(rng *rand.Rand) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := rng.IntN(len(r.gen))
	k := r.key(slot)
	if r.uses[slot]++; r.uses[slot] >= r.perKey {
		r.uses[slot] = 0
		r.gen[slot]++
		r.all = append(r.all, r.key(slot))
	}
	return k
}

// keys returns every key handed out so far (and the live ones).
func (r *keyRing) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.all...)
}

// workload runs the clients and records the history.
type workload struct {
	start time.Time
	// masters are the masters of the site the register and set clients
	// use (the first); causalMasters each site's, in order.
	masters       string
	causalMasters []string
	seed          uint64
	rate          float64
	timeout       time.Duration
	registers     *keyRing
	counters      *keyRing
	sets          *keyRing
	// causal records the causal sessions' history; causalKeys are the
	// keys they use.
	causal     *causalwork.Workload
	causalKeys []string

	mu      sync.Mutex
	history []Record
	// counts by outcome, and acknowledged updates.
	ok, unknown, failed, ackedUpdates int

	wg sync.WaitGroup
}

func newWorkload(start time.Time, causalMasters []string, seed uint64, rate float64, timeout time.Duration) *workload {
	w := &workload{
		start: start, masters: causalMasters[0], causalMasters: causalMasters, seed: seed, rate: rate, timeout: timeout,
		registers: newKeyRing(registerPrefix, registerSlots, opsPerKey),
		counters:  newKeyRing(counterPrefix, counterSlots, opsPerKey),
		sets:      newKeyRing(setPrefix, setSlots, appendsPerKey),
		causal:    causalwork.New(start),
	}
	for i := range causalKeyCount {
		w.causalKeys = append(w.causalKeys, fmt.Sprintf("%sk%d", causalPrefix, i))
	}
	return w
}

func (w *workload) now() int64 { return int64(time.Since(w.start)) }

// run starts the clients; they stop when ctx ends, after the operation
// they are in. Wait for them with wait.
func (w *workload) run(ctx context.Context, goSafe func(string, func())) error {
	clients := registerClients + setClients + causalClients*len(w.causalMasters)
	interval := time.Duration(float64(clients) / w.rate * float64(time.Second))
	for i := range clients {
		masters := w.masters
		if j := i - registerClients - setClients; j >= 0 {
			masters = w.causalMasters[j%len(w.causalMasters)]
		}
		// Half the register clients read from any chain member (CRAQ),
		// half from the tail: one history, checked as a whole.
		consistency := client.Strong
		if i < registerClients && i%2 == 1 {
			consistency = client.AnyMember
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cl, err := client.Dial(dctx, masters, client.Options{Consistency: consistency})
		cancel()
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		var session *causalwork.Session
		if i >= registerClients+setClients {
			// Its client stays open for the final reads (finalCausalReads).
			session = w.causal.NewSession(cl, w.timeout)
		}
		w.wg.Add(1)
		goSafe(fmt.Sprintf("client %d", i), func() {
			defer w.wg.Done()
			if session == nil {
				defer cl.Close()
			}
			rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
			state := map[string][]byte{} // the last value this client saw per register
			pace := newPacer(rng, interval)
			for n := 0; ; n++ {
				if !pace.wait(ctx) {
					return
				}
				switch {
				case i < registerClients:
					w.registerOp(cl, i, n, rng, state)
				case session == nil:
					w.setOp(cl, i, n, rng)
				default:
					w.causalOp(session, i, n, rng)
				}
			}
		})
	}
	return nil
}

func (w *workload) wait() { w.wg.Wait() }

// registerOp runs one random register or counter operation: reads,
// unique writes, compare-and-sets and increments.
func (w *workload) registerOp(cl *client.Client, id, n int, rng *rand.Rand, state map[string][]byte) {
	value := []byte(fmt.Sprintf("c%d.%d", id, n))
	var op wire.Op
	switch p := rng.IntN(100); {
	case p < 30:
		op = wire.Op{Kind: wire.OpGet, Key: w.registers.next(rng)}
	case p < 55:
		op = wire.Op{Kind: wire.OpPut, Key: w.registers.next(rng), Value: value}
	case p < 75:
		key := w.registers.next(rng)
		if prior, ok := state[key]; ok {
			op = wire.Op{Kind: wire.OpCompareAndSet, Key: key, Expected: prior, Value: value}
		} else {
			op = wire.Op{Kind: wire.OpCompareAndSet, Key: key, ExpectAbsent: true, Value: value}
		}
	case p < 90:
		op = wire.Op{Kind: wire.OpIncrement, Key: w.counters.next(rng), Delta: 1}
	default:
		op = wire.Op{Kind: wire.OpGet, Key: w.counters.next(rng)}
	}
	rec := w.do(cl, id, op)
	if rec.Outcome == OK {
		switch {
		case op.Kind == wire.OpGet && rec.Result.Found:
			state[op.Key] = rec.Result.Value
		case op.Kind == wire.OpPut, op.Kind == wire.OpCompareAndSet && rec.Result.Status == wire.StatusOK:
			state[op.Key] = op.Value
		case op.Kind == wire.OpCompareAndSet && rec.Result.Found:
			state[op.Key] = rec.Result.Value
		}
	}
}

// setOp appends a unique element to a set key, or reads one.
func (w *workload) setOp(cl *client.Client, id, n int, rng *rand.Rand) {
	if rng.IntN(100) < 80 {
		w.do(cl, id, wire.Op{Kind: wire.OpAppend, Key: w.sets.next(rng), Value: []byte(fmt.Sprintf("%d.%d ", id, n))})
		return
	}
	w.do(cl, id, wire.Op{Kind: wire.OpGet, Key: w.sets.next(rng)})
}

// causalOp writes a unique value to a causal key, or reads one.
func (w *workload) causalOp(s *causalwork.Session, id, n int, rng *rand.Rand) {
	key := w.causalKeys[rng.IntN(len(w.causalKeys))]
	if rng.IntN(2) == 0 {
		w.causal.Get(s, key, false, 0)
		return
	}
	w.causal.Put(s, key, fmt.Sprintf("c%d.%d", id, n))
}

// do runs op through the public client, turns what the API returns back
// into the wire result the model (check.Model, kv.Apply) specifies, and
// records it.
func (w *workload) do(cl *client.Client, id int, op wire.Op) Record {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	rec := Record{Set: isSetKey(op.Key), Client: id, Op: op, Call: w.now()}
	r := &rec.Result
	var err error
	switch op.Kind {
	case wire.OpGet:
		r.Value, r.Found, err = cl.Get(ctx, op.Key)
	case wire.OpPut:
		err = cl.Put(ctx, op.Key, op.Value)
		*r = wire.Result{Found: true}
	case wire.OpCompareAndSet:
		var swapped bool
		if op.ExpectAbsent {
			swapped, r.Value, err = cl.PutIfAbsent(ctx, op.Key, op.Value)
			r.Found = !swapped
		} else {
			swapped, r.Value, r.Found, err = cl.CompareAndSet(ctx, op.Key, op.Expected, op.Value)
		}
		if !swapped {
			r.Status = wire.StatusCompareFailed
		}
	case wire.OpIncrement:
		var v int64
		v, err = cl.Increment(ctx, op.Key, op.Delta)
		*r = wire.Result{Found: true, Value: []byte(strconv.FormatInt(v, 10))}
		if errors.Is(err, client.ErrNotInteger) {
			*r, err = wire.Result{Status: wire.StatusNotInteger, Found: true}, nil
		}
	case wire.OpAppend:
		r.Value, err = cl.Append(ctx, op.Key, op.Value)
		r.Found = true
	}
	rec.Return = w.now()
	switch {
	case err == nil:
		rec.Outcome = OK
	case errors.Is(err, client.ErrUnavailable):
		rec.Outcome = Failed // nothing applied, the client says; checked
	case op.Kind.IsQuery():
		rec.Outcome = Failed // a read without an answer has no effect
	default:
		rec.Outcome = Unknown
	}
	if err != nil {
		rec.Result, rec.Err = wire.Result{}, err.Error()
	}
	w.record(rec)
	return rec
}

func (w *workload) record(rec Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history = append(w.history, rec)
	switch rec.Outcome {
	case OK:
		w.ok++
		if !rec.Op.Kind.IsQuery() {
			w.ackedUpdates++
		}
	case Unknown:
		w.unknown++
	case Failed:
		w.failed++
	}
}

// counts returns the operations so far: in all, and by outcome, and the
// acknowledged updates.
func (w *workload) counts() (ops, ok, unknown, failed, acked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.history), w.ok, w.unknown, w.failed, w.ackedUpdates
}

// Snapshot returns a copy of the history so far.
func (w *workload) Snapshot() []Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Record(nil), w.history...)
}

// finalReads reads every key the run used, once the cluster has healed,
// retrying each until deadline; the reads join the history (so a lost
// acknowledged write shows in the checks). It returns the keys it could
// not read: once the deadline passed, every key not read yet, without
// trying (each try may take the operation timeout, and a cluster that
// did not answer until then fails the run anyway).
func (w *workload) finalReads(ctx context.Context, deadline time.Time) ([]string, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	cl, err := client.Dial(dctx, w.masters)
	if err != nil {
		return nil, fmt.Errorf("dialing for the final reads: %w", err)
	}
	defer cl.Close()
	var unread []string
	for _, ring := range []*keyRing{w.registers, w.counters, w.sets} {
		for _, key := range ring.keys() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				unread = append(unread, key)
				continue
			}
			for {
				rec := w.do(cl, finalClient, wire.Op{Kind: wire.OpGet, Key: key})
				if rec.Outcome == OK {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					unread = append(unread, key)
					break
				}
				sleep(ctx, 100*time.Millisecond)
			}
		}
	}
	return unread, nil
}

// finalCausalReads has every causal session read every causal key once
// the cluster has healed and the causal chains are quiet, closes the
// sessions' clients, and returns what the causal workload recorded.
func (w *workload) finalCausalReads(deadline time.Time) (causalwork.Report, error) {
	_, err := w.causal.FinalReads(w.causalKeys, deadline)
	for _, s := range w.causal.Sessions() {
		s.Client().Close()
	}
	return w.causal.Report(w.causalKeys), err
}

// pacer spaces one client's operations interval apart, from a random
// start within the first interval.
type pacer struct {
	next     time.Time
	interval time.Duration
}

func newPacer(rng *rand.Rand, interval time.Duration) *pacer {
	return &pacer{next: time.Now().Add(time.Duration(rng.Int64N(int64(interval)))), interval: interval}
}

// wait sleeps until the next operation is due; false once ctx ended. A
// client behind (faults, slow answers) goes on at once, without a burst
// to catch up.
func (p *pacer) wait(ctx context.Context) bool {
	if !sleep(ctx, time.Until(p.next)) {
		return false
	}
	p.next = p.next.Add(p.interval)
	if now := time.Now(); p.next.Before(now) {
		p.next = now
	}
	return true
}
