package client

import (
	"context"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Keys that expire (docs/adr/0028-expiry.md). A deadline is absolute
// (Unix time). A TTL is turned into one by the clock of the chain's head
// when it applies the write, once: a retried write never moves it. A key
// is never read after its deadline plus the cluster's clock bound, and
// never missing before its deadline minus it. Only strong keyspaces
// have deadlines, and only once the cluster runs at protocol version 2
// (every cluster a release from 0.2.0 on created; an upgraded one after
// catena upgrade finalize): before, such writes fail with an error that
// says so.

// WriteOption qualifies a write (Put, PutIfAbsent, Replace, Swap,
// CompareAndSet) with a deadline. Without one the key has none after
// the write, as Redis's SET leaves it.
type WriteOption interface{ applyWrite(*wire.Op) }

type writeOption func(*wire.Op)

func (f writeOption) applyWrite(op *wire.Op) { f(op) }

// WithTTL gives the key the deadline ttl after the head applies the
// write (Redis SET EX, PX). A TTL below a nanosecond is refused.
func WithTTL(ttl time.Duration) WriteOption {
	return writeOption(func(op *wire.Op) { op.TTL, op.Expires = wire.Time(ttl), 0 })
}

// WithExpireAt gives the key the deadline at (Redis SET EXAT, PXAT); a
// deadline already past deletes the key.
func WithExpireAt(at time.Time) WriteOption {
	return writeOption(func(op *wire.Op) { op.Expires, op.TTL = unixTime(at), 0 })
}

// WithKeepTTL keeps the key's deadline, if it has one (Redis KEEPTTL).
func WithKeepTTL() WriteOption {
	return writeOption(func(op *wire.Op) { op.Expiry |= wire.ExpiryKeep })
}

// withExpiry returns op with opts applied.
func withExpiry(op wire.Op, opts []WriteOption) wire.Op {
	for _, o := range opts {
		o.applyWrite(&op)
	}
	return op
}

// unixTime is t in Unix nanoseconds, at least 1 (0 means no deadline);
// a time before 1970 is a deadline long past.
func unixTime(t time.Time) wire.Time { return max(1, wire.Time(t.UnixNano())) }

// Expiry is a change of a key's deadline (ChangeExpiry): TTL or At, or
// Persist to remove it, if the conditions hold (Redis EXPIRE's NX, XX,
// GT and LT; a key without a deadline counts as one infinitely late).
type Expiry struct {
	TTL     time.Duration
	At      time.Time
	Persist bool
	// IfNone: only if the key has no deadline (NX); IfSome: only if it
	// has one (XX); IfLater, IfEarlier: only if the new deadline is
	// later (GT), earlier (LT) than the key's.
	IfNone, IfSome, IfLater, IfEarlier bool
}

// op is the operation for e on key.
func (e Expiry) op(key string) wire.Op {
	op := wire.Op{Kind: wire.OpExpire, Key: key}
	switch {
	case e.Persist:
		op.Expiry |= wire.ExpiryPersist
	case !e.At.IsZero():
		op.Expires = unixTime(e.At)
	default:
		op.TTL = wire.Time(e.TTL)
		if op.TTL == 0 {
			op.TTL = -1 // an expire time of zero: now, which deletes (Redis)
		}
	}
	for _, c := range []struct {
		on   bool
		flag wire.ExpiryFlags
	}{{e.IfNone, wire.ExpiryNX}, {e.IfSome, wire.ExpiryXX}, {e.IfLater, wire.ExpiryGT}, {e.IfEarlier, wire.ExpiryLT}} {
		if c.on {
			op.Expiry |= c.flag
		}
	}
	return op
}

// ChangeExpiry changes key's deadline as e says, in one atomic update,
// and reports whether it did (false: the key is absent or a condition
// failed) and the key's value (nil if absent): Redis EXPIRE, PEXPIRE,
// EXPIREAT, PERSIST, and GETEX with an option. A deadline not in the
// future deletes the key.
func (c *Client) ChangeExpiry(ctx context.Context, key string, e Expiry) (changed bool, value []byte, err error) {
	r, err := c.do(ctx, e.op(key), Strong)
	if err != nil {
		return false, nil, err
	}
	return r.Status == wire.StatusOK, priorValue(r), nil
}

// Expire gives key the deadline ttl from now (by the head's clock) and
// reports whether the key exists.
func (c *Client) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	changed, _, err := c.ChangeExpiry(ctx, key, Expiry{TTL: ttl})
	return changed, err
}

// Persist removes key's deadline and reports whether it had one.
func (c *Client) Persist(ctx context.Context, key string) (bool, error) {
	changed, _, err := c.ChangeExpiry(ctx, key, Expiry{Persist: true})
	return changed, err
}

// Deadline returns key's value, its deadline (the zero Time: none) and
// whether it exists: a read, with the read's options.
func (c *Client) Deadline(ctx context.Context, key string, opts ...ReadOption) (value []byte, deadline time.Time, found bool, err error) {
	ro := readOptions{consistency: c.opts.Consistency}
	for _, o := range opts {
		o.applyRead(&ro)
	}
	r, err := c.do(ctx, wire.Op{Kind: wire.OpGet, Key: key}, ro.consistency)
	if err != nil || !r.Found {
		return nil, time.Time{}, false, err
	}
	if r.Expires != 0 {
		deadline = time.Unix(0, int64(r.Expires))
	}
	return priorValue(r), deadline, true, nil
}
