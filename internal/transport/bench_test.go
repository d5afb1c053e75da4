package transport

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// BenchmarkRoundTrip measures request/reply round trips between a client
// transport and a server transport on loopback, with `clients`
// goroutines each keeping one request outstanding, as a shared
// client.Client does under concurrent load. The server answers every
// request it receives in one batch after the batch, as the event loop
// does. It reports the write system calls per round trip (both sides).
func BenchmarkRoundTrip(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchmarkRoundTrip(b, clients) })
	}
}

func benchmarkRoundTrip(b *testing.B, clients int) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New("127.0.0.1:0", "127.0.0.1:0", log)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	addr := wire.NodeID(srv.Addr())
	srv.self = addr
	cl, err := New(ClientPrefix+"bench", "", log)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	done := make(chan struct{})
	defer close(done)
	go func() { // the server's event loop
		var out []wire.Envelope
		for {
			select {
			case <-done:
				return
			case d := <-srv.Inbox():
				out = append(out[:0], reply(d))
			drain:
				for {
					select {
					case d := <-srv.Inbox():
						out = append(out, reply(d))
					default:
						break drain
					}
				}
			}
			for _, env := range out {
				if env.Msg != nil {
					srv.Send(env)
				}
			}
		}
	}()
	var mu sync.Mutex
	waiting := map[uint64]chan struct{}{}
	go func() { // the client's receiver
		for {
			select {
			case <-done:
				return
			case d := <-cl.Inbox():
				if r, ok := d.Msg.(*wire.ClientReply); ok {
					mu.Lock()
					ch := waiting[r.ReqNo]
					delete(waiting, r.ReqNo)
					mu.Unlock()
					if ch != nil {
						close(ch)
					}
				}
			}
		}
	}()
	cl.Connect(addr)
	roundTrip := func(reqNo uint64) {
		ch := make(chan struct{})
		mu.Lock()
		waiting[reqNo] = ch
		mu.Unlock()
		cl.Send(wire.Envelope{To: addr, Msg: &wire.ClientRequest{Client: 1, ReqNo: reqNo, Epoch: 1, Op: wire.Op{Kind: wire.OpGet, Key: "usertable/user1234"}}})
		<-ch
	}
	roundTrip(1 << 62) // connected

	var next sync.Mutex
	n := uint64(0)
	writes := writeSyscalls()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				next.Lock()
				if n >= uint64(b.N) {
					next.Unlock()
					return
				}
				n++
				reqNo := n
				next.Unlock()
				roundTrip(reqNo)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if w := writeSyscalls(); w >= 0 && writes >= 0 {
		b.ReportMetric(float64(w-writes)/float64(b.N), "writes/op")
	}
}

func reply(d Delivery) wire.Envelope {
	req, ok := d.Msg.(*wire.ClientRequest)
	if !ok {
		return wire.Envelope{}
	}
	return wire.Envelope{To: d.From, Msg: &wire.ClientReply{Client: req.Client, ReqNo: req.ReqNo, Result: wire.Result{Found: true, Value: make([]byte, 1100)}}}
}

// writeSyscalls returns the write system calls this process made (Linux's
// /proc/self/io), or -1.
func writeSyscalls() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
