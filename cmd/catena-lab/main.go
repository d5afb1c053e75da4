// Command catena-lab runs Catena's lab: the simulator, the benchmarks,
// the papers' experiments and the torture test. Subcommands:
//
//	catena-lab sim         run seeded simulations of the chain protocol under faults
//	catena-lab bench       compare Catena with etcd and Redis
//	catena-lab experiment  reproduce a paper's experiment
//	catena-lab torture     fault-test real processes in network namespaces
//	catena-lab build-release  build the catena binary of an earlier commit (an upgrade test's old binary)
//
// They live apart from cmd/catena, the binary a deployment runs, so that
// it links none of their dependencies (go-ycsb, gonum, the etcd client,
// gRPC). The harnesses that start a cluster (bench, torture) run the
// catena binary beside catena-lab (catenaBinary).
package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/experiment"
)

// usage is the top-level help. The experiments come from the experiment
// registry, so a new one is listed without editing this text.
func usage() string {
	return `usage: catena-lab <command> [arguments] [flags]

commands:
  sim      run seeded deterministic simulations of a chain under faults and
           check each run (invariants, linearizability, no lost update)
  bench    'bench compare': YCSB against etcd and Redis (docs/benchmarks.md)
  experiment NAME --out DIR
           reproduce a paper's experiment by simulation (docs/experiments.md);
           NAME is one of ` + strings.Join(experiment.Names, ", ") + `
  torture  run a fault test of real processes in network namespaces:
           kills, pauses and partitions under a checked workload, or a
           rolling upgrade from an old binary (docs/torture.md; needs root)
  build-release -out PATH [-commit REV]
           build the catena binary of an earlier commit of this repository
           (default: the base release, internal/release/base.txt)

Run 'catena-lab <command> -h' for the command's flags. Flags may follow
the arguments; every command also takes -config FILE. bench and torture
run the catena binary beside catena-lab (go build -o DIR/ ./cmd/catena
./cmd/catena-lab), or build one from this source tree.
`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// commands are catena-lab's commands by name; help is run's own.
var commands = map[string]func(args []string, stdout io.Writer) error{
	"sim":           runSim,
	"bench":         runBench,
	"experiment":    runExperiment,
	"torture":       runTorture,
	"build-release": runBuildRelease,
}

// run runs the command in args and returns the process's exit status: 0
// on success and after -h, 2 for a mistake in how the command was called,
// 1 for any other failure.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name, args := args[0], args[1:]
	if cli.IsHelp(name) {
		return runHelp(args, stdout, stderr)
	}
	command, ok := commands[name]
	if !ok {
		return cli.UnknownCommand(stderr, "catena-lab", name, commandNames())
	}
	return cli.Exit(stdout, stderr, "catena-lab", name, command(args, stdout))
}

// runHelp prints the usage, or given a command that command's, as
// catena-lab COMMAND -h does.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" {
		fmt.Fprint(stdout, usage())
		return 0
	}
	if _, ok := commands[args[0]]; !ok {
		return cli.UnknownCommand(stderr, "catena-lab help", args[0], commandNames())
	}
	return run(append(slices.Clone(args), "-h"), stdout, stderr)
}

// commandNames lists the commands a typo may be meant for.
func commandNames() []string {
	return append(slices.Collect(maps.Keys(commands)), "help")
}
