package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/security"
)

// defaultRedisAddr is where `catena proxy` and `catena dev` serve the
// Redis protocol (Redis's own port is 6379).
const defaultRedisAddr = "127.0.0.1:7379"

// proxyDialRetry is the pause between attempts to reach the masters.
const proxyDialRetry = time.Second

func runProxy(args []string) error {
	fs := newFlagSet("proxy", "catena proxy -listen ADDR -master ADDR[,ADDR...] [flags]", `Serves the Redis protocol (RESP2, RESP3 after HELLO 3) for a cluster, so
Redis clients and tools (redis-cli, redis-benchmark, go-redis...) can use
it. A proxy holds no data and no state beyond its connections: run as many
as you like, anywhere, and point each client at any of them. Every command
goes through Catena's client: linearizable and exactly-once per key.
See docs/operations.md for the commands and their atomicity.`)
	listen := fs.String("listen", defaultRedisAddr, "address to serve the Redis protocol on in plaintext; without -password-file only a loopback address is allowed; 'off': none")
	tlsListen := fs.String("tls-listen", "", "address to serve the Redis protocol on over TLS (redis-cli --tls), with the certificate of -tls-cert; empty: none")
	insecure := fs.Bool("insecure", false, "allow -listen on a non-loopback address without -password-file: anyone who reaches the port may read and write (a private network only, as in deploy/docker)")
	passwordFile := fs.String("password-file", "", "file whose first line is the password every Redis connection must give (AUTH password, or HELLO 3 AUTH default password) before any command")
	masterAddrs := fs.String("master", defaultMasterAddr, "the master's address, or its members' addresses separated by commas")
	consistency := fs.String("consistency", "strong", "reads' consistency for a new connection (CLIENT CONSISTENCY changes it per connection): strong (the chain's tail answers) or any-member (CRAQ); both linearizable")
	maxClients := fs.Int("max-clients", resp.ConnectionsMaxDefault, "connections served at once; more are refused with Redis's 'max number of clients reached'")
	maxPerAddress := fs.Int("max-clients-per-address", resp.ConnectionsPerAddressMaxDefault, "connections served at once from one remote IP address; more are refused with 'max number of clients reached from this address' and logged")
	pipelineMax := fs.Int("pipeline-max", resp.PipelineDepthMax, "commands one connection may have in flight (read, not yet answered); beyond, the proxy stops reading it until the oldest is answered")
	httpAddr := registerHTTPFlag(fs, "Prometheus metrics (/metrics)")
	tlsf := registerTLSFlags(fs, security.RoleProxy)
	logs := registerLogFlags(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := noArguments(args); err != nil {
		return err
	}
	var cons client.Consistency
	switch *consistency {
	case "strong":
		cons = client.Strong
	case "any-member":
		cons = client.AnyMember
	default:
		return usageErrorf("-consistency must be strong or any-member, not %q", *consistency)
	}
	if *maxClients < 1 {
		return usageErrorf("-max-clients must be at least 1")
	}
	if *maxPerAddress < 1 {
		return usageErrorf("-max-clients-per-address must be at least 1")
	}
	if *pipelineMax < 1 {
		return usageErrorf("-pipeline-max must be at least 1")
	}
	if *listen == "off" {
		*listen = ""
	}
	if *listen == "" && *tlsListen == "" {
		return usageErrorf("-listen off needs -tls-listen: the proxy would serve nothing")
	}
	log, err := logs.logger(cmp.Or(*listen, *tlsListen))
	if err != nil {
		return err
	}
	tlsm, err := tlsf.material(log, security.RoleProxy, "")
	if err != nil {
		return err
	}
	if *tlsListen != "" && tlsm == nil {
		return usageErrorf("-tls-listen needs -tls-ca, -tls-cert and -tls-key")
	}
	var password string
	if *passwordFile != "" {
		if password, err = readPassword(*passwordFile); err != nil {
			return err
		}
	}
	if *listen != "" && password == "" && !isLoopback(*listen) && !*insecure {
		return usageErrorf("-listen %s: serving the Redis protocol in plaintext without a password is allowed on a loopback address only; give -password-file, serve TLS with -tls-listen and -listen off, or (a private network only) -insecure", *listen)
	}
	// Listen first, so a port in use fails at once.
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		listeners = append(listeners, ln)
	}
	if *tlsListen != "" {
		ln, err := net.Listen("tcp", *tlsListen)
		if err != nil {
			return err
		}
		listeners = append(listeners, tls.NewListener(ln, tlsm.ServerConfig(false)))
	}
	ctx, stop := stopContext(log)
	defer stop()
	cl, err := dialUntilReady(ctx, *masterAddrs, clientTLS(tlsm), log.Warn)
	if err != nil {
		return err
	}
	defer cl.Close()
	version := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		version = versionLine(info)
	}
	o := resp.Options{Store: cl, Consistency: cons, ConnectionsMax: *maxClients, ConnectionsPerAddressMax: *maxPerAddress,
		PipelineMax: *pipelineMax, Version: version, Masters: *masterAddrs, Logger: log, Password: password}
	if tlsm != nil {
		// The cluster's users may AUTH: their password hashes are for
		// proxies' certificates only.
		users := resp.NewClusterUsers(cl.FetchAuth, log)
		go users.Run(ctx)
		o.Users = users
	}
	var srv *resp.Server
	reg := metrics.NewRegistry()
	if *httpAddr != "" {
		// The scrape reads srv: it is set before serveHTTP starts serving.
		o.Observer = metrics.NewProxy(reg, func() metrics.ProxyStats {
			s := srv.Stats()
			return metrics.ProxyStats{Connections: s.Connections, Accepted: s.Accepted, Rejected: s.Rejected}
		})
	}
	if srv, err = resp.New(o); err != nil {
		return err
	}
	if *httpAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler(reg))
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "catena proxy %s (Redis protocol)\n\n/metrics  Prometheus metrics\n\nThe cluster's status page is served by the master.\n", *listen)
		})
		if err := serveHTTP(ctx, *httpAddr, mux, log, tlsm); err != nil {
			return err
		}
	}
	served := make(chan error, len(listeners))
	for _, ln := range listeners {
		go func() { served <- srv.Serve(ln) }()
	}
	log.Info("proxy started", "listen", *listen, "tls-listen", *tlsListen, "password", password != "", "tls", tlsm != nil,
		"master", *masterAddrs, "consistency", *consistency)
	select {
	case <-ctx.Done():
		log.Info("proxy stopping")
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

// isLoopback reports whether addr (host:port) is on a loopback address.
func isLoopback(addr string) bool {
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

// readPassword reads the first line of a password file.
func readPassword(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("-password-file %s: the first line is empty", path)
	}
	return line, nil
}
