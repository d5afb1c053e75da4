package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Cursor says where a scan resumes. The zero Cursor starts a scan; Done
// reports one that has listed every volume. A scan returns every key
// that exists for its whole duration (Redis's SCAN promise), and none
// twice: it lists each volume in key order, resuming after the last key
// it examined, and a volume that splits meanwhile (SplitKeyspace) sends
// it to the new volume next, from where it stood. Keys written or
// deleted meanwhile may or may not appear. A Cursor is valid only with
// the client that made it.
type Cursor struct {
	at clientcore.ScanCursor
}

// Done reports whether the scan has ended.
func (c Cursor) Done() bool { return c.at.Done }

// DefaultScanCount is how many keys a page examines when Scan is given no
// count (Redis's default COUNT).
const DefaultScanCount = 10

// Scan returns the next page of a scan of every keyspace the cluster
// has: the keys matching the Redis glob pattern match (empty: every key)
// among about count keys of one volume (count ≤ 0: DefaultScanCount), and
// the cursor to pass next. A page may be empty while the scan goes on.
// Each page is read at its volume's tail, so it sees every acknowledged
// write.
func (c *Client) Scan(ctx context.Context, cur Cursor, match string, count int) ([]string, Cursor, error) {
	if cur.at.Done {
		return nil, cur, nil
	}
	if count <= 0 {
		count = DefaultScanCount
	}
	if count > wire.ScanCountMax {
		return nil, cur, fmt.Errorf("%w: a scan examines at most %d keys a page, not %d", ErrInvalid, wire.ScanCountMax, count)
	}
	if !cur.at.Started {
		c.mu.Lock()
		start, ok := c.core.ScanStart()
		c.mu.Unlock()
		if !ok {
			return nil, cur, fmt.Errorf("%w: the client knows no volumes yet", ErrUnavailable)
		}
		cur.at = start
	}
	page, err := c.scanPage(ctx, cur.at.Volume, cur.at.From, match, count)
	if err != nil {
		return nil, cur, err
	}
	if err := c.learnSplit(ctx, cur.at.Volume, page); err != nil {
		return nil, cur, err
	}
	c.mu.Lock()
	next := Cursor{at: c.core.ScanAdvance(cur.at, page)}
	c.mu.Unlock()
	return page.Keys, next, nil
}

// learnSplit returns once the keyspace list the client routes by holds
// the split a page of volume v tells of (clientcore.Core.ScanBehind),
// asking the masters for it.
func (c *Client) learnSplit(ctx context.Context, v wire.VolumeID, page wire.ScanPage) error {
	for {
		behind := false
		c.withCore(func(now wire.Time) {
			if behind = c.core.ScanBehind(v, page); behind {
				c.core.RequestConfig(now)
			}
		})
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: volume %d split (into %d volumes), and the masters' keyspaces do not say so yet: %w", ErrUnavailable, v, page.SplitModulus, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Keys returns every key that matches the Redis glob pattern match
// (empty: every key), scanning the whole cluster a page of count keys at
// a time (count ≤ 0: 1,000). It is meant for tools and small keyspaces:
// the answer is held in memory.
func (c *Client) Keys(ctx context.Context, match string, count int) ([]string, error) {
	if count <= 0 {
		count = 1000
	}
	var all []string
	cur := Cursor{}
	for !cur.Done() {
		keys, next, err := c.Scan(ctx, cur, match, count)
		if err != nil {
			return all, err
		}
		all, cur = append(all, keys...), next
	}
	return all, nil
}

// KeysFrom returns up to count keys from from on (from included), in key
// order across every volume: a range read over keys that hash to many
// chains. It asks every volume's tail at once for a share of the range
// (twice count divided by the volumes), merges the pages, and asks again,
// from where they stopped, only the volumes whose page ended before the
// count-th key found so far (count ≤ wire.ScanCountMax). Each page
// reflects every write acknowledged before it was asked for; the pages
// are not one snapshot.
func (c *Client) KeysFrom(ctx context.Context, from string, count int) ([]string, error) {
	if count < 1 || count > wire.ScanCountMax {
		return nil, fmt.Errorf("%w: a range reads 1 to %d keys, not %d", ErrInvalid, wire.ScanCountMax, count)
	}
	volumes, err := c.scanVolumes()
	if err != nil {
		return nil, err
	}
	// Per volume: where its next page starts, and whether it has more.
	type cursor struct {
		from string
		more bool
	}
	cursors := make([]cursor, len(volumes))
	for i := range cursors {
		cursors[i] = cursor{from: from, more: true}
	}
	share := min(wire.ScanCountMax, max(1, 2*count/len(volumes)))
	var keys []string
	for {
		// The volumes that may hold a key before the count-th one found.
		var ask []int
		for i, cur := range cursors {
			if cur.more && (len(keys) < count || cur.from <= keys[count-1]) {
				ask = append(ask, i)
			}
		}
		if len(ask) == 0 {
			return keys[:min(count, len(keys))], nil
		}
		pages := make([]wire.ScanPage, len(ask))
		errs := make([]error, len(ask))
		var wg sync.WaitGroup
		for j, i := range ask {
			wg.Go(func() { pages[j], errs[j] = c.scanPage(ctx, volumes[i], cursors[i].from, "", share) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		for j, i := range ask {
			if p := pages[j]; p.SplitInto != 0 && !slices.Contains(volumes, p.SplitInto) {
				// A volume split since the range began: read it again
				// over the volumes as they are now.
				if err := c.learnSplit(ctx, volumes[i], p); err != nil {
					return nil, err
				}
				return c.KeysFrom(ctx, from, count)
			}
		}
		for j, i := range ask {
			keys = append(keys, pages[j].Keys...)
			cursors[i] = cursor{from: wire.ScanAfter(pages[j].Next), more: pages[j].More}
		}
		slices.Sort(keys)
		keys = keys[:min(len(keys), count)]
	}
}

// scanVolumes returns the volumes a scan walks, in order.
func (c *Client) scanVolumes() ([]wire.VolumeID, error) {
	c.mu.Lock()
	volumes := c.core.ScanVolumes()
	c.mu.Unlock()
	if len(volumes) == 0 {
		return nil, fmt.Errorf("%w: the client knows no volumes yet", ErrUnavailable)
	}
	return volumes, nil
}

// scanPage reads one page of volume from from on at its tail.
func (c *Client) scanPage(ctx context.Context, volume wire.VolumeID, from, match string, count int) (wire.ScanPage, error) {
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		call.User = userOf(ctx)
		return c.core.StartScan(now, volume, from, match, count, call)
	})
	if err != nil {
		return wire.ScanPage{}, err
	}
	r, err := result(d)
	if err != nil {
		return wire.ScanPage{}, err
	}
	page, err := wire.DecodeScanPage(r.Value)
	if err != nil {
		return wire.ScanPage{}, fmt.Errorf("%w: volume %d's tail answered a scan with %w", ErrUnavailable, volume, err)
	}
	return page, nil
}
