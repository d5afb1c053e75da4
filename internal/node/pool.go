package node

import (
	"context"
	"fmt"
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
}

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
		go func() {
			err := l.Run(ctx)
			cancel() // one loop stopping stops the process
			errs <- err
		}()
	}
	var first error
	for range p.Loops {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
