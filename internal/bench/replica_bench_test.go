package bench

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// The replica's update handling, driven through its Step API the way a
// server's event loop drives it: a chain h → m → t adopts epoch 1, the
// links synchronise, and then every iteration is one update handled by
// the replica under test:
//
//   - head: a client's Put, sequenced, applied and forwarded;
//   - middle: an update in a Forward from the head, applied and forwarded;
//   - tail: an update in a Forward from the middle, applied, answered and
//     acknowledged.
//
// Updates come 16 per batch (one Forward, or 16 client requests) followed
// by the engine's group commit, as the event loop does; the successor
// acknowledges each batch. The client keeps 32 requests in flight, so each
// update also forgets the outcomes the client acknowledged. Values are 1
// KB (a YCSB record) over 10,000 keys.
//
// Engines: storage.NewMemoryEngine (the state machine alone) and Pebble
// without fsync (the state machine and storage CPU; fsync is the disk's),
// at this release's newest cluster version, as a new cluster runs.
//
// Modes: "pipelined" is the servers' (chain/durable.go): the replica is
// told of each commit (Committed) and its predecessor reports the batch
// durable (wire.Durable), which is when a tail answers; "commit-first" is
// a replica whose every step is durable when it returns (the experiments'
// model, and the servers' before ADR 17).
func BenchmarkReplicaUpdate(b *testing.B) {
	for _, engine := range []string{"memory", "pebble"} {
		for _, mode := range []string{"pipelined", "commit-first"} {
			for _, role := range []string{"head", "middle", "tail"} {
				b.Run(engine+"/"+mode+"/"+role, func(b *testing.B) {
					var e storage.Engine = storage.NewMemoryEngine()
					if engine == "pebble" {
						pe, err := storage.OpenPebble(storage.PebbleOptions{Dir: b.TempDir()})
						if err != nil {
							b.Fatal(err)
						}
						defer pe.Close()
						pe.SetClusterVersion(release.ProtocolMax) // a new cluster's
						e = pe
					}
					benchmarkReplica(b, e, role, mode == "pipelined")
				})
			}
		}
	}
}

const (
	benchHead   = wire.NodeID("127.0.0.1:7101")
	benchMiddle = wire.NodeID("127.0.0.1:7102")
	benchTail   = wire.NodeID("127.0.0.1:7103")
	benchClient = wire.NodeID("client/0123456789abcdef")
	benchBatch  = 16
	benchKeys   = 10_000
	benchWindow = 32 // requests the client has in flight
)

// replicaDriver holds a replica in a synchronised chain.
type replicaDriver struct {
	tb     testing.TB
	r      *chain.Replica
	e      storage.Engine
	role   wire.NodeID
	now    wire.Time
	reqNo  uint64
	sn     wire.SN
	value  []byte
	keys   []string
	cfg    wire.Config
	sent   int // messages the replica emitted
	client wire.ClientID
	// pipelined: the replica's commits lag its steps (chain/durable.go).
	pipelined bool
}

func newReplicaDriver(tb testing.TB, e storage.Engine, role string, pipelined bool) *replicaDriver {
	id := map[string]wire.NodeID{"head": benchHead, "middle": benchMiddle, "tail": benchTail}[role]
	d := &replicaDriver{
		tb: tb, e: e, role: id, value: bytes.Repeat([]byte("v"), 1000), client: 42, pipelined: pipelined,
		cfg: wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{benchHead, benchMiddle, benchTail}},
	}
	for i := range benchKeys {
		d.keys = append(d.keys, fmt.Sprintf("usertable/user%d", i))
	}
	d.r = chain.NewReplica(chain.ReplicaOptions{ID: id, Volume: 0, Store: e.Volume(0), Limits: chain.DefaultLimits, FirstStart: true,
		CommitsLag: pipelined})
	_, adopted := d.r.Adopt(d.tick(), d.cfg)
	d.emit(adopted)
	if pred := d.cfg.Predecessor(id); pred != "" {
		d.emit(d.r.Step(d.tick(), pred, &wire.SyncReply{Volume: 0, Epoch: 1, PredecessorAppliedSN: 0}).Messages)
	}
	if succ := d.cfg.Successor(id); succ != "" {
		d.emit(d.r.Step(d.tick(), succ, &wire.SyncRequest{Volume: 0, Epoch: 1}).Messages)
	}
	d.commit()
	return d
}

func (d *replicaDriver) tick() wire.Time {
	d.now += wire.Microsecond
	return d.now
}

func (d *replicaDriver) emit(out []wire.Envelope) { d.sent += len(out) }

func (d *replicaDriver) commit() {
	if err := d.e.Commit(); err != nil {
		d.tb.Fatal(err)
	}
	if d.pipelined {
		d.emit(d.r.Committed(d.tick()).Messages)
	}
}

// ackedBelow: the client has the replies to everything but its last
// benchWindow requests.
func (d *replicaDriver) ackedBelow() uint64 {
	if d.reqNo <= benchWindow {
		return 1
	}
	return d.reqNo + 1 - benchWindow
}

// batch handles n updates, commits, and lets the successor acknowledge.
func (d *replicaDriver) batch(n int) {
	switch d.role {
	case benchHead:
		for range n {
			d.reqNo++
			op := wire.Op{Kind: wire.OpPut, Key: d.keys[d.reqNo%benchKeys], Value: d.value}
			d.emit(d.r.Step(d.tick(), benchClient, &wire.ClientRequest{
				Volume: 0, Epoch: 1, Client: d.client, ReqNo: d.reqNo, AckedBelow: d.ackedBelow(),
				ExpectSession: d.reqNo > 1, Op: op,
			}).Messages)
		}
	default:
		updates := make([]wire.Update, n)
		for i := range updates {
			d.reqNo++
			d.sn++
			updates[i] = wire.Update{
				SN: d.sn, Key: d.keys[d.reqNo%benchKeys], Changed: true, Value: d.value,
				Client: d.client, ReqNo: d.reqNo, AckedBelow: d.ackedBelow(), ReplyTo: benchClient,
				Result: wire.Result{SN: d.sn},
			}
		}
		d.emit(d.r.Step(d.tick(), d.cfg.Predecessor(d.role), &wire.Forward{Volume: 0, Epoch: 1, Updates: updates}).Messages)
	}
	d.commit()
	if pred := d.cfg.Predecessor(d.role); pred != "" && d.pipelined {
		// The predecessors made the batch durable meanwhile.
		d.emit(d.r.Step(d.tick(), pred, &wire.Durable{Volume: 0, Epoch: 1, SN: d.sn}).Messages)
	}
	if succ := d.cfg.Successor(d.role); succ != "" {
		d.emit(d.r.Step(d.tick(), succ, &wire.Ack{Volume: 0, Epoch: 1, SN: d.r.AppliedSN()}).Messages)
	}
}

func benchmarkReplica(b *testing.B, e storage.Engine, role string, pipelined bool) {
	d := newReplicaDriver(b, e, role, pipelined)
	b.SetBytes(int64(len(d.value)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += benchBatch {
		d.batch(min(benchBatch, b.N-done))
	}
	b.StopTimer()
	if got := d.r.AppliedSN(); got != wire.SN(b.N) {
		b.Fatalf("applied %d updates, want %d", got, b.N)
	}
}

// TestReplicaDriver checks the benchmark's driver: every update is
// applied, forwarded or answered, and committed up the chain.
func TestReplicaDriver(t *testing.T) {
	for _, c := range []struct {
		role      string
		pipelined bool
	}{{"head", false}, {"middle", false}, {"tail", false}, {"head", true}, {"middle", true}, {"tail", true}} {
		role := c.role
		t.Run(fmt.Sprintf("%s/pipelined=%v", role, c.pipelined), func(t *testing.T) {
			d := newReplicaDriver(t, storage.NewMemoryEngine(), role, c.pipelined)
			d.sent = 0
			for range 10 {
				d.batch(benchBatch)
			}
			if got := d.r.AppliedSN(); got != 10*benchBatch {
				t.Fatalf("applied %d, want %d", got, 10*benchBatch)
			}
			if got := d.r.CommittedSN(); got != 10*benchBatch {
				t.Fatalf("committed %d, want %d", got, 10*benchBatch)
			}
			// head: one Forward per client request (forwarded as applied);
			// middle: one Forward and one Ack per batch; tail: a reply per
			// update and an Ack per batch.
			// Pipelined, the head and middle report each batch durable.
			want := map[string]int{"head": 10 * benchBatch, "middle": 20, "tail": 10*benchBatch + 10}[role]
			if c.pipelined && role != "tail" {
				want += 10
			}
			if d.sent != want {
				t.Fatalf("replica sent %d messages, want %d", d.sent, want)
			}
			if first, last := d.r.Sent(); role != "tail" && (first != 0 || last != 0) {
				t.Fatalf("Sent list [%d, %d] after every update was acknowledged", first, last)
			}
		})
	}
}
