// Command catena is the binary a Catena deployment runs. Subcommands:
//
//	catena dev       start a local cluster (a master, servers and a proxy as processes)
//	catena master    run the configuration master
//	catena server    run a storage server
//	catena proxy     serve the Redis protocol for a cluster
//	catena put|get|del|status   talk to a cluster
//	catena watch     print each change to keys as it commits
//	catena lease     list, grant, renew and revoke leases
//	catena keyspace  create and list keyspaces
//	catena user|role  manage users and roles (authorization)
//	catena certs     create a cluster CA and certificates for TLS
//	catena version   print the version and the revision it was built from
//
// The lab's commands (sim, bench, experiment, torture) are catena-lab's
// (cmd/catena-lab), so this binary links none of their dependencies;
// catena runs catena-lab in their place when it is beside it.
package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/catena-kv/catena/internal/cli"
)

// usage is the top-level help.
const usage = `usage: catena <command> [arguments] [flags]

commands:
  dev      start a local cluster: a master, 3 servers and a Redis-protocol
           proxy as separate processes, with the master's status page at
           https://127.0.0.1:7180/ and the proxy at 127.0.0.1:7379
  master   run the configuration master
  server   run a storage server
  proxy    serve the Redis protocol for a cluster (redis-cli, go-redis, ...)
  put KEY VALUE, put KEY - (value from stdin), put KEY -file PATH,
  get KEY, get KEY -o PATH (exactly the value, to a file), del KEY
           read and write a cluster (default master ` + defaultMasterAddr + `);
           put -ttl 30s: a key that expires
  ttl KEY, expire KEY DURATION, expire KEY -persist
           a key's deadline: show it, set it, remove it
  scan [PREFIX], scan -match PATTERN
           list the keys (with PREFIX, or matching a Redis glob), sorted
  watch [PREFIX] [-key] [-from POSITION]
           print each change to the keys with PREFIX (or to one key) as
           it commits; on exit, the position to resume from
  lease list, lease grant TTL, lease keepalive ID, lease revoke ID
           leases: keys bound to a holder's liveness (the Go client binds
           keys and renews: docs/operations.md, "Leases and locks")
  status   show the chain, each server's role, epoch and applied SN (-json)
  keyspace create NAME -prefix P [-mode strong|causal|hierarchical ...],
  keyspace list
           create and list keyspaces (key prefixes with their own volumes,
           chain length and mode: strong, ChainReaction's causal+, or the
           NFSv4 paper's hierarchical control across sites)
  user add|del|passwd|grant|revoke|list, role add|del|grant|revoke|list
           users (client certificates, Redis passwords) and roles (read or
           readwrite per keyspace or key prefix); once a user exists every
           request is checked (docs/operations.md)
  certs ca -dir DIR, certs issue -dir DIR -role ROLE -name NAME
           create a cluster CA and certificates with a role (master,
           server, site, client, proxy) for TLS (docs/operations.md)
  backup -out DIR, restore -from DIR
           an online backup of a cluster, with checksums; loaded into a
           new cluster of any size (docs/operations.md)
  upgrade status, upgrade finalize
           what each process speaks; finalize a rolling upgrade
           (docs/upgrades.md)
  version  print the release, its protocol versions and the revision
           catena was built from (also catena --version)

Run 'catena help <command>' (or 'catena <command> -h') for the command's
flags. Flags may follow the arguments; every command with flags also
takes -config FILE. The simulator, benchmarks, experiments and torture
test are catena-lab's: go run ./cmd/catena-lab help.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// commandFunc runs the command name with its arguments.
type commandFunc func(name string, args []string, stdin io.Reader, stdout io.Writer) error

// commands are catena's commands by name; help is run's own.
var commands = map[string]commandFunc{
	"dev":      func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runDev(args, stdout) },
	"master":   func(_ string, args []string, _ io.Reader, _ io.Writer) error { return runMaster(args) },
	"server":   func(_ string, args []string, _ io.Reader, _ io.Writer) error { return runServer(args) },
	"proxy":    func(_ string, args []string, _ io.Reader, _ io.Writer) error { return runProxy(args) },
	"put":      runKV,
	"get":      runKV,
	"del":      runKV,
	"scan":     runKV,
	"ttl":      runKV,
	"expire":   runKV,
	"status":   runKV,
	"watch":    runWatch,
	"lease":    runLease,
	"certs":    func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runCerts(args, stdout) },
	"keyspace": func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runKeyspace(args, stdout) },
	"user":     runAuth,
	"role":     runAuth,
	"version":  func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runVersion(args, stdout) },
	"upgrade":  func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runUpgrade(args, stdout) },
	"backup":   func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runBackup(args, stdout) },
	"restore":  func(_ string, args []string, _ io.Reader, stdout io.Writer) error { return runRestore(args, stdout) },
	// The lab's, which run catena-lab or say where they went.
	"sim":        runLabCommand,
	"bench":      runLabCommand,
	"experiment": runLabCommand,
	"torture":    runLabCommand,
}

func runLabCommand(name string, args []string, _ io.Reader, _ io.Writer) error {
	return runLab(name, args)
}

// run runs the command in args and returns the process's exit status: 0
// on success and after -h, 2 for a mistake in how the command was called,
// 1 for any other failure.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		return runHelp(args, stdin, stdout, stderr)
	case "--version", "-version", "-v":
		name = "version"
	}
	command, ok := commands[name]
	if !ok {
		return cli.UnknownCommand(stderr, "catena", name, commandNames())
	}
	return cli.Exit(stdout, stderr, "catena", name, command(name, args, stdin, stdout))
}

// runHelp prints the usage, or given a command (and its verb: catena
// help user add) that command's, as catena COMMAND -h does.
func runHelp(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if _, ok := commands[args[0]]; !ok {
		return cli.UnknownCommand(stderr, "catena help", args[0], commandNames())
	}
	return run(append(slices.Clone(args), "-h"), stdin, stdout, stderr)
}

// commandNames lists the commands a typo may be meant for.
func commandNames() []string {
	return append(slices.Collect(maps.Keys(commands)), "help")
}
