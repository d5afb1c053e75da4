// Command catena is Catena's single binary. Subcommands:
//
//	catena sim   run seeded simulations of the chain protocol under faults
package main

import (
	"fmt"
	"os"
)

const usage = `usage: catena <command> [flags]

commands:
  sim    run seeded deterministic simulations of a chain under faults and
         check each run (invariants, linearizability, no lost update)

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
