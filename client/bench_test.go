package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// fakeCluster is one process that plays the master and a one-server
// chain: it hands out a configuration naming itself and answers every
// request at once. It isolates the client's and transport's costs.
func fakeCluster(tb testing.TB) string {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	probe, err := transport.New("probe", "127.0.0.1:0", log)
	if err != nil {
		tb.Fatal(err)
	}
	addr := probe.Addr()
	probe.Close()
	tr, err := transport.New(wire.NodeID(addr), addr, log)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{wire.NodeID(addr)}}
	value := make([]byte, 1100)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case d := <-tr.Inbox():
				switch m := d.Msg.(type) {
				case *wire.ConfigRequest:
					tr.Send(wire.Envelope{To: d.From, Msg: &wire.ConfigReply{Configs: []wire.Config{cfg}}})
				case *wire.ClientRequest:
					r := wire.Result{Found: true, SN: 1}
					if m.Op.Kind == wire.OpGet {
						r.Value = value
					}
					tr.Send(wire.Envelope{To: d.From, Msg: &wire.ClientReply{Volume: m.Volume, Client: m.Client, ReqNo: m.ReqNo, Result: r}})
				}
			}
		}
	})
	tb.Cleanup(func() { close(done); wg.Wait(); tr.Close() })
	return addr
}

// BenchmarkClient measures operations through one shared client with 32
// goroutines issuing them, against a server that answers at once, with a
// context without deadline and one with a deadline (as a benchmark
// harness or server with a per-request deadline passes).
func BenchmarkClient(b *testing.B) {
	addr := fakeCluster(b)
	for _, op := range []string{"get", "put"} {
		for _, deadline := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/deadline=%v", op, deadline), func(b *testing.B) { benchmarkClient(b, addr, op, deadline) })
		}
	}
}

func benchmarkClient(b *testing.B, addr, op string, deadline bool) {
	ctx := context.Background()
	if deadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Hour)
		defer cancel()
	}
	c, err := client.Dial(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	value := make([]byte, 1100)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprintf("usertable/user%d", g)
			for n.Add(1) <= int64(b.N) {
				var err error
				if op == "get" {
					_, _, err = c.Get(ctx, key)
				} else {
					err = c.Put(ctx, key, value)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
