package wire

import (
	"fmt"
	"strings"
	"testing"
)

// Times print as durations wherever they are formatted with %v or %s:
// in errors, logs and the simulator's trace. %d still gives nanoseconds.
func TestTimePrintsAsDuration(t *testing.T) {
	for _, tc := range []struct {
		time Time
		want string
	}{
		{0, "0s"},
		{1500 * Millisecond, "1.5s"},
		{-20 * Microsecond, "-20µs"},
		{1736437, "1.736437ms"},
	} {
		if got := fmt.Sprint(tc.time); got != tc.want {
			t.Errorf("Sprint(Time(%d)) = %q, want %q", int64(tc.time), got, tc.want)
		}
	}
	if got := fmt.Sprintf("%d", 2*Second); got != "2000000000" {
		t.Errorf("%%d of 2s = %q, want nanoseconds", got)
	}
	reply := fmt.Sprintf("%+v", &HeartbeatReply{SentAt: 1736437, LeaseFor: 200 * Millisecond})
	if !strings.Contains(reply, "SentAt:1.736437ms") || !strings.Contains(reply, "LeaseFor:200ms") {
		t.Errorf("HeartbeatReply prints as %s", reply)
	}
}
