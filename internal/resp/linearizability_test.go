package resp_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/testcluster"
	"github.com/catena-kv/catena/internal/wire"
)

// Concurrent Redis clients on a few keys produce a history that is
// linearizable under Catena's model of the operations (kv.Apply): each
// command that reads and writes one key (GETSET, SET GET, SET XX GET,
// SET NX GET, INCR, DEL) is one atomic step, and MSET and MGET are one
// step per key.
func TestLinearizable(t *testing.T) { testLinearizable(t, -1) }

// The same, with the chain's head crashing a third of the way through:
// commands retried by the proxy's client across the reconfiguration are
// applied once, and an error reply counts as an unknown outcome.
func TestLinearizableAcrossHeadCrash(t *testing.T) { testLinearizable(t, 0) }

// testLinearizable runs the workload, crashing server crash (unless -1)
// after a third of it.
func testLinearizable(t *testing.T, crash int) {
	cluster := testcluster.Start(t, 3, testcluster.WithSpares(1))
	addr := serve(t, resp.Options{Store: cluster.Dial(t)})
	const (
		clients = 5
		opsEach = 120
	)
	var done, doneAtCrash atomic.Int64
	crashed := make(chan struct{})
	if crash >= 0 {
		go func() {
			defer close(crashed)
			for done.Load() < clients*opsEach/3 {
				time.Sleep(time.Millisecond)
			}
			cluster.Stop(crash)
			doneAtCrash.Store(done.Load())
		}()
	} else {
		close(crashed)
	}
	keys := []string{"lin:a", "lin:b", "lin:c"}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu      sync.Mutex
		history []check.Operation
	)
	var wg sync.WaitGroup
	for id := range clients {
		rc := newRedis(t, addr, 2+id%2)
		rng := rand.New(rand.NewPCG(uint64(id), 42))
		wg.Go(func() {
			ctx := testCtx(t)
			for range opsEach {
				ops := runRandom(ctx, rc, rng, keys, now)
				done.Add(1)
				mu.Lock()
				for _, op := range ops {
					op.Client = id
					history = append(history, op)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	<-crashed
	if crash >= 0 && doneAtCrash.Load() == clients*opsEach {
		t.Fatal("the workload ended before the crash")
	}
	res, info := check.Linearizable(history, 60*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), t.Name()+"-history.html")
		porcupine.VisualizePath(check.Model, info, path)
		t.Fatalf("history of %d operations is %s; visualisation in %s", len(history), res, path)
	}
}

// runRandom runs one random command and returns its operations in
// Catena's terms.
func runRandom(ctx context.Context, rc *redis.Client, rng *rand.Rand, keys []string, now func() int64) []check.Operation {
	key := keys[rng.IntN(len(keys))]
	other := keys[rng.IntN(len(keys))]
	value := strconv.Itoa(rng.IntN(100))
	call := now()
	done := func(ops ...check.Operation) []check.Operation {
		ret := now()
		for i := range ops {
			ops[i].Call, ops[i].Return = call, ret
		}
		return ops
	}
	// bulk is a bulk reply as found/value; ok is false on any error
	// (the outcome is then unknown).
	bulk := func(v string, err error) (wire.Result, bool) {
		if errors.Is(err, redis.Nil) {
			return wire.Result{}, true
		}
		return wire.Result{Found: true, Value: []byte(v)}, err == nil
	}
	update := func(op wire.Op, r wire.Result, ok bool) check.Operation {
		return check.Operation{Op: op, Result: r, Unknown: !ok}
	}
	switch rng.IntN(9) {
	case 0:
		r, ok := bulk(rc.Get(ctx, key).Result())
		if !ok {
			return nil // a failed read tells nothing
		}
		return done(check.Operation{Op: wire.Op{Kind: wire.OpGet, Key: key}, Result: r})
	case 1:
		err := rc.Set(ctx, key, value, 0).Err()
		return done(update(wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, wire.Result{Found: true}, err == nil))
	case 2:
		r, ok := bulk(rc.GetSet(ctx, key, value).Result())
		return done(update(wire.Op{Kind: wire.OpSwap, Key: key, Value: []byte(value)}, r, ok))
	case 3:
		r, ok := bulk(rc.SetArgs(ctx, key, value, redis.SetArgs{Mode: "XX", Get: true}).Result())
		return done(update(wire.Op{Kind: wire.OpReplace, Key: key, Value: []byte(value)}, r, ok))
	case 4:
		r, ok := bulk(rc.SetArgs(ctx, key, value, redis.SetArgs{Mode: "NX", Get: true}).Result())
		if r.Found {
			r.Status = wire.StatusCompareFailed
		}
		return done(update(wire.Op{Kind: wire.OpCompareAndSet, Key: key, ExpectAbsent: true, Value: []byte(value)}, r, ok))
	case 5:
		n, err := rc.Incr(ctx, key).Result()
		r := wire.Result{Found: true, Value: []byte(strconv.FormatInt(n, 10))}
		if err != nil && strings.Contains(err.Error(), "not an integer") {
			r, err = wire.Result{Status: wire.StatusNotInteger, Found: true}, nil
		}
		return done(update(wire.Op{Kind: wire.OpIncrement, Key: key, Delta: 1}, r, err == nil))
	case 6:
		n, err := rc.Del(ctx, key).Result()
		return done(update(wire.Op{Kind: wire.OpDelete, Key: key}, wire.Result{Found: n == 1}, err == nil))
	case 7:
		if other == key {
			return nil
		}
		err := rc.MSet(ctx, key, value, other, value+"m").Err()
		return done(
			update(wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, wire.Result{Found: true}, err == nil),
			update(wire.Op{Kind: wire.OpPut, Key: other, Value: []byte(value + "m")}, wire.Result{Found: true}, err == nil))
	default:
		if other == key {
			return nil
		}
		vs, err := rc.MGet(ctx, key, other).Result()
		if err != nil {
			return nil
		}
		var ops []check.Operation
		for i, k := range []string{key, other} {
			var r wire.Result
			if s, ok := vs[i].(string); ok {
				r = wire.Result{Found: true, Value: []byte(s)}
			}
			ops = append(ops, check.Operation{Op: wire.Op{Kind: wire.OpGet, Key: k}, Result: r})
		}
		return done(ops...)
	}
}
