package resp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"

	"github.com/catena-kv/catena/client"
)

// conn is one client connection. Its reader goroutine parses commands
// and dispatches them in order: connection commands (CLIENT, HELLO, ...)
// run at once, data commands in their own goroutine once every earlier
// command of the connection on one of their keys has finished. Each
// command's job goes, in order, to the writer goroutine, which waits for
// it and writes its reply: replies leave in the order the commands came.
//
// Pipelined commands on different keys therefore run concurrently, as if
// sent on different connections: each is linearizable, and a command on
// a key sees the effects of every earlier command of the connection on
// that key, but another client may see a later command's effect on one
// key before an earlier command's effect on another.
type conn struct {
	s       *Server
	nc      net.Conn
	id      int64
	created time.Time
	out     chan *job
	budget  budget

	// The connection's state, touched by the reader goroutine only.
	name, libName, libVersion string
	resp3                     bool
	consistency               client.Consistency
	// authenticated: the connection may run commands (always, without
	// Options.Password).
	authenticated bool
	// user is the cluster user the connection authenticated as ("" for
	// Redis's default user: the proxy's own), and ctx the context its
	// data commands run in, which names it (client.WithUser).
	user string
	ctx  context.Context
	// lastByKey is the latest job on each key; a new job on the key
	// waits for it.
	lastByKey map[string]*job
	pruneAt   int // prune lastByKey when it grows beyond this
	// starter is the Store's Starter, if it is one; pending are the
	// calls read and not yet started with it (start.go).
	starter Starter
	pending []client.Call
}

// job is one command's reply in the making.
type job struct {
	done chan struct{} // closed when out is set
	out  []byte
	// value, when isValue, is the reply after out, as a bulk string: a
	// GET's value, written from where the client decoded it.
	value   []byte
	isValue bool
	cost    int64
	// close ends the connection once this reply is written.
	close bool
	// flush sends the replies written so far once this one is: it is the
	// last of the commands of one read.
	flush bool
	// key holds the key of a command on one key (keysOf).
	key [1]string
	// r is a data command's reply.
	r reply
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s: s, nc: nc, id: s.lastID.Add(1), created: time.Now(),
		out:         make(chan *job, s.opts.PipelineMax),
		consistency: s.opts.Consistency, authenticated: s.opts.Password == "",
		lastByKey: map[string]*job{},
		pruneAt:   s.opts.PipelineMax,
		ctx:       s.ctx,
	}
	c.starter, _ = s.opts.Store.(Starter)
	c.budget.cond = sync.NewCond(&c.budget.mu)
	c.budget.max = PipelineBytesMax
	return c
}

// serve reads and dispatches commands until the connection ends, then
// waits for every reply to be written or dropped.
func (c *conn) serve() {
	defer c.nc.Close()
	written := make(chan struct{})
	go c.writeLoop(written)
	c.readLoop()
	close(c.out)
	<-written
}

func (c *conn) readLoop() {
	rd := redcon.NewReader(&guard{r: c.nc})
	for {
		cmds, err := rd.ReadCommands()
		if err != nil {
			if !isConnectionError(err) {
				msg := strings.TrimPrefix(err.Error(), errLimit.Error()+": ")
				c.send(&job{out: (&reply{}).errBytes("ERR Protocol error: " + msg), close: true})
				c.s.opts.Logger.Debug("resp: protocol error; closing the connection", "remote", c.nc.RemoteAddr(), "error", err)
			}
			return
		}
		for i, cmd := range cmds {
			if !c.dispatch(cmd, i == len(cmds)-1) {
				c.startPending()
				return
			}
		}
		c.startPending()
	}
}

// isConnectionError reports whether a read failed because the connection
// ended, rather than on what the client sent.
func isConnectionError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.As(err, &ne)
}

// send queues a finished job.
func (c *conn) send(j *job) {
	j.done = make(chan struct{})
	close(j.done)
	c.queue(j)
}

// queue hands a job to the writer. When the writer's queue is full it
// starts the pending calls first: the writer may be waiting for one.
func (c *conn) queue(j *job) {
	if len(c.out) == cap(c.out) {
		c.startPending()
	}
	c.out <- j
}

// writeLoop writes each job's reply in order. It flushes after the last
// reply to the commands of one read (as Redis writes the replies to what
// it read in one go), and before waiting for a reply that is not ready,
// so a slow command does not hold back the replies before it. It yields
// once before such a flush: replies that finish together (a batch of
// answers from the chain) then leave in one write, not one each. After a
// write fails it drops the rest.
func (c *conn) writeLoop(written chan<- struct{}) {
	defer close(written)
	w := bufio.NewWriterSize(c.nc, 16<<10)
	broken := false
	flush := func() {
		if !broken && w.Buffered() > 0 && w.Flush() != nil {
			broken = true
			c.nc.Close() // ends the reader too
		}
	}
	for j := range c.out {
		if !isDone(j) {
			runtime.Gosched()
			if !isDone(j) {
				flush()
				<-j.done
			}
		}
		if !broken {
			w.Write(j.out)
			if j.isValue {
				writeBulk(w, j.value)
			}
		}
		c.budget.release(j.cost)
		if j.close {
			flush()
			broken = true
			c.nc.Close()
		}
		if j.flush {
			flush()
		}
	}
	flush()
}

func isDone(j *job) bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// dispatch starts one command and queues its job; last says it is the
// last command of a read. It returns false when the connection is to end
// after it (QUIT).
func (c *conn) dispatch(rc redcon.Command, last bool) bool {
	c.s.commandsTotal.Add(1)
	var read time.Time
	if c.s.opts.Observer != nil {
		read = time.Now()
	}
	args := rc.Args
	cmd, name := lookup(args[0])
	known := cmd != nil
	if known && cmd.local == nil && (c.authenticated || cmd.noAuth()) && cmd.arityOK(len(args)) {
		return c.dispatchData(cmd, name, rc, last, read)
	}
	r := &reply{resp3: c.resp3}
	switch {
	case !known:
		name = "unknown"
		r.err(unknownCommand(args))
	case !c.authenticated && !cmd.noAuth():
		r.err(errNoAuth)
	case !cmd.arityOK(len(args)):
		r.err(wrongArity(name))
	default: // a connection command
		// It may change what the pending calls were read with.
		c.startPending()
		more := cmd.local(c, args, r)
		c.observe(name, r, read)
		c.send(&job{out: r.b, close: !more, flush: last})
		return more
	}
	c.observe(name, r, read)
	c.send(&job{out: r.b, flush: last})
	return true
}

// dispatchData starts a data command.
func (c *conn) dispatchData(cmd *command, name string, rc redcon.Command, last bool, read time.Time) bool {
	args := rc.Args
	j := &job{done: make(chan struct{}), cost: int64(len(rc.Raw)) + cmd.replyBound(args), flush: last, r: reply{resp3: c.resp3}}
	r := &j.r
	keys := keysOf(cmd, args, &j.key)
	deps := c.dependencies(keys, j)
	if !c.budget.tryAcquire(j.cost) {
		c.startPending() // what the budget waits for may be pending
		c.budget.acquire(j.cost)
	}
	if len(deps) == 0 && c.starter != nil && c.startCall(cmd, name, args, keys, j, read) {
		c.queue(j)
		return true
	}
	x := exec{store: c.s.opts.Store, consistency: c.consistency, cursors: c.s.cursors}
	ctx := c.ctx
	c.s.run(func() {
		for _, d := range deps {
			<-d.done
		}
		cmd.run(ctx, x, args, r)
		c.observe(name, r, read)
		j.out = r.b
		close(j.done)
	})
	c.queue(j)
	return true
}

// observe tells the server's Observer, if any, about a finished command.
func (c *conn) observe(name string, r *reply, read time.Time) {
	if o := c.s.opts.Observer; o != nil {
		o.Command(name, len(r.b) > 0 && r.b[0] == '-', time.Since(read))
	}
}

// dependencies returns the unfinished jobs on keys, and records j as the
// latest job on each.
func (c *conn) dependencies(keys []string, j *job) []*job {
	var deps []*job
	for _, k := range keys {
		if prev, ok := c.lastByKey[k]; ok {
			select {
			case <-prev.done:
			default:
				deps = append(deps, prev)
			}
		}
		c.lastByKey[k] = j
	}
	// Forget finished jobs whenever the map has doubled since the last
	// time: amortised constant work per key.
	if len(c.lastByKey) > c.pruneAt {
		for k, prev := range c.lastByKey {
			select {
			case <-prev.done:
				delete(c.lastByKey, k)
			default:
			}
		}
		c.pruneAt = max(2*len(c.lastByKey), c.s.opts.PipelineMax)
	}
	return deps
}

// budget bounds the bytes of a connection's commands in flight.
type budget struct {
	mu   sync.Mutex
	cond *sync.Cond
	used int64
	max  int64
}

// tryAcquire takes n bytes if acquire would not wait.
func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// acquire waits until n more bytes fit, or until nothing else is in
// flight.
func (b *budget) acquire(n int64) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.max {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}
