package chain_test

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// BenchmarkLongSent measures what a middle member pays per message while
// its Sent list holds 100 000 updates (SentMax: its successor is far
// behind). It drives the replica through its Step API only, so the same
// code measures any version of the replica:
//
//   - forward: a Forward of one update from the predecessor (apply,
//     append to Sent, forward it to the successor);
//   - trim: an Ack from the successor one SN further (trim the oldest
//     update, acknowledge upstream);
//   - clean-read: a CRAQ query (ReadsCleanAtAnyMember) of a key with no
//     update on Sent, which must make sure there is none.
//
// Between timed stretches the list is brought back to 100 000 updates.
func BenchmarkLongSent(b *testing.B) {
	for _, op := range []string{"forward", "trim", "clean-read"} {
		b.Run(op, func(b *testing.B) {
			d := newLongSentDriver(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				switch op {
				case "forward":
					d.forward(1)
					if (i+1)%longSentRefill == 0 {
						b.StopTimer()
						d.ack(longSentRefill)
						b.StartTimer()
					}
				case "trim":
					d.ack(1)
					if (i+1)%longSentRefill == 0 {
						b.StopTimer()
						d.forward(longSentRefill)
						b.StartTimer()
					}
				case "clean-read":
					d.cleanRead()
				}
			}
			b.StopTimer()
			d.check()
		})
	}
}

const (
	longSentLength = 100_000
	longSentRefill = 1024
	longSentKeys   = 1000
)

var (
	longSentHead   = wire.NodeID("h")
	longSentMiddle = wire.NodeID("m")
	longSentTail   = wire.NodeID("t")
)

// longSentDriver holds a middle replica of the chain h → m → t whose
// successor has acknowledged nothing of the last longSentLength updates.
type longSentDriver struct {
	tb        testing.TB
	r         *chain.Replica
	now       wire.Time
	applied   wire.SN
	committed wire.SN
	reqNo     uint64
	keys      []string
	value     []byte
}

func newLongSentDriver(tb testing.TB) *longSentDriver {
	d := &longSentDriver{tb: tb, value: []byte("sixteen bytes..."), keys: make([]string, longSentKeys)}
	for i := range d.keys {
		d.keys[i] = fmt.Sprintf("key%d", i)
	}
	d.r = chain.NewReplica(chain.ReplicaOptions{
		ID: longSentMiddle, Volume: 0, Store: storage.NewMemory(), Limits: chain.DefaultLimits,
		FirstStart: true, Reads: chain.ReadsCleanAtAnyMember,
	})
	d.now++
	d.r.Adopt(d.now, wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{longSentHead, longSentMiddle, longSentTail}})
	d.step(longSentHead, &wire.SyncReply{Volume: 0, Epoch: 1})
	d.step(longSentTail, &wire.SyncRequest{Volume: 0, Epoch: 1})
	d.forward(longSentLength)
	d.check()
	return d
}

// forward delivers n updates from the head, in Forwards of at most 256.
func (d *longSentDriver) forward(n int) {
	for n > 0 {
		batch := make([]wire.Update, min(n, 256))
		for i := range batch {
			d.applied++
			d.reqNo++
			batch[i] = wire.Update{
				SN: d.applied, Key: d.keys[d.reqNo%longSentKeys], Changed: true, Value: d.value,
				Client: 1, ReqNo: d.reqNo, AckedBelow: d.reqNo, ReplyTo: "client", Result: wire.Result{SN: d.applied},
			}
		}
		if sent := d.step(longSentHead, &wire.Forward{Volume: 0, Epoch: 1, Updates: batch}); sent != 1 {
			d.tb.Fatalf("a Forward made the middle send %d messages, want 1 (the Forward to the tail)", sent)
		}
		n -= len(batch)
	}
}

// ack delivers the tail's Acks for the next n updates, one at a time.
func (d *longSentDriver) ack(n int) {
	for range n {
		d.committed++
		if sent := d.step(longSentTail, &wire.Ack{Volume: 0, Epoch: 1, SN: d.committed}); sent != 1 {
			d.tb.Fatalf("an Ack made the middle send %d messages, want 1 (the Ack to the head)", sent)
		}
	}
}

func (d *longSentDriver) cleanRead() {
	d.reqNo++
	req := &wire.ClientRequest{Volume: 0, Epoch: 1, Client: 2, ReqNo: d.reqNo, Op: wire.Op{Kind: wire.OpGet, Key: "clean"}}
	if sent := d.step("reader", req); sent != 1 {
		d.tb.Fatalf("a query made the middle send %d messages, want 1 (the reply)", sent)
	}
}

// check verifies the replica applied every update and holds on Sent
// exactly the ones not acknowledged.
func (d *longSentDriver) check() {
	if got := d.r.AppliedSN(); got != d.applied {
		d.tb.Fatalf("applied %d, want %d", got, d.applied)
	}
	if first, last := d.r.Sent(); first != d.committed+1 || last != d.applied {
		d.tb.Fatalf("Sent holds [%d, %d], want [%d, %d]", first, last, d.committed+1, d.applied)
	}
}

// step hands the replica one message and returns how many it sent.
func (d *longSentDriver) step(from wire.NodeID, m wire.Message) int {
	d.now++
	return len(d.r.Step(d.now, from, m).Messages)
}
