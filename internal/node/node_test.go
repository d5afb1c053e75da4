package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
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

// serverAndPeer starts a listening transport for a loop, with opts, and
// a client transport to talk to it; both close when the test ends.
func serverAndPeer(t *testing.T, opts ...transport.Option) (log *slog.Logger, server, peer *transport.Transport) {
	t.Helper()
	log = slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := freeAddr(t)
	server, err := transport.New(wire.NodeID(addr), addr, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Close)
	peer, err = transport.New(transport.ClientPrefix+"peer", "", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Close)
	return log, server, peer
}

// Nothing a batch produced leaves the process before the batch's commit
// returned (group commit), and ticks run.
func TestLoopCommitsBeforeSending(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	addr := server.Addr()

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

// pipelined answers every Ack with two: an Early one (SN+1) and one that
// waits for the commit (SN+2); its Committed answers with SN+3.
type pipelined struct {
	mu   sync.Mutex
	last wire.SN
	from wire.NodeID
}

func (p *pipelined) Step(_ wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	a, ok := m.(*wire.Ack)
	if !ok {
		return nil
	}
	p.mu.Lock()
	p.last, p.from = a.SN, from
	p.mu.Unlock()
	return []wire.Envelope{{To: from, Msg: &wire.Ack{SN: a.SN + 1}, Early: true}, {To: from, Msg: &wire.Ack{SN: a.SN + 2}}}
}

func (p *pipelined) Tick(wire.Time) []wire.Envelope { return nil }

func (p *pipelined) Committed(wire.Time) []wire.Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.from == "" {
		return nil
	}
	out := []wire.Envelope{{To: p.from, Msg: &wire.Ack{SN: p.last + 3}}}
	p.from = ""
	return out
}

// A Committer's Early messages leave before the batch's commit (the
// commit waits to see one arrive), the others after it, then what
// Committed emitted.
func TestLoopSendsEarlyMessagesBeforeTheCommit(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	got := make(chan wire.SN, 16)
	go func() {
		for d := range peer.Inbox() {
			got <- d.Msg.(*wire.Ack).SN
			d.Done()
		}
	}()
	var early atomic.Int64
	m := &pipelined{}
	committed := make(chan struct{})
	loop := Loop{Machine: m, Transport: server, TickInterval: time.Hour, Log: log,
		Commit: func() error {
			m.mu.Lock()
			stepped := m.from != ""
			m.mu.Unlock()
			if !stepped {
				return nil // a batch without the Ack (a connection's notice)
			}
			select {
			case sn := <-got:
				early.Store(int64(sn))
			case <-time.After(5 * time.Second):
			}
			close(committed)
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	peer.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{SN: 10}})
	<-committed
	var after []wire.SN
	for len(after) < 2 {
		select {
		case sn := <-got:
			after = append(after, sn)
		case <-time.After(10 * time.Second):
			t.Fatalf("after the commit got %v, want [12 13]", after)
		}
	}
	if early.Load() != 11 || after[0] != 12 || after[1] != 13 {
		t.Fatalf("during the commit got %d, after it %v; want 11, then [12 13]", early.Load(), after)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// recorder is an Observer that records what it sees.
type recorder struct {
	mu      sync.Mutex
	steps   []wire.Message // nil for a tick
	outputs int
	batches int
}

func (r *recorder) Stepped(_ time.Time, _ wire.NodeID, in wire.Message, out []wire.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, in)
	r.outputs += len(out)
}

func (r *recorder) BatchSent() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches++
}

// An observer sees every step with its output and every tick; Inspect
// runs a function on the loop's goroutine, and reports a stopped loop.
func TestLoopObserverAndInspect(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	addr := server.Addr()
	m := &echo{}
	rec := &recorder{}
	loop := &Loop{Machine: m, Transport: server, TickInterval: time.Millisecond, Log: log, Observer: Observers{rec}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	peer.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: 1}})
	select {
	case <-peer.Inbox():
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
	// Read the machine and the observer between the same two batches:
	// the loop goes on ticking after Inspect returns.
	var ticks int64
	acks, tickSteps := 0, 0
	if err := loop.Inspect(context.Background(), func(now wire.Time) {
		ticks = m.ticks.Load()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, in := range rec.steps {
			switch in.(type) {
			case *wire.Ack:
				acks++
			case nil:
				tickSteps++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	if acks != 1 || rec.outputs != 1 || rec.batches == 0 || int64(tickSteps) != ticks {
		t.Errorf("observer saw %d acks, %d outputs, %d batches, %d ticks (machine ticked %d times)", acks, rec.outputs, rec.batches, tickSteps, ticks)
	}
	rec.mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := loop.Inspect(context.Background(), func(wire.Time) { t.Error("ran on a stopped loop") }); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Inspect on a stopped loop: %v, want ErrNotRunning", err)
	}
}

// lazyEcho holds its answers back until the loop finds it idle.
type lazyEcho struct {
	echo
	held []wire.Envelope
}

func (e *lazyEcho) Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	e.held = append(e.held, e.echo.Step(now, from, m)...)
	return nil
}

func (e *lazyEcho) Idle(wire.Time) []wire.Envelope {
	out := e.held
	e.held = nil
	return out
}

// A machine's low-priority work (Idler) runs once a batch drained the
// inbox: what it sends then arrives without waiting for a tick.
func TestLoopCallsIdleWhenInboxDrained(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	addr := server.Addr()

	loop := Loop{Machine: &lazyEcho{}, Transport: server, TickInterval: time.Hour, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loop.Run(ctx)
	peer.Send(wire.Envelope{To: wire.NodeID(addr), Msg: &wire.Ack{SN: 1}})
	awaitAck(t, peer, 2, "the held-back reply never left: Idle not called")
}

// awaitAck waits for the next message to peer, which must be an Ack of
// sn; missing says what it means if none comes.
func awaitAck(t *testing.T, peer *transport.Transport, sn wire.SN, missing string) {
	t.Helper()
	select {
	case d := <-peer.Inbox():
		if a, ok := d.Msg.(*wire.Ack); !ok || a.SN != sn {
			t.Fatalf("got %+v, want Ack %d", d.Msg, sn)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(missing)
	}
}

// A failed commit stops the loop with its error before the batch's
// messages are sent: the process never acknowledges what is not durable.
func TestLoopStopsWhenCommitFails(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	failure := errors.New("fsync: input/output error")
	rec := &recorder{}
	loop := Loop{Machine: &echo{}, Transport: server, TickInterval: time.Hour, Log: log, Observer: rec,
		Commit: func() error { return failure }}
	done := make(chan error, 1)
	go func() { done <- loop.Run(context.Background()) }()
	peer.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{SN: 1}})
	select {
	case err := <-done:
		if !errors.Is(err, failure) {
			t.Fatalf("Run returned %v, want the commit's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not stop")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.outputs != 1 || rec.batches != 0 {
		t.Fatalf("%d messages emitted, %d batches sent; want the reply emitted and never sent", rec.outputs, rec.batches)
	}
}

// A Warp transforms the machines' clock: here it runs an hour ahead.
func TestLoopWarp(t *testing.T) {
	log, server, _ := serverAndPeer(t)
	loop := Loop{Machine: &echo{}, Transport: server, TickInterval: time.Hour, Log: log,
		Warp: func(elapsed time.Duration) time.Duration { return elapsed + time.Hour }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loop.Run(ctx)
	var now wire.Time
	if err := loop.Inspect(ctx, func(n wire.Time) { now = n }); err != nil {
		t.Fatal(err)
	}
	ahead := time.Duration(now - wire.Time(time.Now().UnixNano()))
	if ahead < 59*time.Minute || ahead > time.Hour {
		t.Fatalf("the machines' clock is %s ahead of the wall clock, want an hour", ahead)
	}
}

// order records the senders of the messages it is stepped with.
type order struct {
	mu    sync.Mutex
	froms []wire.NodeID
}

func (o *order) Step(_ wire.Time, from wire.NodeID, _ wire.Message) []wire.Envelope {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.froms = append(o.froms, from)
	return nil
}

func (o *order) Tick(wire.Time) []wire.Envelope { return nil }

func (o *order) steps() []wire.NodeID {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]wire.NodeID(nil), o.froms...)
}

// A loop takes its peers' messages before its clients' (docs/adr/0025):
// with both waiting, at most the first message it takes, picked at
// random between the two inboxes, is a client's; each inbox's messages
// keep their order. And a transport with client inboxes delivers a
// client connection's messages there, a server's to the inbox.
func TestLoopTakesPeersBeforeClients(t *testing.T) {
	peers, clients := make(chan transport.Delivery, 8), make(chan transport.Delivery, 8)
	for i := range 5 {
		clients <- transport.Delivery{From: wire.NodeID(fmt.Sprintf("%sc%d", transport.ClientPrefix, i)), Msg: &wire.Ack{}}
	}
	for i := range 3 {
		peers <- transport.Delivery{From: wire.NodeID(fmt.Sprintf("s%d", i)), Msg: &wire.Ack{}}
	}
	m := &order{}
	loop := Loop{Machine: m, Inbox: peers, ClientInbox: clients, TickInterval: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loop.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.steps()) < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := m.steps()
	if len(got) != 8 {
		t.Fatalf("stepped %v; want all 8 messages", got)
	}
	rest := got
	if wire.IsClient(got[0]) {
		rest = got[1:]
	}
	var want []wire.NodeID
	for i := range 3 {
		want = append(want, wire.NodeID(fmt.Sprintf("s%d", i)))
	}
	for i := len(got) - len(rest); i < 5; i++ {
		want = append(want, wire.NodeID(fmt.Sprintf("%sc%d", transport.ClientPrefix, i)))
	}
	if fmt.Sprint(rest) != fmt.Sprint(want) {
		t.Fatalf("stepped %v; want the peers' messages first, each inbox in order", got)
	}

	_, server, client := serverAndPeer(t, transport.WithClientInboxes())
	client.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{SN: 1}})
	select {
	case d := <-server.ClientInboxes()[0]:
		if d.From != transport.ClientPrefix+"peer" {
			t.Fatalf("client inbox got a message from %s", d.From)
		}
	case d := <-server.Inbox():
		t.Fatalf("a client's message from %s reached the peers' inbox", d.From)
	case <-time.After(10 * time.Second):
		t.Fatal("a client's message never arrived")
	}
}

// tally counts its steps and ticks in plain fields: only the loop's
// exclusion keeps them safe, which the race detector checks.
type tally struct {
	steps, ticks int
	committing   bool
}

func (m *tally) Step(_ wire.Time, from wire.NodeID, msg wire.Message) []wire.Envelope {
	m.steps++
	return []wire.Envelope{{To: from, Msg: &wire.Ack{SN: msg.(*wire.Ack).SN}}}
}

func (m *tally) Tick(wire.Time) []wire.Envelope { m.ticks++; return nil }

// Inspections from many goroutines, run on theirs while the loop waits
// for input and on the loop's between batches, never overlap a step, a
// tick or a commit, and each sees every step before it.
func TestLoopInspectExcludesTheLoop(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	m := &tally{}
	loop := &Loop{Machine: m, Transport: server, TickInterval: time.Millisecond, Log: log}
	loop.Commit = func() error {
		m.committing = true
		time.Sleep(10 * time.Microsecond)
		m.committing = false
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	const acks = 300
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			last := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := loop.Inspect(context.Background(), func(wire.Time) {
					if m.committing {
						errs <- errors.New("an inspection ran during a commit")
					}
					if m.steps < last {
						errs <- fmt.Errorf("an inspection saw %d steps after %d", m.steps, last)
					}
					last = m.steps
					_ = m.ticks
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range acks {
		peer.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{SN: wire.SN(i)}})
		select {
		case <-peer.Inbox():
		case <-time.After(5 * time.Second):
			t.Fatal("no reply")
		}
	}
	close(stop)
	wg.Wait()
	var steps int
	if err := loop.Inspect(context.Background(), func(wire.Time) { steps = m.steps }); err != nil || steps != acks {
		t.Errorf("after %d acks answered, Inspect saw %d steps (%v)", acks, steps, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// An inspection that panics on the caller's goroutine (an HTTP handler,
// whose panic net/http recovers) lets the machine go: the loop goes on.
func TestLoopGoesOnAfterAnInspectionPanics(t *testing.T) {
	log, server, peer := serverAndPeer(t)
	loop := &Loop{Machine: &echo{}, Transport: server, TickInterval: time.Hour, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loop.Run(ctx)
	// It panics only on this goroutine: the loop, with no input, waits,
	// so an inspection soon runs here.
	me := goroutineID()
	for panicked := false; !panicked; {
		func() {
			defer func() { panicked = recover() != nil }()
			if err := loop.Inspect(ctx, func(wire.Time) {
				if goroutineID() == me {
					panic("inspection failed")
				}
			}); err != nil {
				t.Fatal(err)
			}
		}()
	}
	peer.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{SN: 1}})
	select {
	case <-peer.Inbox():
	case <-time.After(5 * time.Second):
		t.Fatal("the loop stopped after an inspection panicked")
	}
}

// goroutineID is the calling goroutine's number, from its stack's header
// ("goroutine N [running]:").
func goroutineID() string {
	var b [64]byte
	header := string(b[:runtime.Stack(b[:], false)])
	id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
	return id
}
