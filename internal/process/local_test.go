package process_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/catena-kv/catena/internal/testcluster"
)

// Each server's own Redis front end serves every key: a write through
// one is read back through every other at once (reads answered from the
// server's replica when the chain lets it answer, the others through the
// chain), hashes and WRONGTYPE included; writers and readers on all
// three at once see no value go back in time (each key's writer counts
// up, and every reader's successive reads of it never decrease).
func TestServersServeRedis(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.WithRedis())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rcs []*redis.Client
	for _, addr := range c.RedisAddrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { rc.Close() })
		if err := rc.Ping(ctx).Err(); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		rcs = append(rcs, rc)
	}
	for i, w := range rcs {
		key := fmt.Sprintf("k%d", i)
		if err := w.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for j, r := range rcs {
			if got, err := r.Get(ctx, key).Result(); err != nil || got != "v" {
				t.Fatalf("%s written at server %d, read at %d: %q, %v", key, i, j, got, err)
			}
		}
	}
	if err := rcs[0].HSet(ctx, "h", "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rcs[2].HGet(ctx, "h", "f").Result(); err != nil || got != "1" {
		t.Fatalf("HGET at another server: %q, %v", got, err)
	}
	if err := rcs[1].Get(ctx, "h").Err(); err == nil || err.Error() != "WRONGTYPE Operation against a key holding the wrong kind of value" {
		t.Fatalf("GET of a hash at a server: %v", err)
	}
	if err := rcs[0].HSet(ctx, "h", "g", "2").Err(); err != nil {
		t.Fatal(err)
	}
	const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	for i, r := range rcs {
		// Pipelined: the reads of one read start together, and a local
		// read picks the fields from the whole object.
		p := r.Pipeline()
		mget := p.HMGet(ctx, "h", "g", "x", "f", "g")
		all := p.HGetAll(ctx, "h")
		n := p.HLen(ctx, "h")
		onString := p.HMGet(ctx, "k0", "f")
		missing := p.HGetAll(ctx, "missing")
		p.Exec(ctx)
		if got, err := mget.Result(); err != nil || fmt.Sprint(got) != "[2 <nil> 1 2]" {
			t.Errorf("server %d: HMGET h g x f g: %v, %v; want [2 <nil> 1 2]", i, got, err)
		}
		if got, err := all.Result(); err != nil || fmt.Sprint(got) != "map[f:1 g:2]" {
			t.Errorf("server %d: HGETALL h: %v, %v", i, got, err)
		}
		if got, err := n.Result(); err != nil || got != 2 {
			t.Errorf("server %d: HLEN h: %v, %v", i, got, err)
		}
		if err := onString.Err(); err == nil || err.Error() != wrongType {
			t.Errorf("server %d: HMGET of a string: %v; want WRONGTYPE", i, err)
		}
		if got, err := missing.Result(); err != nil || len(got) != 0 {
			t.Errorf("server %d: HGETALL of a missing key: %v, %v", i, got, err)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 2 {
		wg.Go(func() {
			key := fmt.Sprintf("counter%d", w)
			for n := 1; n <= 200; n++ {
				if err := rcs[w].Set(ctx, key, n, 0).Err(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for r := range rcs {
		wg.Go(func() {
			last := map[string]int{}
			for range 300 {
				for w := range 2 {
					key := fmt.Sprintf("counter%d", w)
					n, err := rcs[r].Get(ctx, key).Int()
					if err == redis.Nil {
						n, err = 0, nil
					}
					if err != nil {
						errs <- err
						return
					}
					if n < last[key] {
						errs <- fmt.Errorf("server %d read %s = %d after %d", r, key, n, last[key])
						return
					}
					last[key] = n
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range rcs {
		if n := c.LocalReads(i); n == 0 {
			t.Errorf("server %d's front end answered no read from its replica", i)
		}
	}
}
