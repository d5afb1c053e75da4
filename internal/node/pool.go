package node

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/transport"
)

// Pool runs several loops of one process over one transport, so that the
// process uses several cores: each loop drives its own machine (one part
// of the process's state, such as a server's volumes on that loop) with
// its own commits, and takes its messages from its own inbox of the
// transport, which a transport.Router fills (transport.WithRouter).
type Pool struct {
	Transport *transport.Transport
	// Loops are the loops to run, loop i on the transport's inbox i (and
	// client inbox i); the Pool sets their Transport, Inbox, ClientInbox
	// and Start.
	Loops []*Loop
	// OnStuck, if set, is told once about each input a loop has handled
	// for longer than StuckAfter (default DefaultStuckAfter) without
	// finishing its batch: a machine step, a commit or a send that does
	// not return. It gets the loop's index, how long it has been busy and
	// the stacks of the loop's goroutine (goroutine profile records
	// labeled catena_loop=i), so the process's log says where it hangs
	// while the process goes on heartbeating from its other loops.
	OnStuck    func(loop int, busy time.Duration, stacks string)
	StuckAfter time.Duration
}

// DefaultStuckAfter is how long a loop may take over one batch before a
// Pool's OnStuck hears of it: far above any batch's time (a commit's
// fsync included), and below a master's failure timeout's multiples
// that an operator waits through.
const DefaultStuckAfter = 10 * time.Second

// Run runs every loop until ctx is cancelled or one of them fails, and
// returns the first failure.
func (p *Pool) Run(ctx context.Context) error {
	inboxes := p.Transport.Inboxes()
	if len(p.Loops) == 0 || len(inboxes) != len(p.Loops) {
		return fmt.Errorf("node: a pool of %d loops on a transport of %d inboxes", len(p.Loops), len(inboxes))
	}
	clients := p.Transport.ClientInboxes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	errs := make(chan error, len(p.Loops))
	for i, l := range p.Loops {
		l.Transport, l.Inbox, l.Start = p.Transport, inboxes[i], start
		if clients != nil {
			l.ClientInbox = clients[i]
		}
		go pprof.Do(ctx, pprof.Labels(loopLabel, strconv.Itoa(i)), func(ctx context.Context) {
			err := l.Run(ctx)
			cancel() // one loop stopping stops the process
			errs <- err
		})
	}
	if p.OnStuck != nil {
		go p.watch(ctx)
	}
	var first error
	for range p.Loops {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loopLabel is the profiler label on each loop's goroutine, its index the
// value.
const loopLabel = "catena_loop"

// watch tells OnStuck about each loop that has been busy with one batch
// for longer than StuckAfter, once per batch, until ctx ends.
func (p *Pool) watch(ctx context.Context) {
	after := p.StuckAfter
	if after <= 0 {
		after = DefaultStuckAfter
	}
	ticker := time.NewTicker(min(after/4, time.Second))
	defer ticker.Stop()
	reported := make([]int64, len(p.Loops))
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		now := time.Now().UnixNano()
		for i, l := range p.Loops {
			since := l.busySince.Load()
			if since == 0 || since == reported[i] || time.Duration(now-since) < after {
				continue
			}
			reported[i] = since
			p.OnStuck(i, time.Duration(now-since), LoopStacks(i))
		}
	}
}

// LoopStacks returns the goroutine profile's records of loop i's
// goroutine (labeled loopLabel=i), each a count and a stack.
func LoopStacks(i int) string {
	var all bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&all, 1); err != nil {
		return fmt.Sprintf("(no goroutine profile: %v)", err)
	}
	want := fmt.Sprintf("%q:%q", loopLabel, strconv.Itoa(i))
	var b strings.Builder
	for _, record := range strings.Split(all.String(), "\n\n") {
		if strings.Contains(record, want) {
			b.WriteString(record)
			b.WriteString("\n")
		}
	}
	if b.Len() == 0 {
		return "(no goroutine labeled " + want + " found)"
	}
	return b.String()
}
