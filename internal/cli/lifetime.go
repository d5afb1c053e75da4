package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// DevPipeEnv names the environment variable through which catena dev
// (and catena-lab torture, the same way) gives each process it starts
// the file descriptor of the read end of a pipe whose write end only
// the supervisor holds. When the supervisor exits, however it exits
// (kill -9 included), the kernel closes the write end, the read reaches
// end of file, and the process shuts down as on SIGTERM. dev starts its
// processes in their own process group (so Ctrl-C reaches dev alone,
// which stops them in order): without the pipe nothing would tell them
// that dev is gone.
//
// A pipe rather than Linux's Pdeathsig: Pdeathsig fires when the thread
// that started the child exits, not the process, and Go may end that
// thread; it does not exist on macOS; and it kills, where the pipe lets
// the process close its storage cleanly.
const DevPipeEnv = "CATENA_DEV_PIPE_FD"

// orphanExitWait bounds the clean shutdown of a process whose
// supervisor is gone; after it, the process exits anyway, since nobody
// else will stop it.
const orphanExitWait = 10 * time.Second

// StopContext returns the context a long-running command (master,
// server, proxy) runs under: it ends on SIGINT or SIGTERM, or, for a
// process started by catena dev, when dev exits.
func StopContext(log *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	value, ok := os.LookupEnv(DevPipeEnv)
	if !ok {
		return ctx, stopSignals
	}
	os.Unsetenv(DevPipeEnv)
	fd, err := strconv.Atoi(value)
	if err != nil || fd < 3 {
		log.Warn("ignoring a malformed "+DevPipeEnv, "value", value)
		return ctx, stopSignals
	}
	ctx, cancel := context.WithCancel(ctx)
	pipe := os.NewFile(uintptr(fd), "catena dev pipe")
	go func() {
		io.Copy(io.Discard, pipe) // dev never writes: this returns when dev is gone
		log.Info("catena dev exited: shutting down")
		cancel()
		time.Sleep(orphanExitWait)
		log.Error("still running after catena dev exited; exiting", "waited", orphanExitWait)
		os.Exit(1)
	}()
	return ctx, func() { cancel(); stopSignals() }
}
