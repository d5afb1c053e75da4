package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/catena-kv/catena/internal/experiment"
)

const experimentUsage = `usage: catena experiment NAME --out DIR [--quick] [--seed S] [--workers W]

Reproduces a paper's experiment with Catena's own deterministic simulation
and writes its data (CSV) and plot (PNG) into DIR. Experiments:
  fig7   CR §5.4 Figure 7: MTBU vs number of servers for ring, rndseq and
         rndpar placement, t = 1..4 (DIR/fig7.csv, DIR/fig7.png)
See docs/experiments.md.

flags:
`

func runExperiment(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("experiment", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), experimentUsage)
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "directory for the experiment's files (required)")
	quick := fs.Bool("quick", false, "run a small subset in seconds instead of the full grid")
	seed := fs.Uint64("seed", 1, "seed of every random choice; the same seed gives the same files")
	workers := fs.Int("workers", runtime.NumCPU(), "replications run in parallel (the result does not depend on it)")
	// The name comes first (catena experiment fig7 --out DIR), but flags
	// before it work too.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	rest := fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	if name == "" {
		return fmt.Errorf("missing experiment name (known: %s); usage: catena experiment NAME --out DIR [--quick] [--seed S]", strings.Join(experiment.Names, ", "))
	}
	if *workers < 1 {
		return errors.New("--workers must be positive")
	}
	return experiment.Run(name, experiment.Options{Out: *out, Quick: *quick, Seed: *seed, Workers: *workers, Progress: stdout})
}
