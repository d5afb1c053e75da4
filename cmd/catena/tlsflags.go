package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/transport"
)

// tlsFlags are -tls-ca, -tls-cert and -tls-key.
type tlsFlags struct{ ca, cert, key string }

// registerTLSFlags defines the TLS flags of a process (master, server,
// proxy): its certificate must carry its role.
func registerTLSFlags(fs *flag.FlagSet, role security.Role) *tlsFlags {
	f := &tlsFlags{}
	fs.StringVar(&f.ca, "tls-ca", "", "PEM file of the cluster CA's certificate: with -tls-cert and -tls-key, every cluster link is mutual TLS 1.3 and HTTP is HTTPS (docs/operations.md, \"Security\")")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM file of this process's certificate, issued by the cluster CA for the "+string(role)+" role (catena certs)")
	fs.StringVar(&f.key, "tls-key", "", "PEM file of this process's private key")
	return f
}

func (f *tlsFlags) files() security.Files { return security.Files{CA: f.ca, Cert: f.cert, Key: f.key} }

// material loads the files, checking the certificate carries role and,
// unless name is empty, names name (a member's listen address, which
// peers check); nil without TLS files.
func (f *tlsFlags) material(log *slog.Logger, role security.Role, name string) (*security.Material, error) {
	files := f.files()
	if err := files.Validate(); err != nil {
		return nil, cli.UsageErrorf("%v", err)
	}
	if files.IsZero() {
		return nil, nil
	}
	m, err := security.Load(files, log)
	if err != nil {
		return nil, err
	}
	if self := m.Self(); self.Role != role {
		return nil, fmt.Errorf("-tls-cert %s is a %s certificate; this process needs a %s certificate", f.cert, self.Role, role)
	} else if name != "" && self.Name != name {
		return nil, fmt.Errorf("-tls-cert %s names %s; this process's peers expect %s (its -listen address)", f.cert, self.Name, name)
	}
	return m, nil
}

// clientLimitFlags are a master's or server's limits per client
// (docs/operations.md, "Limits per client").
type clientLimitFlags struct{ inFlight, connections int }

// registerClientLimitFlags defines -client-inflight-max and
// -client-connections-max.
func registerClientLimitFlags(fs *flag.FlagSet) *clientLimitFlags {
	f := &clientLimitFlags{}
	fs.IntVar(&f.inFlight, "client-inflight-max", transport.ClientInFlightMaxDefault, "messages one client connection may have waiting for this process; beyond, its requests are refused at once (the client's error: too many requests in flight); 0: no limit; proxies' connections are not limited")
	fs.IntVar(&f.connections, "client-connections-max", transport.ClientConnectionsPerIdentityMaxDefault, "open client connections per client certificate (with TLS) or per remote address (without); one more is refused and logged")
	return f
}

// limits returns the limits the flags give, or a usage error for limits
// out of range.
func (f *clientLimitFlags) limits() (process.ClientLimits, error) {
	if f.inFlight < 0 {
		return process.ClientLimits{}, cli.UsageErrorf("-client-inflight-max must be 0 (no limit) or more")
	}
	if f.connections < 1 {
		return process.ClientLimits{}, cli.UsageErrorf("-client-connections-max must be at least 1")
	}
	return process.ClientLimits{InFlightMax: f.inFlight, ConnectionsMax: f.connections}, nil
}
