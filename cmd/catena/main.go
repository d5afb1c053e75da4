// Command catena is Catena's single binary. Subcommands:
//
//	catena dev       start a local cluster (a master, servers and a proxy as processes)
//	catena master    run the configuration master
//	catena server    run a storage server
//	catena proxy     serve the Redis protocol for a cluster
//	catena put|get|del|status   talk to a cluster
//	catena user|role  manage users and roles (authorization)
//	catena certs     create a cluster CA and certificates for TLS
//	catena sim       run seeded simulations of the chain protocol under faults
//	catena bench     compare Catena with etcd and Redis
//	catena experiment   reproduce a paper's experiment
//	catena torture   fault-test real processes in network namespaces
//	catena version   print the version and the revision it was built from
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/catena-kv/catena/internal/experiment"
)

// usage is the top-level help. The experiments come from the experiment
// registry, so a new one is listed without editing this text.
func usage() string {
	return `usage: catena <command> [arguments] [flags]

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
  sim      run seeded deterministic simulations of a chain under faults and
           check each run (invariants, linearizability, no lost update)
  bench    'bench compare': YCSB against etcd and Redis (docs/benchmarks.md)
  experiment NAME --out DIR
           reproduce a paper's experiment by simulation (docs/experiments.md);
           NAME is one of ` + strings.Join(experiment.Names, ", ") + `
  torture  run a fault test of real processes in network namespaces:
           kills, pauses and partitions under a checked workload
           (docs/torture.md; needs root)
  version  print the version and the revision catena was built from

Run 'catena <command> -h' for the command's flags. Flags may follow the
arguments; every command with flags also takes -config FILE.
`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command in args and returns the process's exit status: 0
// on success and after -h, 2 for a mistake in how the command was called,
// 1 for any other failure.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	var err error
	switch cmd, args := args[0], args[1:]; cmd {
	case "sim":
		err = runSim(args, stdout)
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
	case "bench":
		err = runBench(args, stdout)
	case "experiment":
		err = runExperiment(args, stdout)
	case "torture":
		err = runTorture(args, stdout)
	case "version":
		err = runVersion(args, stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage())
		return 0
	default:
		fmt.Fprintf(stderr, "catena: unknown command %q\n\n%s", cmd, usage())
		return 2
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagsReported):
		return 2
	case errors.Is(err, errVerdictFail):
		return 1
	}
	// Errors from the client package start with "catena: " already.
	fmt.Fprintf(stderr, "catena %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "catena: "))
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}
