package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// echo answers every Ack with an Ack one higher and counts ticks.
type echo struct{ ticks atomic.Int64 }

func (e *echo) Step(_ wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	if a, ok := m.(*wire.Ack); ok {
		return []wire.Envelope{{To: from, Msg: &wire.Ack{SN: a.SN + 1}}}
	}
	return nil
}

func (e *echo) Tick(wire.Time) []wire.Envelope { e.ticks.Add(1); return nil }

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Nothing a batch produced leaves the process before the batch's commit
// returned (group commit), and ticks run.
func TestLoopCommitsBeforeSending(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := freeAddr(t)
	server, err := transport.New(wire.NodeID(addr), addr, log)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	peer, err := transport.New(transport.ClientPrefix+"peer", "", log)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	var commits atomic.Int64
	m := &echo{}
	loop := Loop{Machine: m, Transport: server, TickInterval: time.Millisecond, Log: log,
		Commit: func() error { commits.Add(1); return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	for sn := wire.SN(1); sn <= 20; sn++ {
		before := commits.Load()
		peer.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: sn}})
		select {
		case d := <-peer.Inbox():
			if a, ok := d.Msg.(*wire.Ack); !ok || a.SN != sn+1 {
				t.Fatalf("reply %+v to %d", d.Msg, sn)
			}
			if commits.Load() <= before {
				t.Fatalf("reply to %d arrived before the batch that produced it committed", sn)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no reply to %d", sn)
		}
	}
	// Ticks come every millisecond; the round trips above may all fit
	// before the first one, so wait for it rather than expect it.
	for deadline := time.Now().Add(5 * time.Second); m.ticks.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the machine was never ticked")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
