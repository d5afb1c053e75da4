package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/security"
)

// proxyDialRetry is the pause between attempts to reach the masters.
const proxyDialRetry = time.Second

// ProxyConfig is a Redis-protocol proxy. Each field is the `catena
// proxy` flag its comment names.
type ProxyConfig struct {
	// Listen is the address to serve the Redis protocol on in plaintext
	// (-listen); empty: none.
	Listen string
	// TLSListen is the address to serve it on over TLS, with TLS's
	// certificate (-tls-listen); empty: none.
	TLSListen string
	// Insecure allows Listen on an address other than loopback without
	// a Password (-insecure).
	Insecure bool
	// Password, if set, is required of every connection (-password-file).
	Password string
	// Masters is the master's address, or its members' separated by
	// commas (-master).
	Masters string
	// Consistency is a new connection's reads' (-consistency).
	Consistency client.Consistency
	// ConnectionsMax, ConnectionsPerAddressMax and PipelineMax bound the
	// connections, those from one IP address, and one connection's
	// commands in flight (-max-clients, -max-clients-per-address,
	// -pipeline-max).
	ConnectionsMax, ConnectionsPerAddressMax, PipelineMax int
	// HTTP is the address of the Prometheus metrics (-http); empty: none.
	HTTP string
	// TLS is the proxy's TLS material (-tls-ca, -tls-cert, -tls-key): it
	// dials the cluster with it and serves TLSListen and HTTPS; nil:
	// plaintext.
	TLS *security.Material
	// Version is what INFO reports as catena_version.
	Version string
	// Log receives the process's log records (-log-level,
	// -log-format).
	Log *slog.Logger

	// local, in a server's own front end (ServerConfig.RedisListen),
	// answers reads from the server's replicas where it can.
	local localReader
}

// Validate reports a configuration that cannot run.
func (c *ProxyConfig) Validate() error {
	switch {
	case c.Listen == "" && c.TLSListen == "":
		return errors.New("process: proxy: neither Listen nor TLSListen: the proxy would serve nothing")
	case c.TLSListen != "" && c.TLS == nil:
		return errors.New("process: proxy: TLSListen needs TLS")
	case c.Listen != "" && c.Password == "" && !IsLoopback(c.Listen) && !c.Insecure:
		return fmt.Errorf("process: proxy: Listen %s: serving the Redis protocol in plaintext without a password is allowed on a loopback address only, unless Insecure", c.Listen)
	case c.ConnectionsMax < 1 || c.ConnectionsPerAddressMax < 1 || c.PipelineMax < 1:
		return errors.New("process: proxy: ConnectionsMax, ConnectionsPerAddressMax and PipelineMax must be at least 1")
	case c.Masters == "":
		return errors.New("process: proxy: Masters is required")
	case c.Log == nil:
		return errors.New("process: proxy: Log is required")
	}
	return nil
}

// Proxy is a running Redis-protocol proxy.
type Proxy struct {
	*lifecycle
	listeners []net.Listener
}

// Addrs returns the addresses the proxy serves: the plaintext one first,
// if any, then the TLS one.
func (p *Proxy) Addrs() []string {
	var out []string
	for _, ln := range p.listeners {
		out = append(out, ln.Addr().String())
	}
	return out
}

// NewProxy validates c and listens; Start reaches the masters (retrying
// while they cannot be reached) and serves.
func NewProxy(c ProxyConfig) (_ *Proxy, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{lifecycle: newLifecycle()}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	// Listen first, so a port in use fails at once.
	if c.Listen != "" {
		ln, err := net.Listen("tcp", c.Listen)
		if err != nil {
			return nil, err
		}
		p.listeners = append(p.listeners, ln)
		p.holdErr(ln.Close)
	}
	if c.TLSListen != "" {
		ln, err := net.Listen("tcp", c.TLSListen)
		if err != nil {
			return nil, err
		}
		ln = tls.NewListener(ln, c.TLS.ServerConfig(false))
		p.listeners = append(p.listeners, ln)
		p.holdErr(ln.Close)
	}
	p.run = func(ctx context.Context) error { return p.serve(ctx, c) }
	return p, nil
}

// serve reaches the masters and serves the Redis protocol until ctx
// ends.
func (p *Proxy) serve(ctx context.Context, c ProxyConfig) error {
	cl, err := dialUntilReady(ctx, c.Masters, clientTLS(c.TLS), c.Log.Warn)
	if err != nil {
		return err
	}
	defer cl.Close()
	var store resp.Store = cl
	if c.local != nil {
		store = localFirst{Client: cl, local: c.local}
	}
	o := resp.Options{Store: store, Consistency: c.Consistency, ConnectionsMax: c.ConnectionsMax, ConnectionsPerAddressMax: c.ConnectionsPerAddressMax,
		PipelineMax: c.PipelineMax, Version: c.Version, Masters: c.Masters, Logger: c.Log, Password: c.Password}
	if c.TLS != nil {
		// The cluster's users may AUTH: their password hashes are for
		// proxies' certificates only.
		users := resp.NewClusterUsers(cl.FetchAuth, c.Log)
		go users.Run(ctx)
		o.Users = users
	}
	var srv *resp.Server
	reg := metrics.NewRegistry()
	if c.HTTP != "" {
		// The scrape reads srv: it is set before the HTTP server starts.
		o.Observer = metrics.NewProxy(reg, func() metrics.ProxyStats {
			s := srv.Stats()
			return metrics.ProxyStats{Connections: s.Connections, Accepted: s.Accepted, Rejected: s.Rejected}
		})
	}
	if srv, err = resp.New(o); err != nil {
		return err
	}
	if c.HTTP != "" {
		serveHTTP, err := listenHTTP(p.lifecycle, c.HTTP, pageHandler(metrics.Handler(reg), "catena proxy "+c.Listen+" (Redis protocol)"), c.Log, c.TLS)
		if err != nil {
			return err
		}
		serveHTTP(ctx)
	}
	served := make(chan error, len(p.listeners))
	for _, ln := range p.listeners {
		go func() { served <- srv.Serve(ln) }()
	}
	c.Log.Info("proxy started", "listen", c.Listen, "tls-listen", c.TLSListen, "password", c.Password != "", "tls", c.TLS != nil,
		"master", c.Masters, "consistency", c.Consistency.String())
	select {
	case <-ctx.Done():
		c.Log.Info("proxy stopping")
		srv.Close()
		<-served
		return nil
	case err := <-served:
		srv.Close()
		return err
	}
}

// dialUntilReady dials the cluster, retrying while the masters cannot be
// reached (they may start after the proxy), and fails at once on a
// malformed address or one that is not a master.
func dialUntilReady(ctx context.Context, masterAddrs string, tlsFiles client.TLSFiles, warn func(msg string, args ...any)) (*client.Client, error) {
	for {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := client.Dial(dctx, masterAddrs, client.Options{TLS: tlsFiles})
		cancel()
		if err == nil {
			return cl, nil
		}
		if errors.Is(err, client.ErrInvalid) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped before reaching the masters: %w", err)
		}
		warn("cannot reach the masters yet; retrying", "error", err, "in", proxyDialRetry)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped before reaching the masters: %w", err)
		case <-time.After(proxyDialRetry):
		}
	}
}

// IsLoopback reports whether addr (host:port) is on a loopback address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
