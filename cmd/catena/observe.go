package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"github.com/catena-kv/catena/internal/security"
)

// logFlags are the logging flags of every long-running process (master,
// server, dev, proxy): register them with registerLogFlags and build the
// process's logger with logger.
type logFlags struct {
	level  slog.Level
	format string
}

// registerLogFlags defines -log-level and -log-format on fs.
func registerLogFlags(fs *flag.FlagSet) *logFlags {
	f := &logFlags{}
	fs.TextVar(&f.level, "log-level", slog.LevelInfo, "least severe log records written: debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", "text", "log record format: text (key=value pairs) or json (one object per line)")
	return f
}

// logger returns the process's structured logger: records at the level
// given or above, written to stderr in the format given, each tagged
// with node=name.
func (f *logFlags) logger(name string) (*slog.Logger, error) {
	h, err := f.handler(os.Stderr)
	if err != nil {
		return nil, err
	}
	return slog.New(h).With("node", name), nil
}

// handler returns a handler writing to w at the level and in the format
// given.
func (f *logFlags) handler(w io.Writer) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: f.level}
	switch f.format {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, usageErrorf("-log-format %q: want text or json", f.format)
}

// args returns the flags that give a child process the same logging.
func (f *logFlags) args() []string {
	return []string{"-log-level", f.level.String(), "-log-format", f.format}
}

// registerHTTPFlag defines -http on fs: the address of the process's
// HTTP listener, off by default. serves says what it serves.
func registerHTTPFlag(fs *flag.FlagSet, serves string) *string {
	return fs.String("http", "", "address to serve "+serves+" over HTTP on (host:port), HTTPS with the process's certificate when -tls-cert is given; empty: no HTTP")
}

// httpShutdownWait bounds how long a stopping process waits for HTTP
// requests in progress.
const httpShutdownWait = 2 * time.Second

// serveHTTP listens on addr and serves handler there until ctx ends. It
// returns an error at once when it cannot listen (a port in use): a
// process started with -http must not run without it.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, log *slog.Logger, tlsm *security.Material) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-http: %w", err)
	}
	scheme := "http"
	if tlsm != nil {
		ln = tls.NewListener(ln, tlsm.HTTPConfig())
		scheme = "https"
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Info("serving HTTP", "addr", ln.Addr().String(), "scheme", scheme)
	return nil
}

// startCPUProfile writes a CPU profile of the process to path until the
// returned function runs; an empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
