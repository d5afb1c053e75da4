package torture

import (
	"fmt"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// A fault's outage is the worst volume's longest time its clients waited
// without a success from the fault's start: a volume whose writes stop
// for 1.5 s shows it though the other volume never stopped, reads that
// went on do not, the gap before the fault is not the fault's, and time
// with nothing in flight is no outage.
func TestAvailabilityIsTheWorstVolumesGap(t *testing.T) {
	keyOf := func(v wire.VolumeID) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint("r", i, ".0"); placement.VolumeOf(k, 2) == v {
				return k
			}
		}
	}
	ms := func(n int) int64 { return int64(time.Duration(n) * time.Millisecond) }
	var history []Record
	for at := 0; at <= 6000; at += 10 {
		for _, v := range []wire.VolumeID{0, 1} {
			stalled := v == 0 && (at > 1000 && at < 2500 || at > 300 && at < 700)
			if !stalled {
				history = append(history, Record{Op: wire.Op{Kind: wire.OpPut, Key: keyOf(v)}, Call: ms(at - 1), Return: ms(at), Outcome: OK})
			}
			history = append(history, Record{Op: wire.Op{Kind: wire.OpGet, Key: keyOf(v)}, Call: ms(at - 20), Return: ms(at), Outcome: OK})
			// Failed operations are waiting, not successes; the final
			// reads do not count.
			history = append(history, Record{Op: wire.Op{Kind: wire.OpPut, Key: keyOf(v)}, Call: ms(at), Return: ms(at + 5), Outcome: Failed})
		}
	}
	history = append(history, Record{Client: finalClient, Op: wire.Op{Kind: wire.OpGet, Key: keyOf(0)}, Return: ms(1500), Outcome: OK})
	faults := []faultWindow{
		{kind: KillServer, start: time.Second, end: 1200 * time.Millisecond},
		{kind: KillServer, start: 4 * time.Second, end: 4500 * time.Millisecond},
	}
	lines := availability(history, faults, nil, 2)
	if len(lines) != 1 {
		t.Fatalf("lines %q: want one for kill-server", lines)
	}
	want := "kill-server (2): writes median 1.5s, max 1.5s, reads median 10ms, max 10ms"
	if lines[0] != want {
		t.Fatalf("got  %q\nwant %q", lines[0], want)
	}
	if got := availability(history, nil, nil, 2); got != nil {
		t.Fatalf("no faults: %q", got)
	}
	// Writes that stop succeeding for good at 4.99 s, within the fault
	// from 4 s, while clients go on trying: the wait runs to the end of
	// the history (6.005 s, the last failed attempt's return). Once
	// nobody tries any more, nobody waits.
	var cut, idle []Record
	for _, h := range history {
		if h.Return < ms(5000) || h.Op.Kind.IsQuery() || h.Outcome == Failed {
			cut = append(cut, h)
		}
		if h.Return < ms(5000) || h.Op.Kind.IsQuery() {
			idle = append(idle, h)
		}
	}
	for _, tc := range []struct {
		history []Record
		want    string
	}{
		{cut, "kill-server (1): writes 1.02s, reads 10ms"},
		{idle, "kill-server (1): writes 10ms, reads 10ms"},
	} {
		if lines := availability(tc.history, faults[1:], nil, 2); len(lines) != 1 || lines[0] != tc.want {
			t.Errorf("got %q, want %q", lines, tc.want)
		}
	}
}
