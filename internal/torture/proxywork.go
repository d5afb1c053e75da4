package torture

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// The proxy workload: a few Redis connections (go-redis) through the
// cluster's catena proxy, each writing unique values to a few keys with
// SET and reading them with GET, recorded as a history of puts and gets.
// The proxy is replaced during an upgrade, so some operations fail or
// end unknown then; no acknowledged SET may be lost (checkProxy).
const (
	proxyClients = 2
	// proxyRate is the proxy clients' operations per second, in all.
	proxyRate   = 20
	proxySlots  = 4
	proxyPrefix = "x"
	// proxyClientBase numbers the proxy clients, apart from the others.
	proxyClientBase = 100
	// proxyDialTimeout bounds one connection attempt to the proxy.
	proxyDialTimeout = time.Second
)

// proxyWorkload runs the proxy clients and records their history.
type proxyWorkload struct {
	start   time.Time
	addr    string
	seed    uint64
	timeout time.Duration
	keys    *keyRing

	mu      sync.Mutex
	history []Record
	ok      int

	wg sync.WaitGroup
}

func newProxyWorkload(start time.Time, addr string, seed uint64, timeout time.Duration) *proxyWorkload {
	return &proxyWorkload{start: start, addr: addr, seed: seed, timeout: timeout, keys: newKeyRing(proxyPrefix, proxySlots, opsPerKey)}
}

// quietRedis silences go-redis's own log (a line on standard error per
// failed dial, which the proxy's restarts make): the history records
// every error.
var quietRedis sync.Once

// discard is a go-redis logger that prints nothing.
type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

// redisClient returns a client of one connection to the proxy that never
// retries a command by itself (a retried SET would blur its outcome).
func redisClient(addr string, timeout time.Duration) *redis.Client {
	quietRedis.Do(func() { redis.SetLogger(discard{}) })
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxRetries: -1,
		DialTimeout: proxyDialTimeout, DialerRetries: 1, ReadTimeout: timeout, WriteTimeout: timeout})
}

// proxyAnswers reports whether the proxy at addr answers a PING.
func proxyAnswers(ctx context.Context, addr string) error {
	rc := redisClient(addr, statusTimeout)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	return rc.Ping(ctx).Err()
}

// awaitProxy polls the proxy at addr until it answers, or timeout.
func awaitProxy(ctx context.Context, addr string, timeout time.Duration) error {
	return awaitCondition(ctx, timeout, "the proxy does not answer", func() string {
		if err := proxyAnswers(ctx, addr); err != nil {
			return err.Error()
		}
		return ""
	})
}

// run starts the clients; they stop when ctx ends, after the operation
// they are in. Wait for them with wait.
func (w *proxyWorkload) run(ctx context.Context, goSafe func(string, func())) {
	interval := time.Duration(float64(proxyClients) / proxyRate * float64(time.Second))
	for i := range proxyClients {
		id := proxyClientBase + i
		rc := redisClient(w.addr, w.timeout)
		w.wg.Add(1)
		goSafe(fmt.Sprintf("proxy client %d", id), func() {
			defer w.wg.Done()
			defer rc.Close()
			rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
			pace := newPacer(rng, interval)
			for n := 0; ; n++ {
				if !pace.wait(ctx) {
					return
				}
				op := wire.Op{Kind: wire.OpGet, Key: w.keys.next(rng)}
				if rng.IntN(100) < 60 {
					op = wire.Op{Kind: wire.OpPut, Key: op.Key, Value: []byte(fmt.Sprintf("p%d.%d", id, n))}
				}
				w.do(rc, id, op)
			}
		})
	}
}

func (w *proxyWorkload) wait() { w.wg.Wait() }

// do runs op (SET or GET) through rc and records it. An error before
// the command could be sent (no connection) fails it; a GET that gets
// no answer failed too; a SET that gets an error is unknown: the proxy
// may have applied it.
func (w *proxyWorkload) do(rc *redis.Client, id int, op wire.Op) Record {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	rec := Record{Client: id, Op: op, Call: int64(time.Since(w.start))}
	var err error
	if op.Kind == wire.OpPut {
		err = rc.Set(ctx, op.Key, op.Value, 0).Err()
		rec.Result = wire.Result{Found: true}
	} else {
		var v string
		v, err = rc.Get(ctx, op.Key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			err = nil
		case err == nil:
			rec.Result = wire.Result{Found: true, Value: []byte(v)}
		}
	}
	rec.Return = int64(time.Since(w.start))
	var opErr *net.OpError
	switch {
	case err == nil:
		rec.Outcome = OK
	case errors.As(err, &opErr) && opErr.Op == "dial", op.Kind.IsQuery():
		rec.Outcome = Failed
	default:
		rec.Outcome = Unknown
	}
	if err != nil {
		rec.Result, rec.Err = wire.Result{}, err.Error()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history = append(w.history, rec)
	if rec.Outcome == OK {
		w.ok++
	}
	return rec
}

// counts returns the operations so far, and the successful ones.
func (w *proxyWorkload) counts() (ops, ok int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.history), w.ok
}

// Snapshot returns a copy of the history so far.
func (w *proxyWorkload) Snapshot() []Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.history)
}

// finalReads reads every key the proxy clients used, through the proxy,
// retrying each until deadline; the reads join the history. It returns
// the keys it could not read.
func (w *proxyWorkload) finalReads(ctx context.Context, deadline time.Time) []string {
	rc := redisClient(w.addr, w.timeout)
	defer rc.Close()
	var unread []string
	for _, key := range w.keys.keys() {
		for w.do(rc, finalClient, wire.Op{Kind: wire.OpGet, Key: key}).Outcome != OK {
			if time.Now().After(deadline) || ctx.Err() != nil {
				unread = append(unread, key)
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return unread
}

// checkProxy checks the proxy workload's history, final reads included:
// every key the clients wrote was read at the end; its final value is
// one a SET wrote (not one reported failed); no acknowledged SET is lost
// (the key missing at the end, or holding the value of a SET that
// returned before the acknowledged one began); and each key's history is
// linearizable (porcupine, timeout per key).
func checkProxy(history []Record, timeout time.Duration) Verdict {
	v := Verdict{Checker: "proxy"}
	byKey := map[string][]Record{}
	for _, r := range history {
		if r.Outcome != Failed {
			byKey[r.Op.Key] = append(byKey[r.Op.Key], r)
		}
	}
	var problems []string
	lost, acked, unknown := 0, 0, 0
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ops := byKey[key]
		writes := map[string]Record{}
		var final *Record
		for i, r := range ops {
			switch {
			case r.Op.Kind == wire.OpPut:
				writes[string(r.Op.Value)] = r
				if r.Outcome == OK {
					acked++
				} else {
					unknown++
				}
			case r.Client == finalClient:
				final = &ops[i]
			}
		}
		if len(writes) == 0 {
			continue
		}
		if final == nil {
			problems = append(problems, fmt.Sprintf("no final read of %s", key))
			continue
		}
		n, why := lostWrites(key, final.Result, writes)
		lost += n
		if why != "" {
			problems = append(problems, why)
		}
	}
	var illegal, undecided []string
	if len(problems) == 0 {
		for _, key := range slices.Sorted(maps.Keys(byKey)) {
			var ops []check.Operation
			for _, r := range byKey[key] {
				ops = append(ops, r.operation())
			}
			switch result, _ := check.Linearizable(ops, timeout); result {
			case porcupine.Illegal:
				illegal = append(illegal, key)
			case porcupine.Unknown:
				undecided = append(undecided, key)
			}
		}
	}
	switch {
	case len(problems) > 0:
		v.Reason = problems[0]
		if lost > 0 {
			v.Reason = fmt.Sprintf("%d acknowledged SETs lost; %s", lost, problems[0])
		}
		v.Detail = strings.Join(problems[:min(len(problems), 10)], "; ")
	case len(illegal) > 0:
		v.Reason = fmt.Sprintf("%d of %d keys written through the proxy not linearizable (%s)", len(illegal), len(byKey), listSome(illegal))
		v.Detail = v.Reason
	case len(undecided) > 0:
		v.Reason = fmt.Sprintf("porcupine did not finish within %s for %d proxy keys (%s)", timeout, len(undecided), listSome(undecided))
		v.Detail = v.Reason
	case acked == 0:
		v.Reason = "no acknowledged SET through the proxy to check"
		v.Detail = v.Reason
	default:
		v.OK = true
		v.Detail = fmt.Sprintf("%d operations through the proxy on %d keys: no acknowledged SET lost (%d acknowledged, %d unknown), each key's final value written by a SET, linearizable (porcupine)",
			len(history), len(byKey), acked, unknown)
	}
	return v
}

// lostWrites checks a key's final read (final) against the SETs of its
// history (writes, by their unique values), and returns how many
// acknowledged SETs it lost and the first problem ("" if none): the key
// missing though a SET was acknowledged, a final value no SET wrote, or
// the value of a SET that returned before an acknowledged SET began (a
// later write, lost).
func lostWrites(key string, final wire.Result, writes map[string]Record) (int, string) {
	lost, first := 0, ""
	note := func(format string, args ...any) {
		if first == "" {
			first = fmt.Sprintf(format, args...)
		}
	}
	if !final.Found {
		for _, value := range slices.Sorted(maps.Keys(writes)) {
			if w := writes[value]; w.Outcome == OK {
				lost++
				note("acknowledged SET %s %s (at %s) lost: the key is missing at the end", key, value, time.Duration(w.Call))
			}
		}
		return lost, first
	}
	writer, ok := writes[string(final.Value)]
	if !ok {
		return 0, fmt.Sprintf("%s's final value %q was never written by a SET (or its SET was reported failed)", key, final.Value)
	}
	if writer.Outcome != OK {
		return 0, "" // an unknown SET may take effect at any time after its call
	}
	for _, value := range slices.Sorted(maps.Keys(writes)) {
		if w := writes[value]; w.Outcome == OK && w.Call > writer.Return {
			lost++
			note("acknowledged SET %s %s (at %s) lost: the final value %q is that of a SET that returned before it began (at %s)",
				key, value, time.Duration(w.Call), final.Value, time.Duration(writer.Return))
		}
	}
	return lost, first
}
