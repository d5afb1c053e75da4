// Package resp serves the Redis protocol in front of a Catena cluster, so
// that Redis clients and tools (redis-cli, redis-benchmark, go-redis, ...)
// can use it. It speaks RESP2, and RESP3 after HELLO 3, and answers the
// string commands whose semantics Catena's operations give exactly: PING,
// ECHO, AUTH, HELLO, SELECT 0, GET, SET (NX, XX, GET, KEEPTTL), GETSET, SETNX,
// DEL, EXISTS, INCR, INCRBY, DECR, DECRBY, APPEND, STRLEN, MGET, MSET,
// CLIENT, INFO, COMMAND and QUIT. Every other command gets Redis's
// "unknown command" error.
//
// A Server holds no data: each command becomes one or more operations of
// a Catena client (Store; in production a *client.Client, which runs the
// one client core), so each key's commands are linearizable and applied
// exactly once however often the client retries, as for the Go client.
// Commands that Redis defines as one atomic step on one key are one
// Catena operation (GETSET and SET GET are a swap, SET XX a replace, SET
// NX and SETNX a put-if-absent, APPEND an append); commands on several
// keys (MSET, MGET, DEL, EXISTS) are one operation per key, atomic per
// key and not across keys.
//
// The Redis protocol is parsed by github.com/tidwall/redcon; a guard in
// front of it bounds what one connection may make the process hold (see
// the limits below). Commands a client pipelines run concurrently unless
// they share a key, and their replies go back in order.
package resp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
)

// Limits of one connection. What a connection holds is bounded by about
// 2·CommandSizeMax of read buffer, the parsed commands of one read, and
// PipelineBytesMax of commands in flight with their largest possible
// replies.
const (
	// ArgumentSizeMax bounds one argument (bulk string). A value above
	// kv.ValueSizeMax but within this limit is refused with an error and
	// the connection kept; a longer bulk length is a protocol error that
	// closes the connection as soon as its header arrives, as Redis does
	// above proto-max-bulk-len.
	ArgumentSizeMax = 8 * kv.ValueSizeMax
	// ArgumentsMax bounds the arguments of one command.
	ArgumentsMax = 1 << 20
	// CommandSizeMax bounds one command's bytes as sent.
	CommandSizeMax = 16 << 20
	// InlineSizeMax bounds an inline (telnet-style) command's line, as
	// Redis's PROTO_INLINE_MAX_SIZE does.
	InlineSizeMax = 64 << 10
	// PipelineDepthMax is Options.PipelineMax's default: the commands of
	// one connection read but not yet answered; beyond, reading stops
	// until the oldest is answered.
	PipelineDepthMax = 1024
	// PipelineBytesMax bounds the bytes of one connection's commands in
	// flight plus the largest replies they may produce (a GET counts
	// kv.ValueSizeMax). A command that alone exceeds it runs alone.
	PipelineBytesMax = 32 << 20
	// ReplySizeMax bounds one reply with many values (MGET).
	ReplySizeMax = 16 << 20
	// KeysParallelMax bounds the operations one multi-key command (MGET,
	// MSET, DEL, EXISTS) has in flight at once.
	KeysParallelMax = 64
	// ConnectionsMaxDefault is Options.ConnectionsMax's default, Redis's
	// maxclients default.
	ConnectionsMaxDefault = 10000
	// ConnectionsPerAddressMaxDefault is Options.ConnectionsPerAddressMax's
	// default.
	ConnectionsPerAddressMaxDefault = 1024
	// WorkersIdleMax bounds the goroutines kept waiting to run the next
	// command. Reusing them spares each command a new goroutine whose
	// stack grows (and is copied) on the way into the client.
	WorkersIdleMax = 256
)

// RedisVersion is the Redis version the front end reports (INFO's
// redis_version, HELLO's version): the commands it serves behave as in
// Redis 7.0.
const RedisVersion = "7.0.0"

// Store is what the front end asks of a Catena cluster. *client.Client
// implements it.
type Store interface {
	Get(ctx context.Context, key string, opts ...client.ReadOption) ([]byte, bool, error)
	Put(ctx context.Context, key string, value []byte, opts ...client.WriteOption) error
	Delete(ctx context.Context, key string) (bool, error)
	PutIfAbsent(ctx context.Context, key string, value []byte, opts ...client.WriteOption) (put bool, current []byte, err error)
	Swap(ctx context.Context, key string, value []byte, opts ...client.WriteOption) (prior []byte, found bool, err error)
	Replace(ctx context.Context, key string, value []byte, opts ...client.WriteOption) (replaced bool, prior []byte, err error)
	ChangeExpiry(ctx context.Context, key string, e client.Expiry) (changed bool, value []byte, err error)
	Deadline(ctx context.Context, key string, opts ...client.ReadOption) (value []byte, deadline time.Time, found bool, err error)
	TypeOf(ctx context.Context, key string, opts ...client.ReadOption) (string, error)
	HashSet(ctx context.Context, key string, fields ...client.Field) (int64, error)
	HashSetIfAbsent(ctx context.Context, key, field string, value []byte) (bool, error)
	HashDelete(ctx context.Context, key string, fields ...string) (int64, error)
	HashIncrement(ctx context.Context, key, field string, delta int64) (int64, error)
	HashGet(ctx context.Context, key string, fields []string, opts ...client.ReadOption) ([]client.Field, bool, error)
	Increment(ctx context.Context, key string, delta int64) (int64, error)
	Append(ctx context.Context, key string, suffix []byte) ([]byte, error)
	Scan(ctx context.Context, cur client.Cursor, match string, count int) ([]string, client.Cursor, error)
}

var _ Store = (*client.Client)(nil)

// Options configure a Server.
type Options struct {
	// Store executes the commands (required).
	Store Store
	// Consistency is the read consistency a new connection starts with
	// (default client.Strong); CLIENT CONSISTENCY changes it per
	// connection.
	Consistency client.Consistency
	// ConnectionsMax bounds the open connections (default
	// ConnectionsMaxDefault); one more is answered "-ERR max number of
	// clients reached" and closed.
	ConnectionsMax int
	// ConnectionsPerAddressMax bounds the open connections from one
	// remote IP address (default ConnectionsPerAddressMaxDefault); one
	// more is answered "-ERR max number of clients reached from this
	// address", logged, and closed.
	ConnectionsPerAddressMax int
	// PipelineMax bounds the commands of one connection in flight: read
	// and not yet answered (default PipelineDepthMax). Beyond it the
	// connection's reading stops until the oldest is answered (Redis
	// clients pipeline on purpose, redis-cli --pipe: they are slowed
	// down, not refused).
	PipelineMax int
	// Version and Masters are reported by INFO (catena_version,
	// catena_masters).
	Version string
	Masters string
	// Logger receives connection errors at debug level; nil discards.
	Logger *slog.Logger
	// Observer, if set, is told every command's result (metrics.Proxy).
	Observer Observer
	// Password, if set, is required of every connection before any
	// command but AUTH, HELLO and QUIT: AUTH password, AUTH default
	// password or HELLO 3 AUTH default password, as Redis's requirepass.
	// Failed attempts are logged at WARN. The default user's commands
	// run as the proxy's own certificate user.
	Password string
	// Users, if set, checks AUTH username password (and HELLO's AUTH)
	// for users other than "default": the cluster's users
	// (docs/adr/0015-security.md). A connection that authenticated as one
	// sends its commands for that user (client.WithUser), and the
	// servers check the user's permissions.
	Users Authenticator
}

// Authenticator checks a user's password.
type Authenticator interface {
	// Authenticate reports whether password is user's. It may be slow
	// (a password hash): it runs in the connection's reader goroutine.
	Authenticate(user, password string) bool
}

// Observer receives the outcome of every command: its lower-case name
// ("unknown" for a command the server does not serve), whether the reply
// is an error, and the time from reading it to its reply being ready.
// It is called from many goroutines at once.
type Observer interface {
	Command(name string, failed bool, took time.Duration)
}

// Stats are a server's connection counts.
type Stats struct {
	Connections, Accepted, Rejected, Commands int64
}

// Stats returns the server's connection and command counts.
func (s *Server) Stats() Stats {
	return Stats{Connections: int64(s.connections()), Accepted: s.connectionsTotal.Load(),
		Rejected: s.rejectedTotal.Load(), Commands: s.commandsTotal.Load()}
}

// Server serves the Redis protocol on listeners. It is safe for concurrent
// use.
type Server struct {
	opts    Options
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
	runID   string

	connectionsTotal atomic.Int64
	commandsTotal    atomic.Int64
	rejectedTotal    atomic.Int64
	lastID           atomic.Int64

	// work hands a command to an idle worker; idle counts them.
	work chan func()
	idle atomic.Int64

	// cursors are the SCANs in progress (scan.go).
	cursors *cursorTable

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// byAddress counts the open connections per remote IP address.
	byAddress map[string]int
	closed    bool
	wg        sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("resp: server closed")

// New returns a server; Serve runs it on a listener.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("resp: no Store")
	}
	if o.Consistency != client.Strong && o.Consistency != client.AnyMember {
		return nil, fmt.Errorf("resp: unknown consistency %d", o.Consistency)
	}
	if o.ConnectionsMax <= 0 {
		o.ConnectionsMax = ConnectionsMaxDefault
	}
	if o.ConnectionsPerAddressMax <= 0 {
		o.ConnectionsPerAddressMax = ConnectionsPerAddressMaxDefault
	}
	if o.PipelineMax <= 0 {
		o.PipelineMax = PipelineDepthMax
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var id [20]byte
	rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts: o, ctx: ctx, cancel: cancel, started: time.Now(), runID: hex.EncodeToString(id[:]),
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, byAddress: map[string]int{}, cursors: newCursorTable(),
		work: make(chan func()),
	}, nil
}

// run runs f on an idle worker, or on a new one when none is idle.
func (s *Server) run(f func()) {
	select {
	case s.work <- f:
	default:
		go s.worker(f)
	}
}

// worker runs f, then waits for more work, unless WorkersIdleMax workers
// wait already or the server is closed.
func (s *Server) worker(f func()) {
	for {
		f()
		if s.idle.Add(1) > WorkersIdleMax {
			s.idle.Add(-1)
			return
		}
		select {
		case f = <-s.work:
			s.idle.Add(-1)
		case <-s.ctx.Done():
			s.idle.Add(-1)
			return
		}
	}
}

// Serve accepts connections on ln and serves each until it closes. It
// returns ErrServerClosed after Close, or the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors or similar: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.opts.Logger.Warn("resp: accept failed; retrying", "error", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accept(nc)
	}
}

// accept starts serving nc, or refuses it when the server is full or
// closed.
func (s *Server) accept(nc net.Conn) {
	s.connectionsTotal.Add(1)
	s.mu.Lock()
	if s.closed || len(s.conns) >= s.opts.ConnectionsMax {
		closed := s.closed
		s.mu.Unlock()
		s.rejectedTotal.Add(1)
		if !closed {
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			nc.Write([]byte("-ERR max number of clients reached\r\n"))
		}
		nc.Close()
		return
	}
	host := remoteHost(nc)
	if s.byAddress[host] >= s.opts.ConnectionsPerAddressMax {
		s.mu.Unlock()
		s.rejectedTotal.Add(1)
		s.opts.Logger.Warn("resp: connection refused: too many from one address", "remote", nc.RemoteAddr().String(), "limit", s.opts.ConnectionsPerAddressMax)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write([]byte("-ERR max number of clients reached from this address\r\n"))
		nc.Close()
		return
	}
	s.byAddress[host]++
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		if s.byAddress[host]--; s.byAddress[host] <= 0 {
			delete(s.byAddress, host)
		}
		s.mu.Unlock()
	}()
}

// remoteHost returns the IP address of a connection's remote end.
func remoteHost(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// connections returns the number of open connections.
func (s *Server) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops the listeners, closes every connection and waits until
// their goroutines have ended. Commands in flight end as their context
// is cancelled (an update may then have been applied or not).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
