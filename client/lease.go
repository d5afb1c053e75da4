package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Leases (docs/adr/0032-watch-and-leases.md): keys bound to a holder's
// liveness. A lease is a record with a deadline, ttl after it was granted
// or last renewed; a key written with WithLease takes the lease's
// deadline, and every renewal moves the record's deadline and then each
// of its keys' to the same new one. A holder that stops renewing loses
// its keys when that deadline passes, by the rule keys that expire follow
// (docs/adr/0028): never read after the deadline plus the clock bound,
// reclaimed by their chain's head with a replicated delete, which a watch
// sees as EventExpire. Leases live in chains, like any key: they survive
// master and server failures as long as they are renewed.
//
// Representation: the record is the key wire.LeaseKeyPrefix+id, whose
// value is the TTL in milliseconds; each key the lease holds has a member
// record, the record's key, "/", and the key, with the same deadline.
// Renewing costs two updates per key, which suits what leases are for
// (service discovery, locks, elections: a few keys a lease).

// LeaseID names a lease.
type LeaseID uint64

// String returns the id as catena lease commands print and take it.
func (id LeaseID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// ParseLeaseID parses what LeaseID.String returns.
func ParseLeaseID(s string) (LeaseID, error) {
	n, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 || n == 0 {
		return 0, fmt.Errorf("%w: lease id %q is not 16 hexadecimal digits", ErrInvalid, s)
	}
	return LeaseID(n), nil
}

// ErrLeaseExpired: the lease's record is gone (its deadline passed, or
// it was revoked): its keys are gone or going.
var ErrLeaseExpired = errors.New("catena: lease expired")

// Lease limits.
const (
	// LeaseTTLMin and LeaseTTLMax bound a lease's TTL: below a second the
	// clock bound (docs/adr/0028) is a large part of it.
	LeaseTTLMin = time.Second
	LeaseTTLMax = 30 * 24 * time.Hour
)

func leaseRecord(id LeaseID) string { return wire.LeaseKeyPrefix + id.String() }

func leaseMember(id LeaseID, key string) string { return leaseRecord(id) + "/" + key }

// leaseOption is WithLease's: it changes no field itself (the write
// takes the lease's deadline: withWriteOptions).
type leaseOption struct{ id LeaseID }

func (leaseOption) applyWrite(*wire.Op) {}

// WithLease binds the written key to lease id: it takes the lease's
// deadline and is renewed and revoked with it. Writing the key again
// without the lease detaches it.
func WithLease(id LeaseID) WriteOption { return leaseOption{id} }

// withWriteOptions returns op with opts applied; with WithLease, it first
// adds key to the lease's members and gives op the lease's deadline.
func (c *Client) withWriteOptions(ctx context.Context, op wire.Op, opts []WriteOption) (wire.Op, error) {
	op = withExpiry(op, opts)
	for _, o := range opts {
		l, ok := o.(leaseOption)
		if !ok {
			continue
		}
		_, deadline, found, err := c.Deadline(ctx, leaseRecord(l.id), Strong)
		switch {
		case err != nil:
			return op, err
		case !found || deadline.IsZero():
			return op, fmt.Errorf("%w: lease %s", ErrLeaseExpired, l.id)
		}
		if err := c.Put(ctx, leaseMember(l.id, op.Key), nil, WithExpireAt(deadline)); err != nil {
			return op, err
		}
		op.Expires, op.TTL, op.Expiry = unixTime(deadline), 0, 0
	}
	return op, nil
}

// Grant makes a lease of ttl and returns it with its first deadline.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (LeaseID, time.Time, error) {
	if ttl < LeaseTTLMin || ttl > LeaseTTLMax {
		return 0, time.Time{}, fmt.Errorf("%w: a lease's TTL is between %v and %v, not %v", ErrInvalid, LeaseTTLMin, LeaseTTLMax, ttl)
	}
	id := LeaseID(rand.Uint64() | 1)
	op := wire.Op{Kind: wire.OpCompareAndSet, Key: leaseRecord(id), ExpectAbsent: true,
		Value: []byte(strconv.FormatInt(ttl.Milliseconds(), 10)), TTL: wire.Time(ttl)}
	r, err := c.do(ctx, op, Strong)
	switch {
	case err != nil:
		return 0, time.Time{}, err
	case r.Status != wire.StatusOK:
		return 0, time.Time{}, fmt.Errorf("%w: lease id %s taken: grant again", ErrUnavailable, id)
	}
	return id, time.Unix(0, int64(r.Expires)), nil
}

// KeepAlive renews lease id once: its record and each of its keys take
// the deadline ttl from now (by the record's head's clock), which it
// returns. ErrLeaseExpired if the lease is gone.
func (c *Client) KeepAlive(ctx context.Context, id LeaseID) (time.Time, error) {
	ttl, _, err := c.leaseTTL(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	r, err := c.do(ctx, wire.Op{Kind: wire.OpExpire, Key: leaseRecord(id), TTL: wire.Time(ttl), Expiry: wire.ExpiryXX}, Strong)
	switch {
	case err != nil:
		return time.Time{}, err
	case r.Status != wire.StatusOK || r.Expires == 0:
		return time.Time{}, fmt.Errorf("%w: lease %s", ErrLeaseExpired, id)
	}
	deadline := time.Unix(0, int64(r.Expires))
	keys, err := c.leaseKeys(ctx, id)
	if err != nil {
		return deadline, err
	}
	for _, key := range keys {
		// The member record, then the key, if each still has a deadline
		// (a key written since without the lease has none).
		for _, k := range []string{leaseMember(id, key), key} {
			if _, err := c.do(ctx, wire.Op{Kind: wire.OpExpire, Key: k, Expires: r.Expires, Expiry: wire.ExpiryXX}, Strong); err != nil {
				return deadline, err
			}
		}
	}
	return deadline, nil
}

// KeepAliveLoop renews lease id every third of its TTL until ctx ends
// (nil) or the lease is lost (ErrLeaseExpired). A renewal that fails for
// another reason is tried again at once, then every second, while the
// lease may still be alive.
func (c *Client) KeepAliveLoop(ctx context.Context, id LeaseID) error {
	ttl, deadline, err := c.leaseTTL(ctx, id)
	if err != nil {
		return err
	}
	for {
		wait := ttl / 3
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		for {
			d, err := c.KeepAlive(ctx, id)
			if err == nil {
				deadline = d
				break
			}
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrLeaseExpired):
				return err
			case time.Now().After(deadline):
				return fmt.Errorf("%w: lease %s: renewals failed past its deadline: %w", ErrLeaseExpired, id, err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// Revoke ends lease id now: its keys, their member records and the
// record are deleted.
func (c *Client) Revoke(ctx context.Context, id LeaseID) error {
	keys, err := c.leaseKeys(ctx, id)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if _, err := c.Delete(ctx, key); err != nil {
			return err
		}
		if _, err := c.Delete(ctx, leaseMember(id, key)); err != nil {
			return err
		}
	}
	found, err := c.Delete(ctx, leaseRecord(id))
	if err == nil && !found {
		err = fmt.Errorf("%w: lease %s", ErrLeaseExpired, id)
	}
	return err
}

// LeaseInfo describes a lease (Leases).
type LeaseInfo struct {
	ID       LeaseID
	TTL      time.Duration
	Deadline time.Time
	Keys     []string
}

// Leases lists the leases alive, with their keys.
func (c *Client) Leases(ctx context.Context) ([]LeaseInfo, error) {
	names, err := c.scanLeaseRecords(ctx, wire.LeaseKeyPrefix)
	if err != nil {
		return nil, err
	}
	byID := map[LeaseID]*LeaseInfo{}
	var out []LeaseInfo
	for _, name := range names {
		rest := strings.TrimPrefix(name, wire.LeaseKeyPrefix)
		idPart, key, member := strings.Cut(rest, "/")
		id, err := ParseLeaseID(idPart)
		if err != nil {
			continue // (not a record this client writes)
		}
		info := byID[id]
		if info == nil {
			info = &LeaseInfo{ID: id}
			byID[id] = info
		}
		if member {
			info.Keys = append(info.Keys, key)
		}
	}
	for id, info := range byID {
		ttl, deadline, err := c.leaseTTL(ctx, id)
		if errors.Is(err, ErrLeaseExpired) {
			continue // (members outlive a revoked record by a moment)
		}
		if err != nil {
			return nil, err
		}
		info.TTL, info.Deadline = ttl, deadline
		out = append(out, *info)
	}
	return out, nil
}

// leaseTTL reads lease id's record: its TTL and deadline.
func (c *Client) leaseTTL(ctx context.Context, id LeaseID) (time.Duration, time.Time, error) {
	value, deadline, found, err := c.Deadline(ctx, leaseRecord(id), Strong)
	if err != nil {
		return 0, time.Time{}, err
	}
	if !found {
		return 0, time.Time{}, fmt.Errorf("%w: lease %s", ErrLeaseExpired, id)
	}
	ms, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil || ms <= 0 {
		return 0, time.Time{}, fmt.Errorf("%w: lease %s's record holds %q, not a TTL", ErrInvalid, id, value)
	}
	return time.Duration(ms) * time.Millisecond, deadline, nil
}

// leaseKeys returns the keys lease id holds, from their member records.
func (c *Client) leaseKeys(ctx context.Context, id LeaseID) ([]string, error) {
	prefix := leaseRecord(id) + "/"
	names, err := c.scanLeaseRecords(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(names))
	for _, n := range names {
		keys = append(keys, strings.TrimPrefix(n, prefix))
	}
	return keys, nil
}

// scanLeaseRecords returns the leases' records whose keys start with
// prefix (itself starting with wire.LeaseKeyPrefix), from every volume:
// a scan from prefix on, which the servers end after the last record.
func (c *Client) scanLeaseRecords(ctx context.Context, prefix string) ([]string, error) {
	volumes, err := c.scanVolumes()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range volumes {
		from := prefix
		for {
			page, err := c.scanPage(ctx, v, from, "", 1000)
			if err != nil {
				return nil, err
			}
			past := false
			for _, k := range page.Keys {
				if !strings.HasPrefix(k, prefix) {
					past = past || k > prefix
					continue
				}
				out = append(out, k)
			}
			if !page.More || past || !strings.HasPrefix(page.Next, prefix) && page.Next > prefix {
				break
			}
			from = wire.ScanAfter(page.Next)
		}
	}
	return out, nil
}
