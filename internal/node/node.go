// Package node runs Catena's state machines for real: one event loop per
// process feeds them messages from the transport and ticks from a clock,
// commits their storage writes, then sends what they emitted. It is the
// only place with goroutines, sockets and clocks around the protocol.
package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// Machine is a protocol state machine (chain.Server or master.Master).
type Machine interface {
	Step(now wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope
	Tick(now wire.Time) []wire.Envelope
}

// Loop drives one machine.
type Loop struct {
	Machine   Machine
	Transport *transport.Transport
	// TickInterval is how often Tick is called.
	TickInterval time.Duration
	// Commit, if set, runs after each batch of steps and before their
	// messages are sent: group commit, so nothing leaves the process before
	// the state that produced it is durable. An error stops the loop.
	Commit func() error
	// AfterBatch, if set, runs after each batch (logging, status).
	AfterBatch func()
	Log        *slog.Logger
}

// batchMessagesMax bounds the messages handled before one commit.
const batchMessagesMax = 1024

// Run processes events until ctx is cancelled or a commit fails.
func (l *Loop) Run(ctx context.Context) error {
	start := time.Now()
	now := func() wire.Time { return wire.Time(time.Since(start)) }
	ticker := time.NewTicker(l.TickInterval)
	defer ticker.Stop()
	inbox := l.Transport.Inbox()
	var out []wire.Envelope
	for {
		out = out[:0]
		select {
		case <-ctx.Done():
			return nil
		case d := <-inbox:
			out = append(out, l.Machine.Step(now(), d.From, d.Msg)...)
		drain:
			for range batchMessagesMax - 1 {
				select {
				case d := <-inbox:
					out = append(out, l.Machine.Step(now(), d.From, d.Msg)...)
				default:
					break drain
				}
			}
		case <-ticker.C:
			out = append(out, l.Machine.Tick(now())...)
		}
		if l.Commit != nil {
			if err := l.Commit(); err != nil {
				return err
			}
		}
		if l.AfterBatch != nil {
			l.AfterBatch()
		}
		for _, env := range out {
			l.Transport.Send(env)
		}
	}
}
