package resp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/testcluster"
)

// memStarter is a memStore that is also a Starter: each batch of calls
// runs on a goroutine of its own, so batches end in any order; or, when
// inline, before Start returns, as a server's front end answers what it
// reads from its replicas.
type memStarter struct {
	*memStore
	started *atomic.Int64 // calls started
	inline  bool
}

func (s memStarter) Start(ctx context.Context, calls []client.Call) {
	s.started.Add(int64(len(calls)))
	calls = append([]client.Call(nil), calls...) // the caller reuses its slice
	run := func(f func()) { go f() }
	if s.inline {
		run = func(f func()) { f() }
	}
	run(func() {
		for _, c := range calls {
			var r client.CallResult
			switch c.Kind {
			case client.CallGet:
				r.Value, r.Found, r.Err = s.Get(ctx, c.Key)
			case client.CallPut:
				r.Err = s.Put(ctx, c.Key, c.Value)
			default:
				r.Err = fmt.Errorf("memStarter: no call of kind %d", c.Kind)
			}
			c.Done(r)
		}
	})
}

// failingStarter fails every call, started or run, with err.
type failingStarter struct{ failingStore }

func (f failingStarter) Start(_ context.Context, calls []client.Call) {
	for _, c := range calls {
		c.Done(client.CallResult{Err: f.err})
	}
}

// bulk is a command in RESP.
func bulk(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// exchange sends what to a server in one write, then QUIT, and returns
// every byte of its replies.
func exchange(t *testing.T, addr, what string) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(nc, what+bulk("QUIT")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(nc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A Starter changes nothing a client sees: the replies to GET and SET,
// valid or not, with options (those memStore serves) or without, pipelined on one key or
// several, are byte for byte those of the same store without Start,
// whether the calls end later or before Start returns (as a server's
// front end answers what it reads from its replicas).

func TestStarterSameReplies(t *testing.T) {
	var script strings.Builder
	for i := range 50 {
		v := fmt.Sprint(i)
		script.WriteString(bulk("SET", "k", v) + bulk("GET", "k") + bulk("get", "k") + bulk("SET", "k"+v, v) + bulk("GeT", "k"+v))
	}
	for _, cmd := range [][]string{
		{"GET", "missing"}, {"SET", "", "v"}, {"GET", ""}, {"SET", "\x00reserved", "v"}, {"GET", "\x00reserved"},
		{"SET", strings.Repeat("k", kv.KeySizeMax+1), "v"}, {"GET", strings.Repeat("k", kv.KeySizeMax+1)},
		{"SET", "big", strings.Repeat("v", kv.ValueSizeMax+1)}, {"GET", "big"},
		{"SET", "k", "v", "BAD"}, {"SET", "k", "v", "NX", "XX"}, {"SET", "k", "v", "EX", "10"},
		{"SET", "k"}, {"GET"}, {"GET", "a", "b"}, {"SET", "e", ""}, {"GET", "e"},
		{"CLIENT", "CONSISTENCY", "any-member"}, {"GET", "k"}, {"SET", "k", "x"}, {"GET", "k"},
	} {
		script.WriteString(bulk(cmd...))
	}
	plain := serve(t, resp.Options{Store: &memStore{m: map[string][]byte{}}})
	want := exchange(t, plain, script.String())
	for _, inline := range []bool{false, true} {
		var n atomic.Int64
		started := serve(t, resp.Options{Store: memStarter{&memStore{m: map[string][]byte{}}, &n, inline}})
		got := exchange(t, started, script.String())
		if !bytes.Equal(got, want) {
			t.Errorf("replies with a Starter (inline %v) differ from those without:\n got %.2000q\nwant %.2000q", inline, got, want)
		}
		if n.Load() < 50 {
			t.Errorf("inline %v: %d calls started; want most of the script's", inline, n.Load())
		}
	}
	if !bytes.Contains(want, []byte("$2\r\n49\r\n")) || !bytes.Contains(want, []byte("-ERR empty key\r\n")) {
		t.Errorf("unexpected replies (the script is wrong?): %.2000q", want)
	}
}

// An error of a started call gets the reply it gets without Start.
func TestStarterErrors(t *testing.T) {
	err := fmt.Errorf("%w: %w", client.ErrAmbiguous, context.DeadlineExceeded)
	script := bulk("SET", "k", "v") + bulk("GET", "k") + bulk("PING")
	want := exchange(t, serve(t, resp.Options{Store: failingStore{err: err}}), script)
	got := exchange(t, serve(t, resp.Options{Store: failingStarter{failingStore{err: err}}}), script)
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte("-ERR catena: outcome unknown")) {
		t.Errorf("replies with a Starter: %q; without: %q", got, want)
	}
}

// The hash commands a Starter runs (HSET, HMSET and the reads) reply as
// they do without it, valid or not, pipelined on one key or several:
// the same script against the same cluster, once through the client as
// a Starter and once through the client hiding Start, each on keys of
// its own.
func TestStarterSameRepliesForHashes(t *testing.T) {
	c := testcluster.Start(t, 3)
	cl := c.Dial(t)
	script := func(prefix string) string {
		var b strings.Builder
		h, s := prefix+"h", prefix+"s"
		b.WriteString(bulk("SET", s, "string"))
		for i := range 20 {
			v := fmt.Sprint(i)
			b.WriteString(bulk("HSET", h, "f"+v, v, "g", v) + bulk("HGET", h, "f"+v) + bulk("HMGET", h, "g", "x", "f"+v, "g") +
				bulk("HSET", prefix+"h"+v, "a", v) + bulk("HGETALL", prefix+"h"+v))
		}
		for _, cmd := range [][]string{
			{"HGETALL", h}, {"HKEYS", h}, {"HVALS", h}, {"HLEN", h}, {"HEXISTS", h, "g"}, {"HEXISTS", h, "x"},
			{"HSTRLEN", h, "f19"}, {"HSTRLEN", h, "x"}, {"HGET", h, "x"}, {"HMGET", h, "x", "y"},
			{"HMSET", h, "a", "1", "b", "2"}, {"HGETALL", h},
			{"HGET", s, "f"}, {"HMGET", s, "f"}, {"HGETALL", s}, {"HLEN", s}, {"HSET", s, "f", "v"}, {"HMSET", s, "f", "v"},
			{"HGET", "missing", "f"}, {"HMGET", "missing", "f", "g"}, {"HGETALL", "missing"}, {"HLEN", "missing"},
			{"HSET", h, "f"}, {"HSET", h}, {"HMSET", h, "a"}, {"HGET", h}, {"HGETALL", h, "x"},
			{"HSET", "", "f", "v"}, {"HGET", "", "f"}, {"HSET", h, strings.Repeat("f", kv.KeySizeMax+1), "v"},
			{"HMGET", h, strings.Repeat("f", kv.KeySizeMax+1)}, {"HSET", h, "big", strings.Repeat("v", kv.ValueSizeMax+1)},
			{"CLIENT", "CONSISTENCY", "any-member"}, {"HMGET", h, "a", "b"}, {"HGETALL", h},
		} {
			b.WriteString(bulk(cmd...))
		}
		return b.String()
	}
	plain := serve(t, resp.Options{Store: struct{ resp.Store }{cl}})
	started := serve(t, resp.Options{Store: cl})
	want := exchange(t, plain, script("plain:"))
	got := exchange(t, started, script("started:"))
	if !bytes.Equal(got, want) {
		t.Errorf("replies with a Starter differ from those without:\n got %.3000q\nwant %.3000q", got, want)
	}
	if !bytes.Contains(want, []byte("WRONGTYPE")) || !bytes.Contains(want, []byte("*4\r\n$1\r\n0\r\n$-1\r\n$1\r\n0\r\n$1\r\n0\r\n")) {
		t.Errorf("unexpected replies (the script is wrong?): %.3000q", want)
	}
}
