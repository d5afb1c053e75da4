// Package process assembles Catena's processes: the configuration
// master, a storage server and a Redis-protocol proxy, each built from a
// configuration value (MasterConfig, ServerConfig, ProxyConfig) and run
// until it is closed. `catena master`, `catena server` and `catena
// proxy` parse their flags into these values and run them; the in-process
// test cluster (internal/testcluster) builds its processes with the same
// code, so the tests run the production wiring: Pebble, the event loops
// and their router, the transport's limits and TLS.
//
//	s, err := process.NewServer(cfg) // validates cfg, opens the storage, listens
//	if err != nil { ... }
//	err = process.Run(ctx, s)        // runs until ctx ends, then closes s
//
// A process reads no flags, files named by environment variables or
// signals: what it needs comes in its configuration (fault injection,
// TLS material, deliberate protocol bugs).
package process

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/transport"
)

// Process is a master, server or proxy built by NewMaster, NewServer or
// NewProxy. It holds its listeners and storage from then on.
type Process interface {
	// Start runs the process in the background. It does nothing after
	// the first call, or after Close.
	Start()
	// Done is closed when the process stopped by itself (a failure) or
	// was closed.
	Done() <-chan struct{}
	// Close stops the process if it runs, releases what it holds and
	// returns the error the process stopped with (nil when it ran well
	// until closed). Calling it again returns the same error.
	Close() error
}

// Run starts p and waits until ctx ends or p stops by itself, then
// closes p and returns its error.
func Run(ctx context.Context, p Process) error {
	p.Start()
	select {
	case <-ctx.Done():
	case <-p.Done():
	}
	return p.Close()
}

// lifecycle runs a process's work in the background and releases what
// the process holds when it is closed. Embedded in Master, Server and
// Proxy, it gives them Process's methods.
type lifecycle struct {
	// run is the process's work: it returns when ctx ends, or on a
	// failure.
	run func(ctx context.Context) error
	// releases are run by Close, the last held first.
	releases []func()
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	// started is set once, inside startOnce.
	started              bool
	startOnce, closeOnce sync.Once
	// err is run's result, written before done is closed.
	err error
}

func newLifecycle() *lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifecycle{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// hold registers release to run when the process is closed.
func (l *lifecycle) hold(release func()) { l.releases = append(l.releases, release) }

// holdErr is hold for a release that returns an error, which no one
// would act on when the process closes.
func (l *lifecycle) holdErr(release func() error) { l.hold(func() { release() }) }

// Start implements Process.
func (l *lifecycle) Start() {
	l.startOnce.Do(func() {
		l.started = true
		go func() {
			l.err = l.run(l.ctx)
			close(l.done)
		}()
	})
}

// Done implements Process.
func (l *lifecycle) Done() <-chan struct{} { return l.done }

// Close implements Process.
func (l *lifecycle) Close() error {
	l.closeOnce.Do(func() {
		l.startOnce.Do(func() {}) // no Start after Close
		l.cancel()
		if l.started {
			<-l.done
		} else {
			close(l.done)
		}
		for i := len(l.releases) - 1; i >= 0; i-- {
			l.releases[i]()
		}
	})
	return l.err
}

// ClientLimits are a master's or server's limits per client
// (docs/operations.md, "Limits per client").
type ClientLimits struct {
	// InFlightMax bounds the messages one client connection may have
	// waiting for the process; beyond, its requests are refused at once.
	// 0: no limit. Proxies' connections are not limited.
	InFlightMax int
	// ConnectionsMax bounds the open client connections per client
	// certificate (with TLS) or per remote address (without).
	ConnectionsMax int
}

// DefaultClientLimits are the transport's defaults.
var DefaultClientLimits = ClientLimits{InFlightMax: transport.ClientInFlightMaxDefault, ConnectionsMax: transport.ClientConnectionsPerIdentityMaxDefault}

func (c ClientLimits) validate() error {
	if c.InFlightMax < 0 {
		return errors.New("ClientLimits.InFlightMax must be 0 (no limit) or more")
	}
	if c.ConnectionsMax < 1 {
		return errors.New("ClientLimits.ConnectionsMax must be at least 1")
	}
	return nil
}

// Links are what a master's or a server's links are set with.
type Links struct {
	// TLS is the process's TLS material (-tls-ca, -tls-cert, -tls-key);
	// nil: plaintext.
	TLS *security.Material
	// Limits are the limits per client (-client-inflight-max,
	// -client-connections-max).
	Limits ClientLimits
	// WAN emulates a wide-area network to other sites (-wan-rtt,
	// -wan-jitter, -wan-peers, -wan-cut-file); zero: none.
	WAN WAN
	// TransportOptions are added after those the fields above give
	// (tests).
	TransportOptions []transport.Option
}

func (l Links) validate() error {
	if err := l.Limits.validate(); err != nil {
		return err
	}
	return l.WAN.validate()
}

// transportOptions returns the transport options of a master or server:
// its limits per client, TLS (none without material), then more.
func (l Links) transportOptions() []transport.Option {
	opts := []transport.Option{transport.WithClientInFlightMax(l.Limits.InFlightMax), transport.WithClientConnectionsMax(l.Limits.ConnectionsMax)}
	if l.TLS != nil {
		opts = append(opts, transport.WithTLS(l.TLS))
	}
	return append(opts, l.TransportOptions...)
}

// clientTLS returns the client options' TLS files for m (zero for nil):
// a member's status page and a proxy dial the cluster with their own
// certificate.
func clientTLS(m *security.Material) client.TLSFiles {
	if m == nil {
		return client.TLSFiles{}
	}
	return client.TLSFiles(m.Files())
}

// logRefusals logs what a master or server refused because it came from
// a site of another deployment (-cluster).
func logRefusals(log *slog.Logger, refusals []string) {
	for _, why := range refusals {
		log.Warn("refused a site of another deployment", "reason", why)
	}
}

// logDenials logs the requests a master refused to their callers
// (changes of users, roles or keyspaces by a user without role admin).
func logDenials(log *slog.Logger, denials []string) {
	for _, why := range denials {
		log.Warn("request denied", "reason", why)
	}
}

// logCuts logs the links a master cut.
func logCuts(log *slog.Logger, cuts []string) {
	for _, what := range cuts {
		log.Warn("link cut", "what", what)
	}
}
