// Command catena is Catena's single binary. Subcommands:
//
//	catena dev       start a local cluster (a master and servers as processes)
//	catena master    run the configuration master
//	catena server    run a storage server
//	catena put|get|del|status   talk to a cluster
//	catena sim       run seeded simulations of the chain protocol under faults
package main

import (
	"fmt"
	"os"
)

const usage = `usage: catena <command> [flags]

commands:
  dev      start a local cluster: a master and 3 servers as separate processes
  master   run the configuration master
  server   run a storage server
  put KEY VALUE, get KEY, del KEY
           read and write a cluster (default master 127.0.0.1:7100)
  status   show the chain, each server's role, epoch and applied SN
  sim      run seeded deterministic simulations of a chain under faults and
           check each run (invariants, linearizability, no lost update)
  bench    'bench compare': YCSB against etcd and Redis (docs/benchmarks.md)
  experiment fig7 --out DIR   reproduce CR Figure 7 (MTBU by placement) by simulation (docs/experiments.md)

Run 'catena <command> -h' for the command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "sim":
		err = runSim(args, os.Stdout)
	case "dev":
		err = runDev(args, os.Stdout)
	case "master":
		err = runMaster(args)
	case "server":
		err = runServer(args)
	case "put", "get", "del", "status":
		err = runKV(cmd, args, os.Stdout)
	case "bench":
		err = runBench(args, os.Stdout)
	case "experiment":
		err = runExperiment(args, os.Stdout)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "catena: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "catena %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
