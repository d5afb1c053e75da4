package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/transport"
)

// Environment variables that give the client commands (put, get, del,
// status, keyspace, user, role) their TLS files when the flags do not;
// catena dev prints them.
const (
	envTLSCA   = "CATENA_TLS_CA"
	envTLSCert = "CATENA_TLS_CERT"
	envTLSKey  = "CATENA_TLS_KEY"
)

// clientFlags are what a client command needs to reach a cluster:
// -master, -timeout, and -tls-ca, -tls-cert and -tls-key with defaults
// from the environment.
type clientFlags struct {
	master                 *string
	timeout                *time.Duration
	tlsCA, tlsCert, tlsKey *string
	fs                     *flag.FlagSet
}

// registerClientFlags defines a client command's flags in fs.
func registerClientFlags(fs *flag.FlagSet) *clientFlags {
	return &clientFlags{
		master:  fs.String("master", defaultMasterAddr, "the master's address (any member's, for a replicated master)"),
		timeout: fs.Duration("timeout", 10*time.Second, "give up after this long"),
		tlsCA:   cli.StringFromEnv(fs, "tls-ca", envTLSCA, "PEM file of the cluster CA's certificate, for a cluster that requires TLS"),
		tlsCert: cli.StringFromEnv(fs, "tls-cert", envTLSCert, "PEM file of a client certificate of the cluster CA"),
		tlsKey:  cli.StringFromEnv(fs, "tls-key", envTLSKey, "PEM file of its private key"),
		fs:      fs,
	}
}

// context returns the context of the command's work: it ends after
// -timeout.
func (f *clientFlags) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), *f.timeout)
}

// dial connects to the cluster. When the cluster and the command
// disagree about TLS, its error says how to make them agree.
func (f *clientFlags) dial(ctx context.Context) (*client.Client, error) {
	return f.dialAt(ctx, *f.master)
}

// dialAt connects to the cluster whose masters are at master (another
// site's), as dial does.
func (f *clientFlags) dialAt(ctx context.Context, master string) (*client.Client, error) {
	files := client.TLSFiles{CA: *f.tlsCA, Cert: *f.tlsCert, Key: *f.tlsKey}
	if set := f.tlsSet(); len(set) > 0 && len(set) < 3 {
		return nil, cli.UsageErrorf("TLS needs all of -tls-ca, -tls-cert and -tls-key (or $%s, $%s and $%s); got only %s",
			envTLSCA, envTLSCert, envTLSKey, strings.Join(set, " and "))
	}
	c, err := client.Dial(ctx, master, client.Options{TLS: files})
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, transport.ErrTLSUnanswered) && f.tlsFromEnvironment():
		return nil, fmt.Errorf("%w; TLS is on because $%s, $%s and $%s are set (catena dev's export line): unset them for a cluster without TLS",
			err, envTLSCA, envTLSCert, envTLSKey)
	case errors.Is(err, transport.ErrTLSUnanswered):
		return nil, fmt.Errorf("%w; for a cluster without TLS, leave out -tls-ca, -tls-cert and -tls-key", err)
	case errors.Is(err, transport.ErrPlaintextUnanswered) && files == client.TLSFiles{}:
		return nil, fmt.Errorf("%w; for a cluster with TLS, give its CA and a client certificate: -tls-ca, -tls-cert and -tls-key, or $%s, $%s and $%s (catena dev prints the line that sets them)",
			err, envTLSCA, envTLSCert, envTLSKey)
	}
	return nil, err
}

// tlsSet names the TLS flags that have a value.
func (f *clientFlags) tlsSet() []string {
	var set []string
	for _, flag := range []struct {
		name  string
		value *string
	}{{"-tls-ca", f.tlsCA}, {"-tls-cert", f.tlsCert}, {"-tls-key", f.tlsKey}} {
		if *flag.value != "" {
			set = append(set, flag.name)
		}
	}
	return set
}

// tlsFromEnvironment reports whether the TLS files came from the
// environment: set there, and no -tls flag given (on the command line
// or in a -config file).
func (f *clientFlags) tlsFromEnvironment() bool {
	given := cli.Given(f.fs)
	return len(f.tlsSet()) > 0 && !given["tls-ca"] && !given["tls-cert"] && !given["tls-key"]
}
