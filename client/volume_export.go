package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// ExportedObject is one object of a volume's export: its key, value,
// deadline (zero: none) and whether it is a hash (Value then holds its
// fields encoded as the server stores them; Fields decodes them).
type ExportedObject struct {
	Key     string
	Value   []byte
	Expires time.Time
	Hash    bool
}

// ExportPage is one page of ExportVolume.
type ExportPage struct {
	// SN is the sequence number of the last update the exported state
	// holds: every page of one read of a volume has the same.
	SN uint64
	// Objects are in key order.
	Objects []ExportedObject
	// Restart says the member reading the volume lost the state this
	// read was on (another member took its place, or the read paused
	// longer than it keeps a state): the objects of
	// the earlier pages belong to another state and must be discarded;
	// this page starts the volume again from its first key.
	Restart bool
}

// ExportVolume reads every object of one volume, in key order, from one
// state of the volume frozen when the read began, at the member that
// answers the volume's updates (the tail; a causal chain's k-th): the state
// after update SN, holding every write acknowledged before the call
// (docs/adr/0030-backup-and-restore.md). It passes each page to page,
// and stops at the first error page returns. Reading needs read access
// to the volume's whole keyspace; Volumes lists the volumes.
func (c *Client) ExportVolume(ctx context.Context, volume uint32, page func(ExportPage) error) error {
	x := c.NewExport(volume)
	for {
		p, more, err := x.Next(ctx)
		if err != nil {
			return err
		}
		if err := page(p); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// Export reads one volume page by page from one frozen state, as
// ExportVolume does, for a caller that freezes several volumes first and
// reads them later (a backup's cut): its first Next freezes the volume,
// and KeepAlive keeps the frozen state while the reader is busy elsewhere
// (the member drops a state nobody asked a page of for 30 s). Safe for
// use by several goroutines.
type Export struct {
	c      *Client
	volume wire.VolumeID
	id     int64

	mu      sync.Mutex
	from    string
	read    bool // a page was returned
	restart bool // the next page returned starts the volume over
	done    bool
	// pending is a page fetched by KeepAlive, returned by the next Next.
	pending *wire.ExportPage
}

// NewExport returns an export of volume; nothing is asked yet.
func (c *Client) NewExport(volume uint32) *Export {
	return &Export{c: c, volume: wire.VolumeID(volume), id: int64(rand.Uint64()>>1) | 1}
}

// Next returns the next page and whether more follow. The first call
// freezes the volume's state.
func (x *Export) Next(ctx context.Context) (ExportPage, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done {
		return ExportPage{}, false, fmt.Errorf("%w: the export of volume %d was read to its end", ErrInvalid, x.volume)
	}
	for {
		var p wire.ExportPage
		if x.pending != nil {
			p, x.pending = *x.pending, nil
		} else {
			var err error
			if p, err = x.c.exportPage(ctx, x.volume, x.id, x.from); err != nil {
				return ExportPage{}, false, err
			}
		}
		if !x.take(p) {
			continue
		}
		out := ExportPage{SN: uint64(p.SN), Objects: make([]ExportedObject, len(p.Objects)), Restart: x.restart}
		x.restart, x.read = false, true
		for i, o := range p.Objects {
			out.Objects[i] = ExportedObject{Key: o.Key, Value: o.Value, Hash: o.Type == wire.TypeHash}
			if o.Expires != 0 {
				out.Objects[i].Expires = time.Unix(0, int64(o.Expires))
			}
		}
		if !p.More {
			x.done = true
			return out, false, nil
		}
		x.from = wire.ScanAfter(p.Objects[len(p.Objects)-1].Key)
		return out, true, nil
	}
}

// take reports whether page p, asked for from x.from, is the one to
// return: a page of a state the member froze anew for a later page is
// not (the volume starts over from its first key). Called with x.mu held.
func (x *Export) take(p wire.ExportPage) bool {
	if !x.read || !p.Began {
		return true
	}
	x.restart = true
	if x.from == "" {
		return true
	}
	x.from = ""
	return false
}

// KeepAlive asks the member for the page Next returns next, so it keeps
// the frozen state, and holds the page for Next. It does nothing once a
// page is held or the export is done.
func (x *Export) KeepAlive(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pending != nil || x.done || !x.read {
		return nil
	}
	p, err := x.c.exportPage(ctx, x.volume, x.id, x.from)
	if err != nil {
		return err
	}
	x.pending = &p
	return nil
}

// Volumes returns every volume of the keyspaces the client knows, in
// order (waiting for them on a new client).
func (c *Client) Volumes(ctx context.Context) ([]uint32, error) {
	for {
		volumes, err := c.scanVolumes()
		if err == nil {
			out := make([]uint32, len(volumes))
			for i, v := range volumes {
				out[i] = uint32(v)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exportPage reads one page of export id of volume from from on.
func (c *Client) exportPage(ctx context.Context, volume wire.VolumeID, id int64, from string) (wire.ExportPage, error) {
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		call.User = userOf(ctx)
		return c.core.StartExport(now, volume, id, from, call)
	})
	if err != nil {
		return wire.ExportPage{}, err
	}
	r, err := result(d)
	if err != nil {
		return wire.ExportPage{}, err
	}
	p, err := wire.DecodeExportPage(r.Value)
	if err != nil {
		return wire.ExportPage{}, fmt.Errorf("%w: volume %d's answerer sent an export page of %w", ErrUnavailable, volume, err)
	}
	if p.More && len(p.Objects) == 0 {
		return wire.ExportPage{}, fmt.Errorf("%w: volume %d's answerer sent an empty page with more to come", ErrUnavailable, volume)
	}
	return p, nil
}
