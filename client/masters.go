package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// askMasters sends req to every master member, and again after each
// attempt timeout, until take accepts an answer that arrived on a
// channel registered in waiters (the client's receive loop delivers the
// masters' replies of that type there), or an attempt ends with expired
// (optional) saying it is done. Both return done and the result's error.
// ctx, or Options.RequestTimeout without a deadline, bounds the whole;
// unanswered describes that failure.
func askMasters[T any](ctx context.Context, c *Client, req wire.Message, waiters *[]chan T, unanswered string,
	take func(T) (bool, error), expired func() (bool, error)) error {
	w := make(chan T, 16)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	*waiters = append(*waiters, w)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		*waiters = slices.DeleteFunc(*waiters, func(x chan T) bool { return x == w })
		c.mu.Unlock()
	}()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	for {
		c.mu.Lock()
		masters := c.core.Masters()
		c.mu.Unlock()
		for _, m := range masters {
			c.tr.Send(wire.Envelope{To: m, Msg: req})
		}
		timeout := time.After(c.opts.AttemptTimeout)
	wait:
		for {
			select {
			case r := <-w:
				if done, err := take(r); done {
					return err
				}
			case <-timeout:
				if expired != nil {
					if done, err := expired(); done {
						return err
					}
				}
				break wait
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w", ErrUnavailable, unanswered, ctx.Err())
			case <-c.done:
				return ErrClosed
			}
		}
	}
}
