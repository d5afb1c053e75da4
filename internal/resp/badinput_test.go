package resp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/catena-kv/catena/internal/resp"
)

// rawConn is a client that writes bytes as they are, to send what no
// client library would.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, rd: bufio.NewReader(nc)}
}

func (c *rawConn) write(s string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one reply line, without its CRLF.
func (c *rawConn) line() (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(testTimeout))
	l, err := c.rd.ReadString('\n')
	return strings.TrimSuffix(l, "\r\n"), err
}

// closed reports whether the server closed the connection (EOF or reset
// on the next read) rather than going on.
func (c *rawConn) closed() bool {
	c.nc.SetReadDeadline(time.Now().Add(testTimeout))
	_, err := c.rd.ReadByte()
	return err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Bad input gets an error reply; malformed framing closes that
// connection, and only that one: a client working alongside sees no
// error at any point.
func TestBadInput(t *testing.T) {
	addr := startProxy(t)
	stop := make(chan struct{})
	var bystanderOps atomic.Int64
	bystanderErr := make(chan error, 1)
	go func() {
		ctx := context.Background()
		rc := newRedis(t, addr, 3)
		for i := 0; ; i++ {
			select {
			case <-stop:
				bystanderErr <- nil
				return
			default:
			}
			v := strconv.Itoa(i)
			if err := rc.Set(ctx, "bystander", v, 0).Err(); err != nil {
				bystanderErr <- fmt.Errorf("SET: %w", err)
				return
			}
			if got, err := rc.Get(ctx, "bystander").Result(); err != nil || got != v {
				bystanderErr <- fmt.Errorf("GET = %q, %v; want %q", got, err, v)
				return
			}
			bystanderOps.Add(1)
		}
	}()

	tests := []struct {
		name  string
		send  string
		reply string // prefix of the first reply line
		close bool   // the server closes the connection after it
	}{
		{"garbage line", "\x00\x01\xfegarbage\r\n", "-ERR unknown command '\x00\x01\xfegarbage'", false},
		{"bulk length outside an array", "$5\r\n", "-ERR unknown command '$5'", false},
		{"2 GB bulk length", "*2\r\n$3\r\nGET\r\n$2147483648\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"bulk length above the argument limit", "*2\r\n$3\r\nGET\r\n$" + strconv.Itoa(resp.ArgumentSizeMax+1) + "\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"negative bulk length", "*2\r\n$3\r\nGET\r\n$-7\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"endless bulk length line", "*1\r\n$" + strings.Repeat("9", 100), "-ERR Protocol error: invalid bulk length", true},
		{"too many arguments", "*" + strconv.Itoa(resp.ArgumentsMax+1) + "\r\n", "-ERR Protocol error: invalid multibulk length", true},
		{"negative argument count", "*-3\r\n", "-ERR Protocol error: invalid multibulk length", true},
		{"array with a non-bulk element", "*3\r\n$3\r\nSET\r\nxyz\r\n", "-ERR Protocol error: expected '$', got 'x'", true},
		{"bulk without its CRLF", "*2\r\n$3\r\nGET\r\n$1\r\nkXY", "-ERR Protocol error: invalid bulk length", true},
		{"unbalanced quotes", "SET \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request", true},
		{"endless inline line", strings.Repeat("x", resp.InlineSizeMax+10), "-ERR Protocol error: too big inline request", true},
		// The commands of keys that expire and of hashes.
		{"EXPIRE with an absurd time", "EXPIRE k 99999999999999999\r\n", "-ERR invalid expire time in 'expire' command", false},
		{"EXPIRE past int64", "PEXPIREAT k 99999999999999999999\r\n", "-ERR value is not an integer or out of range", false},
		{"SET EX with an absurd time", "SET k v EX 9999999999999\r\n", "-ERR invalid expire time in 'set' command", false},
		{"GETEX with two options", "GETEX k EX 5 PX 5\r\n", "-ERR syntax error", false},
		{"EXPIRE with unknown option", "EXPIRE k 5 SOON\r\n", "-ERR Unsupported option SOON", false},
		{"HSET with a field over the key limit", "HSET k " + strings.Repeat("f", 1025) + " v\r\n", "-ERR field of 1025 bytes exceeds the limit of 1024", false},
		{"HSET with a key over the limit", "HSET " + strings.Repeat("k", 1025) + " f v\r\n", "-ERR key of 1025 bytes exceeds the limit of 1024", false},
		{"HSET with a field and no value", "HSET k f1 v1 f2\r\n", "-ERR wrong number of arguments for 'hset' command", false},
		{"HINCRBY by a word", "HINCRBY k f many\r\n", "-ERR value is not an integer or out of range", false},
		{"SCAN with a forged cursor", "SCAN 123456789\r\n", "-ERR invalid cursor", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			c.write(tt.send)
			l, err := c.line()
			if err != nil || !strings.HasPrefix(l, tt.reply) {
				t.Fatalf("reply %q, %v; want %q...", l, err, tt.reply)
			}
			if tt.close {
				if !c.closed() {
					t.Errorf("connection still open after %q", l)
				}
				return
			}
			c.write("PING\r\n")
			if l, err := c.line(); err != nil || l != "+PONG" {
				t.Errorf("PING after the error = %q, %v; want +PONG", l, err)
			}
		})
	}

	// An unterminated array gets no reply (the command may yet arrive)
	// and holds nothing up: the connection answers once it is complete.
	t.Run("unterminated array", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.write("*2\r\n$4\r\nECHO\r\n")
		other := dialRaw(t, addr)
		other.write("PING\r\n")
		if l, err := other.line(); err != nil || l != "+PONG" {
			t.Fatalf("another connection's PING = %q, %v", l, err)
		}
		c.write("$2\r\nhi\r\n")
		if l, err := c.line(); err != nil || l != "$2" {
			t.Fatalf("reply %q, %v; want $2", l, err)
		}
	})

	close(stop)
	if err := <-bystanderErr; err != nil {
		t.Fatalf("a client alongside the bad input failed: %v", err)
	}
	if bystanderOps.Load() == 0 {
		t.Fatal("the client alongside made no progress")
	}
}

// 10 000 pipelined commands in one write are all answered, in order, and
// those on one key take effect in order.
func TestPipeline(t *testing.T) {
	addr := startProxy(t)
	const n = 10000
	var b strings.Builder
	for i := range n {
		switch i % 4 {
		case 0, 1:
			fmt.Fprintf(&b, "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(counterKey(i)), counterKey(i))
		case 2:
			fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$1\r\ns\r\n$%d\r\n%d\r\n", len(strconv.Itoa(i)), i)
		case 3:
			b.WriteString("*2\r\n$3\r\nGET\r\n$1\r\ns\r\n")
		}
	}
	c := dialRaw(t, addr)
	go c.write(b.String()) // the server replies while it is being sent
	counts := map[string]int{}
	for i := range n {
		l, err := c.line()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		var want string
		switch i % 4 {
		case 0, 1:
			counts[counterKey(i)]++
			want = ":" + strconv.Itoa(counts[counterKey(i)])
		case 2:
			want = "+OK"
		case 3:
			if l != "$"+strconv.Itoa(len(strconv.Itoa(i-1))) {
				t.Fatalf("reply %d = %q; want the value SET just before", i, l)
			}
			l, err = c.line()
			want = strconv.Itoa(i - 1)
		}
		if err != nil || l != want {
			t.Fatalf("reply %d = %q, %v; want %q", i, l, err, want)
		}
	}
}

func counterKey(i int) string { return "counter" + strconv.Itoa(i%7) }

// go-redis pipelines get their replies in order too, in both protocols.
func TestGoRedisPipeline(t *testing.T) {
	addr := startProxy(t)
	for _, protocol := range []int{2, 3} {
		ctx := testCtx(t)
		rc := newRedis(t, addr, protocol)
		key := fmt.Sprintf("p%d", protocol)
		cmds, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range 1000 {
				p.Set(ctx, key+":"+strconv.Itoa(i), i, 0)
				p.Incr(ctx, key)
				p.Get(ctx, key+":"+strconv.Itoa(i))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			if n, err := cmds[3*i+1].(*redis.IntCmd).Result(); err != nil || n != int64(i+1) {
				t.Fatalf("RESP%d: INCR #%d = %d, %v", protocol, i, n, err)
			}
			if v, err := cmds[3*i+2].(*redis.StringCmd).Result(); err != nil || v != strconv.Itoa(i) {
				t.Fatalf("RESP%d: GET #%d = %q, %v", protocol, i, v, err)
			}
		}
	}
}

// QUIT is answered, then the connection closes; commands after it in the
// same write are not run.
func TestQuit(t *testing.T) {
	addr := startProxy(t)
	c := dialRaw(t, addr)
	c.write("SET q 1\r\nQUIT\r\nSET q 2\r\n")
	for _, want := range []string{"+OK", "+OK"} {
		if l, err := c.line(); err != nil || l != want {
			t.Fatalf("reply %q, %v; want %q", l, err, want)
		}
	}
	if !c.closed() {
		t.Fatal("connection open after QUIT")
	}
	c = dialRaw(t, addr)
	c.write("GET q\r\n")
	if l, _ := c.line(); l != "$1" {
		t.Fatalf("GET q = %q", l)
	}
	if l, _ := c.line(); l != "1" {
		t.Fatalf("GET q = %q, want 1: the SET after QUIT ran", l)
	}
}

// Beyond ConnectionsMax a connection is refused with Redis's error; the
// others go on.
func TestConnectionsMax(t *testing.T) {
	addr := startProxy(t, func(o *resp.Options) { o.ConnectionsMax = 2 })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, c := range []*rawConn{a, b} {
		c.write("PING\r\n")
		if l, err := c.line(); l != "+PONG" {
			t.Fatalf("PING = %q, %v", l, err)
		}
	}
	third := dialRaw(t, addr)
	if l, err := third.line(); l != "-ERR max number of clients reached" {
		t.Fatalf("third connection got %q, %v", l, err)
	}
	b.nc.Close()
	// The slot frees once the server has seen b close.
	for deadline := time.Now().Add(testTimeout); ; {
		c := dialRaw(t, addr)
		c.write("PING\r\n")
		if l, _ := c.line(); l == "+PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
