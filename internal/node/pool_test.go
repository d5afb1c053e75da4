package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// volumeEcho records the Acks it steps, answers each with an Ack of the
// same volume and SN, and answers a nudge with an Ack of SN 0.
type volumeEcho struct {
	mu      sync.Mutex
	acks    []*wire.Ack
	auths   int
	nudged  int
	replyTo wire.NodeID
}

func (r *volumeEcho) Step(_ wire.Time, from wire.NodeID, m wire.Message) []wire.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := m.(type) {
	case *wire.Ack:
		r.acks, r.replyTo = append(r.acks, m), from
		return []wire.Envelope{{To: from, Msg: &wire.Ack{Volume: m.Volume, SN: m.SN}}}
	case *wire.NewAuth:
		r.auths++
	}
	return nil
}

func (r *volumeEcho) Tick(wire.Time) []wire.Envelope { return nil }

func (r *volumeEcho) Nudge(wire.Time) []wire.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nudged++
	return []wire.Envelope{{To: r.replyTo, Msg: &wire.Ack{SN: 0}}}
}

// byVolumeParity routes Acks to two inboxes by volume parity, and
// NewAuth to both.
type byVolumeParity struct{}

func (byVolumeParity) Inboxes() int { return 2 }

func (byVolumeParity) Inbox(m wire.Message) int {
	switch m := m.(type) {
	case *wire.Ack:
		return int(m.Volume % 2)
	case *wire.NewAuth:
		return -1
	}
	return 0
}

func (byVolumeParity) Copy(m wire.Message, _ int) wire.Message { return m }

// Each loop of a pool steps the messages the transport's router gives
// its inbox, in the order they arrived, and every loop's replies leave
// through the shared transport; a nudge reaches loop 0's Nudger.
func TestPoolRoutesInOrderPerLoop(t *testing.T) {
	log, server, peer := serverAndPeer(t, transport.WithRouter(byVolumeParity{}))
	machines := []*volumeEcho{{}, {}}
	nudges := make(chan struct{}, 1)
	pool := &Pool{Transport: server, Loops: []*Loop{
		{Machine: machines[0], TickInterval: time.Millisecond, Log: log, Nudges: nudges},
		{Machine: machines[1], TickInterval: time.Millisecond, Log: log},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	const perVolume = 50
	to := wire.NodeID(server.Addr())
	peer.Send(wire.Envelope{To: to, Msg: &wire.NewAuth{}})
	for sn := wire.SN(1); sn <= perVolume; sn++ {
		for v := range wire.VolumeID(4) {
			peer.Send(wire.Envelope{To: to, Msg: &wire.Ack{Volume: v, SN: sn}})
		}
	}
	for replies := 0; replies < 4*perVolume; replies++ {
		select {
		case <-peer.Inbox():
		case <-time.After(10 * time.Second):
			t.Fatalf("%d replies of %d", replies, 4*perVolume)
		}
	}
	nudges <- struct{}{}
	awaitAck(t, peer, 0, "the nudge was not answered")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for i, m := range machines {
		if m.auths != 1 {
			t.Errorf("loop %d stepped %d NewAuths, want 1 (sent to every loop)", i, m.auths)
		}
		next := map[wire.VolumeID]wire.SN{}
		for _, a := range m.acks {
			if int(a.Volume%2) != i {
				t.Fatalf("loop %d stepped volume %d", i, a.Volume)
			}
			if a.SN != next[a.Volume]+1 {
				t.Fatalf("loop %d stepped volume %d's SN %d after %d", i, a.Volume, a.SN, next[a.Volume])
			}
			next[a.Volume] = a.SN
		}
		if len(m.acks) != 2*perVolume {
			t.Errorf("loop %d stepped %d Acks, want %d", i, len(m.acks), 2*perVolume)
		}
	}
	if machines[0].nudged != 1 || machines[1].nudged != 0 {
		t.Errorf("nudged %d and %d times, want 1 and 0", machines[0].nudged, machines[1].nudged)
	}
}

// One loop's failed commit stops every loop, and Run returns it.
func TestPoolStopsWhenOneLoopFails(t *testing.T) {
	log, server, peer := serverAndPeer(t, transport.WithRouter(byVolumeParity{}))
	broken := errors.New("disk gone")
	pool := &Pool{Transport: server, Loops: []*Loop{
		{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log},
		{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log, Commit: func() error { return broken }},
	}}
	done := make(chan error, 1)
	go func() { done <- pool.Run(context.Background()) }()
	peer.Send(wire.Envelope{To: wire.NodeID(server.Addr()), Msg: &wire.Ack{Volume: 1, SN: 1}})
	select {
	case err := <-done:
		if !errors.Is(err, broken) {
			t.Fatalf("Run returned %v, want %v", err, broken)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pool kept running after a loop's commit failed")
	}
}

// A pool needs one inbox per loop.
func TestPoolRefusesAnotherNumberOfInboxes(t *testing.T) {
	log, server, _ := serverAndPeer(t)
	pool := &Pool{Transport: server, Loops: []*Loop{
		{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log},
		{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log},
	}}
	if err := pool.Run(context.Background()); err == nil {
		t.Fatal("a pool of two loops ran on a transport of one inbox")
	}
}

// hangingCommit blocks a loop's commit until released: a disk that stops
// answering.
type hangingCommit struct {
	release chan struct{}
}

func (h *hangingCommit) commit() error {
	<-h.release
	return nil
}

// A loop that hangs in one batch is reported to OnStuck once, with its
// goroutine's stack, while the other loops go on; it is not reported
// again for the same batch, and the pool stops normally once it returns.
func TestPoolReportsAStuckLoop(t *testing.T) {
	log, server, peer := serverAndPeer(t, transport.WithRouter(byVolumeParity{}))
	hang := &hangingCommit{release: make(chan struct{})}
	type report struct {
		loop   int
		busy   time.Duration
		stacks string
	}
	reports := make(chan report, 4)
	pool := &Pool{Transport: server, StuckAfter: 50 * time.Millisecond,
		OnStuck: func(loop int, busy time.Duration, stacks string) { reports <- report{loop, busy, stacks} },
		Loops: []*Loop{
			{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log},
			{Machine: &volumeEcho{}, TickInterval: time.Hour, Log: log, Commit: hang.commit},
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	to := wire.NodeID(server.Addr())
	peer.Send(wire.Envelope{To: to, Msg: &wire.Ack{Volume: 1, SN: 1}}) // loop 1: hangs in its commit
	var r report
	select {
	case r = <-reports:
	case <-time.After(10 * time.Second):
		t.Fatal("a loop hung in its commit was not reported")
	}
	if r.loop != 1 || r.busy < 50*time.Millisecond || !strings.Contains(r.stacks, "hangingCommit") {
		t.Fatalf("reported loop %d busy %v with stacks:\n%s\nwant loop 1, at least 50ms, in hangingCommit", r.loop, r.busy, r.stacks)
	}
	peer.Send(wire.Envelope{To: to, Msg: &wire.Ack{Volume: 0, SN: 1}}) // loop 0 goes on
	awaitAck(t, peer, 1, "loop 0 stopped answering while loop 1 hung")
	time.Sleep(200 * time.Millisecond)
	select {
	case again := <-reports:
		t.Fatalf("the same hung batch was reported again: loop %d", again.loop)
	default:
	}
	close(hang.release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A loop kept from its machine by an inspection that does not return
// (Inspect runs it on the caller's goroutine while the loop waits for
// input) is as stuck as one hung in a batch: it is reported, its stack
// waiting for the machine.
func TestPoolReportsALoopKeptWaitingByAnInspection(t *testing.T) {
	log, server, peer := serverAndPeer(t, transport.WithRouter(byVolumeParity{}))
	reports := make(chan string, 4)
	pool := &Pool{Transport: server, StuckAfter: 50 * time.Millisecond,
		OnStuck: func(loop int, busy time.Duration, stacks string) {
			if loop == 1 {
				reports <- stacks
			}
		},
		Loops: []*Loop{
			{Machine: &volumeEcho{}, TickInterval: time.Millisecond, Log: log},
			{Machine: &volumeEcho{}, TickInterval: time.Hour, Log: log},
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	to := wire.NodeID(server.Addr())
	peer.Send(wire.Envelope{To: to, Msg: &wire.Ack{Volume: 1, SN: 1}})
	awaitAck(t, peer, 1, "loop 1 did not answer")
	release, inspecting := make(chan struct{}), make(chan struct{})
	go pool.Loops[1].Inspect(ctx, func(wire.Time) {
		close(inspecting)
		<-release
	})
	<-inspecting
	peer.Send(wire.Envelope{To: to, Msg: &wire.Ack{Volume: 1, SN: 2}}) // loop 1 waits for the machine
	select {
	case stacks := <-reports:
		if !strings.Contains(stacks, "Mutex") {
			t.Errorf("reported with stacks:\n%s\nwant loop 1 waiting for the machine's mutex", stacks)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a loop kept waiting by an inspection was not reported")
	}
	close(release)
	awaitAck(t, peer, 2, "loop 1 did not go on once the inspection returned")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
