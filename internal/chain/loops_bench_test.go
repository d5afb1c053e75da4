package chain

import (
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// BenchmarkLoopRouter is the transport's cost per message of routing it
// to a server's loop (transport.WithRouter): a Forward goes to its
// volume's loop.
func BenchmarkLoopRouter(b *testing.B) {
	var m wire.Message = &wire.Forward{Volume: 5}
	r := LoopRouter{Count: 4}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i = r.Inbox(m)
	}
	if i != 1 {
		b.Fatal("routed to the wrong loop")
	}
}

// BenchmarkLoopStatuses is what each loop of a server of 64 volumes on
// two loops spends per tick on statuses: publishing its 32, and (at
// loop 0, once a heartbeat interval) reading the other's.
func BenchmarkLoopStatuses(b *testing.B) {
	statuses := NewLoopStatuses(2)
	mine := make([]wire.VolumeStatus, 32)
	var dst []wire.VolumeStatus
	b.ReportAllocs()
	for b.Loop() {
		statuses.Publish(1, mine, 0)
		statuses.Publish(0, mine, 0)
		var ok bool
		if dst, ok = statuses.Others(dst[:0], 0); !ok || len(dst) != 32 {
			b.Fatal("statuses not published")
		}
	}
}
