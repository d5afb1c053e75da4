package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Connections: each peer's write queue, the dialing of listening peers
// with backoff, the accepting of connections, and the reader and writer
// of each.

// conn is one TCP connection (or, for a dialed peer, the succession of
// connections to it) with its write queue.
type conn struct {
	peer  wire.NodeID
	queue chan queued
	// delay is the emulated link's (zero: none); lastDue, guarded by
	// dueMu, is when the last message queued may leave.
	delay   LinkDelay
	dueMu   sync.Mutex
	lastDue time.Duration
	mu      sync.Mutex
	nc      net.Conn
	done    chan struct{}
	once    sync.Once
	// failure is why the peer cannot be reached, for a dialed peer that
	// has not yet sent a valid message: the last dial error, or the error
	// that closed a connection before the peer said anything (not a
	// Catena node). nil once the peer sent a message.
	failure error
	stats   *counters
	// caller is, for an accepted client connection, who its certificate
	// proves the client is, set on the requests it sends
	// (the Caller of wire.ClientRequest, AuthRequest, KeyspaceRequest).
	caller wire.Caller
	// inFlightMax bounds, for an accepted client connection, its
	// messages waiting for the node (0: none); inFlight counts them, and
	// refusedInFlight says a refusal was logged.
	inFlightMax     int64
	inFlight        atomic.Int64
	refusedInFlight bool
}

// queued is a message waiting to be written, and when it may leave
// (processClock; zero: at once). Queues hold up to queueMessagesMax of
// them, so the due time is kept small.
type queued struct {
	m   wire.Message
	due time.Duration
}

// processStart anchors processClock.
var processStart = time.Now()

// processClock reads the monotonic clock, as a duration since the
// package was loaded.
func processClock() time.Duration { return time.Since(processStart) }

func (t *Transport) newConn(peer wire.NodeID, nc net.Conn) *conn {
	c := &conn{peer: peer, queue: make(chan queued, queueMessagesMax), nc: nc, done: make(chan struct{}), stats: &t.stats}
	if delay := t.linkDelay.Load(); delay != nil {
		c.delay = (*delay)(peer)
	}
	t.all[c] = true
	return c
}

func (c *conn) enqueue(m wire.Message) {
	q := queued{m: m}
	if c.delay != (LinkDelay{}) {
		q.due = c.nextDue()
	}
	select {
	case c.queue <- q:
	default:
		// The peer is not keeping up: break the connection; the protocol
		// resends what matters after the reset.
		c.stats.overflows.Add(1)
		c.mu.Lock()
		if c.nc != nil {
			c.nc.Close()
		}
		c.mu.Unlock()
	}
}

// nextDue returns when a message queued now may leave on the emulated
// link: OneWay ± Jitter from now, and not before the previous message.
func (c *conn) nextDue() time.Duration {
	d := c.delay.OneWay
	if c.delay.Jitter > 0 {
		d += time.Duration(rand.Int64N(int64(2*c.delay.Jitter+1))) - c.delay.Jitter
	}
	c.dueMu.Lock()
	defer c.dueMu.Unlock()
	due := max(processClock()+d, c.lastDue, 1)
	c.lastDue = due
	return due
}

func (c *conn) close() {
	c.once.Do(func() { close(c.done) })
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
	}
	c.mu.Unlock()
}

func (c *conn) setFailure(err error) {
	c.mu.Lock()
	c.failure = err
	c.mu.Unlock()
}

// dialLoop keeps a connection to a listening peer, redialling with
// backoff. After every connection but the first it reports a PeerReset.
func (t *Transport) dialLoop(c *conn) {
	backoff := redialMin
	connected := false
	for t.ctx.Err() == nil {
		if t.isCut(c.peer) {
			c.setFailure(errCut)
			select {
			case <-time.After(cutRetry):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		nc, err := net.DialTimeout("tcp", string(c.peer), dialTimeout)
		if err != nil {
			t.stats.dialFailures.Add(1)
			c.setFailure(err)
			select {
			case <-time.After(backoff):
			case <-t.ctx.Done():
				return
			}
			backoff = min(2*backoff, redialMax)
			continue
		}
		nc = countedConn{nc, &t.stats}
		if t.tls != nil {
			if nc, err = t.clientHandshake(nc, c.peer); err != nil {
				t.stats.dialFailures.Add(1)
				c.setFailure(err)
				t.log.Warn("TLS link refused", "peer", c.peer, "err", err)
				select {
				case <-time.After(backoff):
				case <-t.ctx.Done():
					return
				}
				backoff = min(2*backoff, redialMax)
				continue
			}
		}
		backoff = redialMin
		c.mu.Lock()
		select {
		case <-c.done:
			// Close ran while this dial was in flight: it closed the
			// previous connection, not this one.
			c.mu.Unlock()
			nc.Close()
			return
		default:
		}
		if t.isCut(c.peer) {
			// Cut while this dial was in flight (checked under c.mu, so
			// SetCut either sees this connection or it sees the cut).
			c.mu.Unlock()
			nc.Close()
			continue
		}
		c.nc = nc
		c.mu.Unlock()
		if connected {
			t.stats.reconnects.Add(1)
			t.deliver(Delivery{From: t.self, Msg: &wire.PeerReset{Peer: c.peer}})
		}
		connected = true
		t.serve(c, nc, true)
		c.mu.Lock()
		incompatible := errors.Is(c.failure, ErrIncompatible)
		c.mu.Unlock()
		if incompatible {
			// Dialing again at once would be refused again: wait for an
			// operator to replace one of the two (docs/upgrades.md).
			select {
			case <-time.After(incompatibleRetry):
			case <-t.ctx.Done():
				return
			}
		}
	}
}

func (t *Transport) acceptLoop() {
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() == nil {
				t.log.Warn("accept failed", "err", err)
				time.Sleep(redialMin)
				continue
			}
			return
		}
		t.wg.Go(func() { t.handshake(countedConn{nc, &t.stats}) })
	}
}

// serve runs a dialed connection: write the Hello, then read and write
// until it breaks.
func (t *Transport) serve(c *conn, nc net.Conn, dialed bool) {
	r := bufio.NewReaderSize(nc, readBufferBytes)
	c.queueFront(t.hello())
	t.serveReader(c, nc, r, dialed)
}

// queueFront writes the hello before anything queued. Only the writer of
// this connection is running, so writing it directly is safe.
func (c *conn) queueFront(h *wire.Hello) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := bufio.NewWriter(c.nc)
	if err := wire.WriteFrame(w, h); err == nil {
		w.Flush()
	}
}

// serveReader reads frames until the connection breaks, while a writer
// goroutine drains the queue. An accepted connection from a listening peer
// reports a PeerReset when it breaks: what that peer sent may be lost.
func (t *Transport) serveReader(c *conn, nc net.Conn, r *bufio.Reader, dialed bool) {
	writerDone := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(writerDone)
		t.writeLoop(c, nc, stop)
	}()
	var buf []byte
	heard, toldUnknown := false, false
	for {
		m, b, err := wire.ReadFrame(r, buf)
		buf = b
		if err != nil && errors.Is(err, wire.ErrUnknownMessage) {
			// A newer release's message: the frame was read whole, so the
			// connection goes on without it (docs/adr/0026, step 3).
			if !toldUnknown {
				toldUnknown = true
				t.log.Warn("dropping messages of a type this version does not know (a newer release's?); the connection stays", "peer", c.peer, "err", err)
			}
			continue
		}
		if err != nil {
			if dialed && !heard && t.ctx.Err() == nil {
				if _, secured := nc.(*tls.Conn); secured {
					c.setFailure(fmt.Errorf("%s completed the TLS handshake, then closed the connection before sending anything: it refused this node (its log says why: an expired certificate or one of another CA, one that may not join as this node, or too many connections of this client identity): %w", c.peer, err))
				} else {
					c.setFailure(fmt.Errorf("%s %w: %w", c.peer, ErrPlaintextUnanswered, err))
				}
			}
			if t.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				t.log.Debug("connection closed", "peer", c.peer, "err", err)
				if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
					t.log.Warn("dropping connection after a malformed frame", "peer", c.peer, "err", err)
				}
			}
			break
		}
		if h, isHello := m.(*wire.Hello); isHello {
			// The accepting end's versions: a dialer that finds them
			// incompatible says so once and stops (dialLoop waits).
			if err := t.incompatible(c.peer, h); dialed && err != nil {
				c.setFailure(err)
				t.stats.incompatible.Add(1)
				t.log.Warn("link refused", "peer", c.peer, "reason", err)
				break
			}
			continue
		}
		if _, isReset := m.(*wire.PeerReset); isReset {
			continue // only the transport itself says that
		}
		if dialed && !heard {
			heard = true
			c.setFailure(nil)
		}
		d := Delivery{From: c.peer, Msg: m}
		if !dialed && strings.HasPrefix(string(c.peer), ClientPrefix) {
			// Who sent it is the connection's certificate's to say, never
			// the sender's.
			switch m := m.(type) {
			case *wire.ClientRequest:
				m.Caller = c.caller
			case *wire.AuthRequest:
				m.Caller = c.caller
			case *wire.KeyspaceRequest:
				m.Caller = c.caller
			case *wire.VersionRequest:
				m.Caller = c.caller
			}
			if c.inFlightMax > 0 {
				if c.inFlight.Load() >= c.inFlightMax {
					t.refuseInFlight(c, m)
					continue
				}
				c.inFlight.Add(1)
				d.inFlight = &c.inFlight
			}
		}
		t.deliver(d)
	}
	nc.Close()
	close(stop)
	<-writerDone
	if !dialed {
		t.mu.Lock()
		delete(t.all, c)
		if t.accepted[c.peer] == c {
			delete(t.accepted, c.peer)
		}
		t.mu.Unlock()
		if !strings.HasPrefix(string(c.peer), ClientPrefix) && t.ctx.Err() == nil {
			t.deliver(Delivery{From: t.self, Msg: &wire.PeerReset{Peer: c.peer}})
		}
	}
}

// writeLoop writes queued messages, flushing when the queue runs empty.
//
// Before flushing it yields the processor once and looks again: senders
// that were about to queue a message (a node loop sending a batch's
// output, a client's concurrent requests) usually do so meanwhile, and
// their messages share the write system call instead of each paying one.
func (t *Transport) writeLoop(c *conn, nc net.Conn, stop <-chan struct{}) {
	w := bufio.NewWriterSize(nc, writeBufferBytes)
	var timer *time.Timer
	// wait holds q until it is due, flushing what is buffered first; it
	// reports false if the connection is closing.
	wait := func(q queued) bool {
		d := q.due - processClock()
		if q.due == 0 || d <= 0 {
			return true
		}
		if w.Flush() != nil {
			return false
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return true
		case <-stop:
		case <-c.done:
		}
		timer.Stop()
		return false
	}
	for {
		var q queued
		select {
		case q = <-c.queue:
		case <-stop:
			return
		case <-c.done:
			return
		}
		yielded := false
		for q.m != nil {
			if !wait(q) {
				nc.Close()
				return
			}
			if err := wire.WriteFrame(w, q.m); err != nil {
				if errors.Is(err, wire.ErrTooLarge) {
					t.log.Error("dropping a message too large to send", "peer", c.peer, "type", wire.MessageName(q.m))
				} else {
					nc.Close()
					return
				}
			}
			select {
			case q = <-c.queue:
			default:
				q = queued{}
				if !yielded && w.Buffered() < coalesceBytesMax {
					yielded = true
					runtime.Gosched()
					select {
					case q = <-c.queue:
					default:
					}
				}
			}
		}
		if err := w.Flush(); err != nil {
			nc.Close()
			return
		}
	}
}
