package bench

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/catena-kv/catena/client"
)

// closedLoop runs one closed-loop client of a YCSB-like mix of reads and
// updates until ctx ends or more (asked before each operation) returns
// false: each operation reads, with probability readFraction, or else
// overwrites with value the key of a record chosen uniformly among
// records, and done gets whether it read, its latency and its error.
// Operations run with ctx, so one that more would no longer start still
// finishes (a deadline cutting it off would make it an error).
func closedLoop(ctx context.Context, c *client.Client, more func() bool, readFraction float64, records int,
	key func(int) string, value []byte, done func(read bool, d time.Duration, err error)) {
	for ctx.Err() == nil && more() {
		k := key(rand.IntN(records))
		t := time.Now()
		var err error
		read := rand.Float64() < readFraction
		if read {
			_, _, err = c.Get(ctx, k)
		} else {
			err = c.Put(ctx, k, value)
		}
		done(read, time.Since(t), err)
	}
}
