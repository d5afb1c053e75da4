package main

import (
	"cmp"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/resp"
	"github.com/catena-kv/catena/internal/security"
)

// defaultRedisAddr is where `catena proxy` and `catena dev` serve the
// Redis protocol (Redis's own port is 6379).
const defaultRedisAddr = "127.0.0.1:7379"

func runProxy(args []string) error {
	fs := cli.NewFlagSet("proxy", "catena proxy -listen ADDR -master ADDR[,ADDR...] [flags]", `Serves the Redis protocol (RESP2, RESP3 after HELLO 3) for a cluster, so
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
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file when the proxy stops")
	pipelineMax := fs.Int("pipeline-max", resp.PipelineDepthMax, "commands one connection may have in flight (read, not yet answered); beyond, the proxy stops reading it until the oldest is answered")
	httpAddr := registerHTTPFlag(fs, "Prometheus metrics (/metrics)")
	tlsf := registerTLSFlags(fs, security.RoleProxy)
	logs := registerLogFlags(fs)
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	var cons client.Consistency
	switch *consistency {
	case "strong":
		cons = client.Strong
	case "any-member":
		cons = client.AnyMember
	default:
		return cli.UsageErrorf("-consistency must be strong or any-member, not %q", *consistency)
	}
	if *maxClients < 1 {
		return cli.UsageErrorf("-max-clients must be at least 1")
	}
	if *maxPerAddress < 1 {
		return cli.UsageErrorf("-max-clients-per-address must be at least 1")
	}
	if *pipelineMax < 1 {
		return cli.UsageErrorf("-pipeline-max must be at least 1")
	}
	if *listen == "off" {
		*listen = ""
	}
	if *listen == "" && *tlsListen == "" {
		return cli.UsageErrorf("-listen off needs -tls-listen: the proxy would serve nothing")
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
		return cli.UsageErrorf("-tls-listen needs -tls-ca, -tls-cert and -tls-key")
	}
	var password string
	if *passwordFile != "" {
		if password, err = readPassword(*passwordFile); err != nil {
			return err
		}
	}
	if *listen != "" && password == "" && !process.IsLoopback(*listen) && !*insecure {
		return cli.UsageErrorf("-listen %s: serving the Redis protocol in plaintext without a password is allowed on a loopback address only; give -password-file, serve TLS with -tls-listen and -listen off, or (a private network only) -insecure", *listen)
	}
	version := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		version = versionLine(info)
	}
	p, err := process.NewProxy(process.ProxyConfig{
		Listen: *listen, TLSListen: *tlsListen, Insecure: *insecure, Password: password, Masters: *masterAddrs,
		Consistency: cons, ConnectionsMax: *maxClients, ConnectionsPerAddressMax: *maxPerAddress, PipelineMax: *pipelineMax,
		HTTP: *httpAddr, TLS: tlsm, Version: version, Log: log,
	})
	if err != nil {
		return err
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := cli.StopContext(log)
	defer stop()
	return process.Run(ctx, p)
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
