package torture

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/testbin"
)

// watchedBuffer is an output that reports when a line containing a
// string appears.
type watchedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.found != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.found)
		w.found = nil
	}
	return len(p), nil
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A run interrupted under faults (as by Ctrl-C) stops its processes and
// removes its network and its temporary results before it returns.
func TestRunInterruptedCleansUp(t *testing.T) {
	exe := testbin.Catena(t)
	const prefix = "ctortr"
	if err := CheckEnvironment(prefix); err != nil {
		t.Skip(err)
	}
	out := &watchedBuffer{want: "nemesis", found: make(chan struct{})}
	found := out.found
	o := DefaultOptions
	o.Exe, o.PipeEnv, o.Stdout = exe, "CATENA_DEV_PIPE_FD", out
	o.Prefix, o.Subnet = prefix, "10.215.0"
	o.Duration, o.Seed, o.Nemesis = 10*time.Minute, 3, []Kind{PauseServer}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-found: // the first fault is in force: a server is paused
			time.Sleep(500 * time.Millisecond)
		case <-time.After(3 * time.Minute):
		}
		cancel()
	}()
	_, err := Run(ctx, o)
	t.Logf("output:\n%s", out)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run returned %v, want interrupted", err)
	}
	if !strings.Contains(out.String(), "start pause-server") {
		t.Fatal("interrupted before the first fault")
	}
	if left, _ := namespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
	m := regexp.MustCompile(`results in (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no results directory printed")
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("the temporary results %s are left (%v)", m[1], err)
	}
}
