package client

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	id := int64(rand.Uint64()>>1) | 1
	from, read, restart := "", false, false
	for {
		p, err := c.exportPage(ctx, wire.VolumeID(volume), id, from)
		if err != nil {
			return err
		}
		if read && p.Began {
			restart = true
			if from != "" {
				// The member froze a new state for this page: read that
				// from its first key.
				from = ""
				continue
			}
		}
		out := ExportPage{SN: uint64(p.SN), Objects: make([]ExportedObject, len(p.Objects)), Restart: restart}
		restart = false
		for i, o := range p.Objects {
			out.Objects[i] = ExportedObject{Key: o.Key, Value: o.Value, Hash: o.Type == wire.TypeHash}
			if o.Expires != 0 {
				out.Objects[i].Expires = time.Unix(0, int64(o.Expires))
			}
		}
		if err := page(out); err != nil {
			return err
		}
		read = true
		if !p.More {
			return nil
		}
		from = wire.ScanAfter(p.Objects[len(p.Objects)-1].Key)
	}
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
