// Package node runs Catena's state machines for real: one event loop per
// process feeds them messages from the transport and ticks from a clock,
// commits their storage writes, then sends what they emitted. It is the
// only place with goroutines, sockets and clocks around the protocol.
package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Machine is a protocol state machine (chain.Server or master.Master).
type Machine interface {
	Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope
	Tick(now wire.Time) []wire.Envelope
}

// Idler is a Machine with work of lower priority than its inputs (a
// causal volume's lazy propagation): the loop calls Idle when a batch
// ends with no input waiting.
type Idler interface {
	Idle(now wire.Time) []wire.Envelope
}

// Committer is a Machine that forwards some messages before its storage
// writes are durable (wire.Envelope.Early): the loop sends those before
// Commit, and calls Committed after each Commit, whose messages follow
// the batch's others.
type Committer interface {
	Committed(now wire.Time) []wire.Envelope
}

// Observer watches a loop from outside the machine: it sees every input
// and what the machine emitted for it, and when each batch has left the
// process. Metrics (package metrics) and progress logs are observers. Its
// methods run on the loop's goroutine, one at a time; they must not
// change the machine.
type Observer interface {
	// Stepped is called after each Step and Tick (and a Committer's
	// Committed), with when it began, its input (nil for a tick or a
	// commit, from ""), and the messages it emitted (not sent yet).
	Stepped(began time.Time, from wire.NodeID, in wire.Message, out []wire.Envelope)
	// BatchSent is called once a batch's messages were committed and
	// handed to the transport.
	BatchSent()
}

// Nudger is a Machine that other loops of its process may ask for work
// outside its inputs and ticks (Loop.Nudges): a server's loop 0 sends a
// heartbeat another loop asked for.
type Nudger interface {
	Nudge(now wire.Time) []wire.Envelope
}

// Loop drives one machine.
type Loop struct {
	Machine   Machine
	Transport *transport.Transport
	// Inbox, if set, is where the loop takes its messages from instead of
	// the Transport's inbox: a Pool's loops share one transport.
	Inbox <-chan transport.Delivery
	// ClientInbox, if set, is where the loop takes clients' messages from
	// (transport.WithClientInboxes; a Pool sets it), else the Transport's
	// first client inbox if it has one. The loop takes what waits in
	// Inbox, its peers' messages, before what waits here: replication
	// keeps moving while clients queue (docs/adr/0025).
	ClientInbox <-chan transport.Delivery
	// Nudges, if set, wakes the loop to call its Nudger machine's Nudge.
	Nudges <-chan struct{}
	// Start, if set, is the instant the machine's clock counts from
	// (else when Run starts): the loops of a Pool share one clock, so a
	// lease one loop counts from a heartbeat another sent ends at the
	// same instant for both.
	Start time.Time
	// TickInterval is how often Tick is called.
	TickInterval time.Duration
	// Commit, if set, runs after each batch of steps and before their
	// messages are sent: group commit, so nothing leaves the process before
	// the state that produced it is durable, but the Early messages of a
	// Committer (wire.SendEarly). An error stops the loop.
	Commit func() error
	// AfterBatch, if set, runs after each batch's commit, before its
	// messages are sent (logging, status), with the machine's clock
	// reading.
	AfterBatch func(now wire.Time)
	// Observer, if set, sees every step and batch.
	Observer Observer
	Log      *slog.Logger

	// Warp, if set, maps the real time elapsed since the loop started to
	// the machines' elapsed time: fault testing (internal/faults) makes a
	// process's clock jump or run fast or slow with it. Nil, as in
	// production, is real time.
	Warp func(elapsed time.Duration) time.Duration

	// busySince is when the loop took up the input it is handling (Unix
	// nanoseconds), 0 while it waits for one: a Pool's watchdog reads it
	// (StuckAfter).
	busySince atomic.Int64

	initOnce sync.Once
	// inspections carries functions to run between batches (Inspect).
	inspections chan inspection
	// machine is held by whoever handles the machine: the loop's
	// goroutine from taking an input until its batch's messages are
	// sent, or an Inspect that finds the loop waiting for input and runs
	// its function on the caller's goroutine. While the loop runs (running)
	// clock reads the machine's clock.
	machine sync.Mutex
	running bool
	clock   func() wire.Time
	// stopped is closed when Run returns.
	stopped chan struct{}
}

type inspection struct {
	f    func(now wire.Time)
	done chan struct{}
}

// batchMessagesMax bounds the messages handled before one commit.
const batchMessagesMax = 1024

// ErrNotRunning is returned by Inspect when the loop has stopped.
var ErrNotRunning = errors.New("node: loop not running")

func (l *Loop) init() {
	l.initOnce.Do(func() {
		l.inspections = make(chan inspection)
		l.stopped = make(chan struct{})
	})
}

// Inspect runs f between two batches, with the machine's clock reading,
// and returns once f has returned: the way other goroutines (an HTTP
// handler, a metrics scrape, a server's Redis front end reading its
// replicas) read a machine, which is not safe for concurrent use. f must
// only read. When the loop is waiting for input, f runs at once on the
// caller's goroutine, the loop kept from its next input until f returns
// (no hand-off to the loop's goroutine and back: a local read costs no
// goroutine switch); else on the loop's goroutine once its batch is
// done. Inspect returns ctx's error if ctx ends before f runs, and
// ErrNotRunning once the loop has stopped. It must not be called from the
// loop's own goroutine (Commit, AfterBatch, an Observer): it would wait
// for itself.
func (l *Loop) Inspect(ctx context.Context, f func(now wire.Time)) error {
	l.init()
	if l.machine.TryLock() && l.inspectHeld(f) {
		return nil
	}
	in := inspection{f: f, done: make(chan struct{})}
	select {
	case l.inspections <- in:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stopped:
		return ErrNotRunning
	}
	<-in.done
	return nil
}

// inspectHeld runs f if the loop runs, and lets the machine go, even if
// f panics (an HTTP handler's panic is recovered: the loop must not
// wait for the machine forever).
func (l *Loop) inspectHeld(f func(now wire.Time)) bool {
	defer l.machine.Unlock()
	if !l.running {
		return false
	}
	f(l.clock())
	return true
}

// Run processes events until ctx is cancelled or a commit fails. A loop
// runs once.
func (l *Loop) Run(ctx context.Context) error {
	l.init()
	defer close(l.stopped)
	// The machines' clock reads wall-clock time (nanoseconds since the
	// Unix epoch) at the start and then advances monotonically: leases
	// and timers measure durations on it, unaffected by steps of the
	// system clock, while the timestamps a causal head gives updates
	// (the physical part of its hybrid clock) compare across processes
	// and sites like wall-clock time, so the last writer wins in the
	// order the writes happened, not by how long a server has run.
	start := l.Start
	if start.IsZero() {
		start = time.Now()
	}
	base := wire.Time(start.UnixNano())
	at := func(t time.Time) wire.Time { return base + wire.Time(t.Sub(start)) }
	if warp := l.Warp; warp != nil {
		at = func(t time.Time) wire.Time { return base + wire.Time(warp(t.Sub(start))) }
	}
	now := func() wire.Time { return at(time.Now()) }
	ticker := time.NewTicker(l.TickInterval)
	defer ticker.Stop()
	inbox, clients := l.Inbox, l.ClientInbox
	if inbox == nil {
		inbox = l.Transport.Inbox()
	}
	if clients == nil {
		if cs := l.Transport.ClientInboxes(); len(cs) > 0 {
			clients = cs[0]
		}
	}
	nudger, _ := l.Machine.(Nudger)
	var out []wire.Envelope
	step := func(d transport.Delivery) {
		defer d.Done() // the client connection's in-flight limit counts it no more
		if l.Observer == nil {
			out = append(out, l.Machine.Step(now(), d.From, d.Msg)...)
			return
		}
		began := time.Now()
		stepped := l.Machine.Step(at(began), d.From, d.Msg)
		l.Observer.Stepped(began, d.From, d.Msg, stepped)
		out = append(out, stepped...)
	}
	tick := func() {
		if l.Observer == nil {
			out = append(out, l.Machine.Tick(now())...)
			return
		}
		began := time.Now()
		ticked := l.Machine.Tick(at(began))
		l.Observer.Stepped(began, "", nil, ticked)
		out = append(out, ticked...)
	}
	// busy takes the machine for an input; the loop lets it go when it
	// next waits for one.
	held := false
	l.machine.Lock()
	l.clock, l.running = now, true
	l.machine.Unlock()
	defer func() {
		if !held { // (held if Commit failed)
			l.machine.Lock()
		}
		l.running = false
		l.machine.Unlock()
	}()
	busy := func() {
		// Busy from here, before the machine is taken: a loop kept
		// waiting for it (an inspection that does not return) is as
		// stuck as one hung in its batch.
		l.busySince.Store(time.Now().UnixNano())
		l.machine.Lock()
		held = true
	}
	for {
		out = out[:0]
		l.busySince.Store(0)
		if held {
			l.machine.Unlock()
			held = false
		}
		select {
		case <-ctx.Done():
			return nil
		case in := <-l.inspections:
			busy()
			in.f(now())
			close(in.done)
			continue
		case d := <-inbox:
			busy()
			step(d)
			l.drain(inbox, clients, step, now, &out)
		case d := <-clients:
			busy()
			step(d)
			l.drain(inbox, clients, step, now, &out)
		case <-ticker.C:
			busy()
			tick()
		case <-l.Nudges:
			if nudger == nil {
				continue
			}
			busy()
			out = append(out, nudger.Nudge(now())...)
		}
		committer, _ := l.Machine.(Committer)
		waiting := out
		if committer != nil {
			waiting = wire.SendEarly(nil, out, l.Transport.Send)
		}
		if l.Commit != nil {
			if err := l.Commit(); err != nil {
				return err
			}
		}
		if committer != nil {
			began := time.Now()
			committed := committer.Committed(at(began))
			if l.Observer != nil {
				l.Observer.Stepped(began, "", nil, committed)
			}
			waiting = append(waiting, committed...)
		}
		if l.AfterBatch != nil {
			l.AfterBatch(now())
		}
		for _, env := range waiting {
			l.Transport.Send(env)
		}
		if l.Observer != nil {
			l.Observer.BatchSent()
		}
	}
}

// drain steps what waits in the inboxes, up to a batch, peers' messages
// before clients' (each taken at once as it comes), and lets an idle
// machine do its low-priority work once both are empty. A nil clients
// channel is never ready.
func (l *Loop) drain(inbox, clients <-chan transport.Delivery, step func(transport.Delivery), now func() wire.Time, out *[]wire.Envelope) {
	for range batchMessagesMax - 1 {
		select {
		case d := <-inbox:
			step(d)
			continue
		default:
		}
		select {
		case d := <-inbox:
			step(d)
		case d := <-clients:
			step(d)
		default:
			if idler, ok := l.Machine.(Idler); ok {
				*out = append(*out, idler.Idle(now())...)
			}
			return
		}
	}
}

// Observers is an Observer that passes everything to each of its
// elements, in order.
type Observers []Observer

// Stepped implements Observer.
func (os Observers) Stepped(began time.Time, from wire.NodeID, in wire.Message, out []wire.Envelope) {
	for _, o := range os {
		o.Stepped(began, from, in, out)
	}
}

// BatchSent implements Observer.
func (os Observers) BatchSent() {
	for _, o := range os {
		o.BatchSent()
	}
}
