package resp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/resp"
)

// memStore is an in-memory Store, to measure the front end alone.
type memStore struct {
	resp.Store
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) Get(_ context.Context, key string, _ ...client.ReadOption) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok, nil
}

func (s *memStore) Put(_ context.Context, key string, value []byte, _ ...client.WriteOption) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), value...)
	return nil
}

// BenchmarkPipelinedSetGet measures the front end's cost per command:
// parsing, dispatch, ordering and replies, with a store that costs
// nothing. Each connection pipelines 16 commands at a time on distinct
// keys, as redis-benchmark -P 16 -r does.
func BenchmarkPipelinedSetGet(b *testing.B) {
	srv, err := resp.New(resp.Options{Store: &memStore{m: map[string][]byte{}}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	const depth = 16
	var batch strings.Builder
	for i := range depth / 2 {
		fmt.Fprintf(&batch, "*3\r\n$3\r\nSET\r\n$5\r\nkey%02d\r\n$5\r\nvalue\r\n", i)
		fmt.Fprintf(&batch, "*2\r\n$3\r\nGET\r\n$5\r\nkey%02d\r\n", i)
	}
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer nc.Close()
		rd := bufio.NewReader(nc)
		for pb.Next() {
			if _, err := nc.Write([]byte(batch.String())); err != nil {
				b.Error(err)
				return
			}
			// SET: +OK; GET: $5, value.
			for range depth / 2 * 3 {
				if _, err := rd.ReadSlice('\n'); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*depth), "ns/command")
}

// BenchmarkPipelinedGet measures the front end's cost per GET when each
// connection pipelines 16 on distinct keys (redis-benchmark -t get -P 16
// -r): parsing, dispatch and replies, against a store that costs nothing
// and answers either from a worker goroutine per command (store),
// through Start, a batch per read (starter), or through Start answering
// before it returns, as a server's front end reading its replicas does
// (inline).
func BenchmarkPipelinedGet(b *testing.B) {
	for _, name := range []string{"store", "starter", "inline"} {
		b.Run(name, func(b *testing.B) {
			m := &memStore{m: map[string][]byte{}}
			var store resp.Store = m
			if name != "store" {
				store = memStarter{m, new(atomic.Int64), name == "inline"}
			}
			benchmarkPipelined(b, store, func(batch *strings.Builder, i int) {
				key := fmt.Sprintf("key%02d", i)
				m.m[key] = []byte("value")
				fmt.Fprintf(batch, "*2\r\n$3\r\nGET\r\n$5\r\n%s\r\n", key)
			}, 2)
		})
	}
}

// benchmarkPipelined sends batches of 16 commands, each written by
// command, on 4 connections at once, and reads replies of lines lines
// each.
func benchmarkPipelined(b *testing.B, store resp.Store, command func(batch *strings.Builder, i int), lines int) {
	srv, err := resp.New(resp.Options{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	const depth = 16
	var batch strings.Builder
	for i := range depth {
		command(&batch, i)
	}
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer nc.Close()
		rd := bufio.NewReader(nc)
		for pb.Next() {
			if _, err := nc.Write([]byte(batch.String())); err != nil {
				b.Error(err)
				return
			}
			for range depth * lines {
				if _, err := rd.ReadSlice('\n'); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*depth), "ns/command")
}
