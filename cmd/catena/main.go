// Command catena is the binary a Catena deployment runs. Subcommands:
//
//	catena dev       start a local cluster (a master, servers and a proxy as processes)
//	catena master    run the configuration master
//	catena server    run a storage server
//	catena proxy     serve the Redis protocol for a cluster
//	catena put|get|del|status   talk to a cluster
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
	"os"

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
  get KEY, del KEY
           read and write a cluster (default master ` + defaultMasterAddr + `)
  status   show the chain, each server's role, epoch and applied SN (-json)
  keyspace create NAME -prefix P [-mode strong|causal -k K ...], keyspace list
           create and list keyspaces (key prefixes with their own volumes,
           chain length and mode: strong, or ChainReaction's causal+)
  user add|del|passwd|grant|revoke|list, role add|del|grant|revoke|list
           users (client certificates, Redis passwords) and roles (read or
           readwrite per keyspace or key prefix); once a user exists every
           request is checked (docs/operations.md)
  certs ca -dir DIR, certs issue -dir DIR -role ROLE -name NAME
           create a cluster CA and certificates with a role (master,
           server, site, client, proxy) for TLS (docs/operations.md)
  version  print the version and the revision catena was built from

Run 'catena <command> -h' for the command's flags. Flags may follow the
arguments; every command with flags also takes -config FILE. The
simulator, benchmarks, experiments and torture test are catena-lab's:
go run ./cmd/catena-lab -h.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command in args and returns the process's exit status: 0
// on success and after -h, 2 for a mistake in how the command was called,
// 1 for any other failure.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, args := args[0], args[1:]; cmd {
	case "dev":
		err = runDev(args, stdout)
	case "master":
		err = runMaster(args)
	case "server":
		err = runServer(args)
	case "proxy":
		err = runProxy(args)
	case "put", "get", "del", "status":
		err = runKV(cmd, args, stdin, stdout)
	case "certs":
		err = runCerts(args, stdout)
	case "keyspace":
		err = runKeyspace(args, stdout)
	case "user", "role":
		err = runAuth(cmd, args, stdin, stdout)
	case "version":
		err = runVersion(args, stdout)
	case "sim", "bench", "experiment", "torture":
		err = runLab(cmd, args)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "catena: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return cli.Exit(stderr, "catena", args[0], err)
}
