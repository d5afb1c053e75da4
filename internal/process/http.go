package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/catena-kv/catena/internal/security"
)

// httpShutdownWait bounds how long a stopping process waits for HTTP
// requests in progress.
const httpShutdownWait = 2 * time.Second

// listenHTTP listens on addr for a process's HTTP (HTTPS with tlsm) and
// makes l serve handler there from Start until Close. It returns an
// error at once when it cannot listen (a port in use): a process
// configured with an HTTP address must not run without it.
func listenHTTP(l *lifecycle, addr string, handler http.Handler, log *slog.Logger, tlsm *security.Material) (serve func(ctx context.Context), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
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
	served := false
	l.hold(func() {
		if !served {
			ln.Close()
		}
	})
	return func(ctx context.Context) {
		served = true
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
	}, nil
}

// pageHandler serves the metrics and, at /, a line saying what the
// process is (the cluster's status page is the master's).
func pageHandler(metrics http.Handler, what string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "%s\n\n/metrics  Prometheus metrics\n\nThe cluster's status page is served by the master.\n", what)
	})
	return mux
}
