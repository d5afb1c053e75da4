package node

import (
	"context"
	"errors"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Pool runs several loops of one process over one transport, so that the
// process uses several cores: each loop drives its own machine (one part
// of the process's state, such as a server's volumes on that loop) with
// its own commits. A dispatcher takes the transport's messages in the
// order they arrive and hands each to the loops Route names, so the
// messages one sender sent to one loop are stepped in the order sent.
type Pool struct {
	Transport *transport.Transport
	// Loops are the loops to run; the Pool sets their Transport, Inbox
	// and Start.
	Loops []*Loop
	// Route appends to dst, for each loop in order, the message that loop
	// steps for m, or nil (chain.RouteToLoops).
	Route func(dst []wire.Message, m wire.Message) []wire.Message
}

// poolInboxMessages bounds the messages waiting for one loop: a loop that
// falls this far behind holds up the dispatcher, and so every loop, until
// it catches up (the transport's queues then push back on senders).
const poolInboxMessages = 1024

// Run runs every loop until ctx is cancelled or one of them fails, and
// returns the first failure.
func (p *Pool) Run(ctx context.Context) error {
	if len(p.Loops) == 0 {
		return errors.New("node: pool without loops")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	inboxes := make([]chan transport.Delivery, len(p.Loops))
	for i, l := range p.Loops {
		inboxes[i] = make(chan transport.Delivery, poolInboxMessages)
		l.Transport, l.Inbox, l.Start = p.Transport, inboxes[i], start
	}
	errs := make(chan error, len(p.Loops))
	for _, l := range p.Loops {
		go func() {
			err := l.Run(ctx)
			cancel() // one loop stopping stops the process
			errs <- err
		}()
	}
	p.dispatch(ctx, inboxes)
	var first error
	for range p.Loops {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// dispatch hands the transport's messages to the loops until ctx ends.
func (p *Pool) dispatch(ctx context.Context, inboxes []chan transport.Delivery) {
	var routed []wire.Message
	in := p.Transport.Inbox()
	for {
		var d transport.Delivery
		select {
		case <-ctx.Done():
			return
		case d = <-in:
		}
		routed = p.Route(routed[:0], d.Msg)
		to := 0
		for _, m := range routed {
			if m != nil {
				to++
			}
		}
		if to != 1 {
			// A message for several loops (or none) counts against its
			// client connection's in-flight limit no more once handed
			// out; a message for one loop is counted until that loop
			// steps it.
			d.Done()
		}
		for i, m := range routed {
			if m == nil {
				continue
			}
			one := transport.Delivery{From: d.From, Msg: m}
			if to == 1 {
				one = d
				one.Msg = m
			}
			select {
			case inboxes[i] <- one:
			case <-ctx.Done():
				return
			}
		}
	}
}
