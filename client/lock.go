package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Locks and elections (docs/adr/0032-watch-and-leases.md), built on
// compare-and-set, leases and watch. A lock is a key: acquiring it is
// writing it if absent, under the holder's lease, so a holder that dies
// loses it when its lease expires; releasing it is deleting it only if
// it still holds the holder's mark. Each acquisition returns a fencing
// token, the revision of the write that acquired the lock: tokens of one
// lock only grow (a volume's SNs grow, and a split's new volume goes on
// from its parent's), so a resource that refuses a token lower than one
// it has seen refuses a holder whose lease expired behind its back. Who
// waits watches the key and tries again when it is deleted or expires.

// Mutex is a lock on a key, held under a lease.
type Mutex struct {
	c     *Client
	key   string
	lease LeaseID
	mark  []byte
	token uint64
}

// NewMutex returns a lock on key, acquired under lease (Grant, with
// KeepAliveLoop running while it is held). The key should be used for
// nothing else.
func (c *Client) NewMutex(key string, lease LeaseID) *Mutex {
	return &Mutex{c: c, key: key, lease: lease}
}

// ErrNotHeld: the lock is not held by this Mutex (its lease expired and
// another took it, or it was never acquired).
var ErrNotHeld = errors.New("catena: lock not held")

// Lock acquires the lock, waiting while another holds it, and returns
// the acquisition's fencing token.
func (m *Mutex) Lock(ctx context.Context) (uint64, error) {
	return m.acquire(ctx, nil)
}

// TryLock acquires the lock if no one holds it: false if another does.
func (m *Mutex) TryLock(ctx context.Context) (token uint64, ok bool, err error) {
	token, _, err = m.try(ctx, nil)
	return token, token != 0, err
}

// Token returns the fencing token of the lock's current acquisition (0:
// not acquired).
func (m *Mutex) Token() uint64 { return m.token }

// Unlock releases the lock if this Mutex still holds it (ErrNotHeld
// otherwise): the key is deleted only if it holds this acquisition's
// mark.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.mark == nil {
		return ErrNotHeld
	}
	// A compare-and-set to a deadline long past deletes the key.
	swapped, _, _, err := m.c.compareAndSet(ctx, wire.Op{Kind: wire.OpCompareAndSet, Key: m.key, Expected: m.mark, Expires: 1})
	if err != nil {
		return err
	}
	m.mark, m.token = nil, 0
	if !swapped {
		return ErrNotHeld
	}
	return nil
}

// acquire tries to write the lock's key until it does: with value
// appended to the mark (an election's candidate).
func (m *Mutex) acquire(ctx context.Context, value []byte) (uint64, error) {
	w, err := m.c.Watch(ctx, m.key, WatchKey())
	if err != nil {
		return 0, err
	}
	defer w.Close()
	for {
		token, _, err := m.try(ctx, value)
		if err != nil || token != 0 {
			return token, err
		}
		// Held: wait for the key to change (deleted, expired, or
		// taken again), or a while, then try again.
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case _, ok := <-w.Events():
			if !ok && w.Err() != nil {
				return 0, w.Err()
			}
		case <-time.After(time.Second):
		}
	}
}

// try writes the lock's key if it is absent; it returns the fencing
// token (0 if another holds the lock) and the holder's value.
func (m *Mutex) try(ctx context.Context, value []byte) (uint64, []byte, error) {
	mark := fmt.Appendf(nil, "%s/%016x\x00", m.lease, rand.Uint64())
	mark = append(mark, value...)
	op, err := m.c.withWriteOptions(ctx, wire.Op{Kind: wire.OpCompareAndSet, Key: m.key, ExpectAbsent: true, Value: mark}, []WriteOption{WithLease(m.lease)})
	if err != nil {
		return 0, nil, err
	}
	r, err := m.c.do(ctx, op, Strong)
	if err != nil {
		return 0, nil, err
	}
	if r.Status == wire.StatusCompareFailed {
		_, held, _ := strings.Cut(string(r.Value), "\x00")
		return 0, []byte(held), nil
	}
	m.mark, m.token = mark, uint64(r.SN)
	return m.token, value, nil
}

// Election is a leader election on a key: the candidate that holds the
// key's lock leads, and the lock's value names it.
type Election struct{ m *Mutex }

// NewElection returns an election on key, campaigned under lease.
func (c *Client) NewElection(key string, lease LeaseID) *Election {
	return &Election{m: c.NewMutex(key, lease)}
}

// Campaign waits until this candidate leads, announcing value, and
// returns the fencing token of its term.
func (e *Election) Campaign(ctx context.Context, value []byte) (uint64, error) {
	return e.m.acquire(ctx, value)
}

// Resign ends this candidate's term, if it still leads.
func (e *Election) Resign(ctx context.Context) error { return e.m.Unlock(ctx) }

// Leader returns the value the leader announced, and whether there is
// one.
func (e *Election) Leader(ctx context.Context) ([]byte, bool, error) {
	v, found, err := e.m.c.Get(ctx, e.m.key, Strong)
	if err != nil || !found {
		return nil, false, err
	}
	_, value, _ := strings.Cut(string(v), "\x00")
	return []byte(value), true, nil
}
