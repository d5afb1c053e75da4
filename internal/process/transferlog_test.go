package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// A joining server logs when a snapshot starts arriving, a progress line
// at most every interval while chunks keep coming, and the totals once it
// is installed; a tail logs each snapshot it sends.
func TestTransferLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	tl := newTransferLog(log, 5*time.Second)
	start := time.Now()
	chunk := func(seq int, last bool) *wire.SnapshotChunk {
		return &wire.SnapshotChunk{Volume: 3, SnapshotSN: 40, Seq: seq, Last: last, Objects: []wire.KeyValue{{Key: "key", Value: make([]byte, 997)}}}
	}
	for i := range 10 {
		tl.Stepped(start.Add(time.Duration(i)*time.Second), "tail", chunk(i, i == 9), nil)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`msg="state transfer: receiving a snapshot" volume=3 from=tail snapshot-sn=40`,
		`msg="state transfer: progress" volume=3 from=tail snapshot-sn=40 objects=6 bytes=6000 chunks=6 elapsed=5s`,
		`msg="state transfer: snapshot received" volume=3 from=tail snapshot-sn=40 objects=10 bytes=10000 chunks=10 elapsed=9s mb-per-s=0`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged:\n%s\nwant %d lines", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}

	buf.Reset()
	out := []wire.Envelope{{To: "joiner", Msg: &wire.SyncReply{Volume: 3}}, {To: "joiner", Msg: chunk(0, false)}, {To: "joiner", Msg: chunk(1, true)}}
	tl.Stepped(start, "joiner", &wire.SyncRequest{Volume: 3, NeedSnapshot: true}, out)
	if want := `msg="state transfer: sending a snapshot to the joining server" volume=3 to=joiner snapshot-sn=40 objects=2 bytes=2000 chunks=2`; !strings.Contains(buf.String(), want) {
		t.Errorf("logged:\n%s\nwant %s", buf.String(), want)
	}

	// A catch-up instead of a snapshot, at the tail and at the joiner.
	buf.Reset()
	out = []wire.Envelope{{To: "joiner", Msg: &wire.SyncReply{Volume: 3, CatchUp: true, PredecessorAppliedSN: 9}},
		{To: "joiner", Msg: &wire.Forward{Volume: 3, Updates: make([]wire.Update, 4)}}}
	tl.Stepped(start, "joiner", &wire.SyncRequest{Volume: 3, NeedSnapshot: true, AppliedSN: 5, AppliedEpoch: 2}, out)
	tl.Stepped(start, "tail", out[0].Msg, nil)
	for _, want := range []string{
		`msg="state transfer: catching up the joining server (no snapshot)" volume=3 to=joiner from-sn=5 updates=4`,
		`msg="state transfer: catching up from the tail (no snapshot)" volume=3 from=tail tail-applied-sn=9`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("logged:\n%s\nwant %s", buf.String(), want)
		}
	}
}
