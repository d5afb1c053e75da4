package process

import (
	"log/slog"
	"math"
	"time"

	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/wire"
)

// transferProgressEvery is the longest a state transfer goes without a
// progress line.
const transferProgressEvery = 5 * time.Second

// transferLog logs a server's state transfers (CR §3 "Extending a
// Chain"): as the tail, each snapshot it sends to a joining server; as the
// joining server, when a snapshot starts arriving, a progress line at
// least every transferProgressEvery while it does, and when it is
// installed. It is a node.Observer.
type transferLog struct {
	log       *slog.Logger
	every     time.Duration
	receiving map[wire.VolumeID]*transferProgress
}

type transferProgress struct {
	// peer is the tail sending, or the joining server receiving.
	peer                   wire.NodeID
	snapshotSN             wire.SN
	began, logged          time.Time
	chunks, objects, bytes int
}

var _ node.Observer = (*transferLog)(nil)

func newTransferLog(log *slog.Logger, every time.Duration) *transferLog {
	return &transferLog{log: log, every: every, receiving: map[wire.VolumeID]*transferProgress{}}
}

// Stepped implements node.Observer.
func (t *transferLog) Stepped(began time.Time, from wire.NodeID, in wire.Message, out []wire.Envelope) {
	if chunk, ok := in.(*wire.SnapshotChunk); ok {
		t.received(began, from, chunk)
	}
	if r, ok := in.(*wire.SyncReply); ok && r.CatchUp {
		t.log.Info("state transfer: catching up from the tail (no snapshot)", "volume", r.Volume, "from", from, "tail-applied-sn", r.PredecessorAppliedSN)
	}
	if req, ok := in.(*wire.SyncRequest); ok && req.NeedSnapshot {
		t.catchingUp(from, req, out)
	}
	var sending map[wire.VolumeID]*transferProgress
	for _, env := range out {
		chunk, ok := env.Msg.(*wire.SnapshotChunk)
		if !ok {
			continue
		}
		if sending == nil {
			sending = map[wire.VolumeID]*transferProgress{}
		}
		p := sending[chunk.Volume]
		if p == nil {
			p = &transferProgress{peer: env.To, snapshotSN: chunk.SnapshotSN}
			sending[chunk.Volume] = p
		}
		p.add(chunk)
	}
	for v, p := range sending {
		t.log.Info("state transfer: sending a snapshot to the joining server", "volume", v, "to", p.peer,
			"snapshot-sn", p.snapshotSN, "objects", p.objects, "bytes", p.bytes, "chunks", p.chunks)
	}
}

func (p *transferProgress) add(chunk *wire.SnapshotChunk) {
	p.chunks++
	p.objects += len(chunk.Objects)
	p.bytes += metrics.ChunkBytes(chunk)
}

func (t *transferLog) received(now time.Time, from wire.NodeID, chunk *wire.SnapshotChunk) {
	p := t.receiving[chunk.Volume]
	if chunk.Seq == 0 || p == nil || p.snapshotSN != chunk.SnapshotSN {
		p = &transferProgress{peer: from, snapshotSN: chunk.SnapshotSN, began: now, logged: now}
		t.receiving[chunk.Volume] = p
		t.log.Info("state transfer: receiving a snapshot", "volume", chunk.Volume, "from", from, "snapshot-sn", chunk.SnapshotSN)
	}
	p.add(chunk)
	elapsed := now.Sub(p.began)
	switch {
	case chunk.Last:
		delete(t.receiving, chunk.Volume)
		t.log.Info("state transfer: snapshot received", "volume", chunk.Volume, "from", from, "snapshot-sn", chunk.SnapshotSN,
			"objects", p.objects, "bytes", p.bytes, "chunks", p.chunks, "elapsed", elapsed.Round(time.Millisecond), "mb-per-s", megabytesPerSecond(p.bytes, elapsed))
	case now.Sub(p.logged) >= t.every:
		p.logged = now
		t.log.Info("state transfer: progress", "volume", chunk.Volume, "from", from, "snapshot-sn", chunk.SnapshotSN,
			"objects", p.objects, "bytes", p.bytes, "chunks", p.chunks, "elapsed", elapsed.Round(time.Second), "mb-per-s", megabytesPerSecond(p.bytes, elapsed))
	}
}

// catchingUp logs a tail's answer to a joining server that offered its
// state (chain/catchup.go) when the answer is a catch-up: the SyncReply
// and the missed updates it forwarded in the same step.
func (t *transferLog) catchingUp(joiner wire.NodeID, req *wire.SyncRequest, out []wire.Envelope) {
	caughtUp, updates := false, 0
	for _, env := range out {
		switch m := env.Msg.(type) {
		case *wire.SyncReply:
			caughtUp = caughtUp || env.To == joiner && m.CatchUp
		case *wire.Forward:
			if env.To == joiner {
				updates += len(m.Updates)
			}
		}
	}
	if caughtUp {
		t.log.Info("state transfer: catching up the joining server (no snapshot)", "volume", req.Volume, "to", joiner,
			"from-sn", req.AppliedSN, "updates", updates)
	}
}

// megabytesPerSecond returns the rate, rounded to 0.1 MB/s.
func megabytesPerSecond(bytes int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(bytes)/1e5/d.Seconds()) / 10
}

// BatchSent implements node.Observer.
func (t *transferLog) BatchSent() {}
