package main

import (
	"errors"
	"io"
	"runtime"
	"strings"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/experiment"
)

// experimentDescription describes each experiment for catena-lab experiment
// -h; TestExperimentUsageNamesEveryExperiment keeps it in step with the
// registry (experiment.Names).
const experimentDescription = `Reproduces a paper's experiment (or measures one of Catena's own features)
with Catena's own deterministic simulation and writes its data (DIR/NAME.csv)
and plot (DIR/NAME.png). Experiments:
  fig4   CR §5.1 Figure 4: throughput vs update percentage for chain,
         primary/backup and weak reads, t = 2, 3, 10
  fig5   CR §5.2 Figure 5: per-client throughput vs number of servers,
         5000 volumes, t = 3
  fig6   CR §5.3 Figure 6: throughput over 2 hours with one and two
         failures at 00:30 (Table 1's parameters)
  fig7   CR §5.4 Figure 7: MTBU vs number of servers for ring, rndseq and
         rndpar placement, t = 1..4
  bcr    BCR §5: throughput of CR, BCR and four rotated chains on four
         servers, 200 to 500 clients
  chainreaction-fig2b  ChainReaction §VII-A Figure 2(b): one object,
         R = 6, k = 3, write/read mixes 50/50 to 0/100: causal vs strong
         chains of 3 and 6 vs CRAQ reads
  chainreaction-fig3  ChainReaction §VII-B Figure 3(a): YCSB A, B, C, D,
         F on 2 sites × 4 servers, 120 ms RTT: causal across sites
         (R = 4, k = 2) vs k = R (CR-L, reads at any member or at the
         tail) vs strong chains spanning the sites vs strong chains per
         site; per-site latency, shipping lag
  chainreaction-fig4  ChainReaction §VII-C Figure 4: GET-TRANSACTIONs of
         2-5 keys in write/read/GT mixes 10/85/5, 5/90/5, 0/95/5 on the
         same two sites: throughput, latency, rounds of reads
  chainreaction-fig5  ChainReaction §VII-D Figure 5: throughput over
         140 s, one object, R = 6, k = 3, a server killed at 60 s in
         positions 1..k or after k
  nfsv4-fig6  NFSv4 paper §4 Figures 5 and 6: a build-like workload
         (SSH-Build's unpack, configure, build) with a second site at
         0.2-120 ms: one local or remote server, fine-grained vs
         hierarchical control, a strong chain across sites, causal-geo
  nfsv4-fig7  NFSv4 paper §4 Figure 7: hierarchical control with idle
         times 0.1, 0.5, 1 s, per phase
  nfsv4-fig8  NFSv4 paper §4 Figure 8: 2 to 7 sites, 0.2 ms or 120 ms
         apart, idle 1 s
  scaleout  issue 34: a keyspace's throughput as 3 servers join 3, with
         and without splitting its 3 volumes (twice) under saturating
         load, 100% and 50% updates; chains per server per phase
See docs/experiments.md.`

func runExperiment(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("experiment", "catena-lab experiment NAME --out DIR [--quick] [--seed S] [--workers W] [--recovery-parallel B]", experimentDescription)
	out := fs.String("out", "", "directory for the experiment's files (required)")
	quick := fs.Bool("quick", false, "run a small subset in seconds instead of the full grid")
	seed := fs.Uint64("seed", 1, "seed of every random choice; the same seed gives the same files")
	workers := fs.Int("workers", runtime.NumCPU(), "simulations run in parallel (the result does not depend on it)")
	recoveryParallel := fs.Int("recovery-parallel", 0, "fig7 only: state transfers a server takes part in at once, as catena master's flag (0: the master's default)")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return cli.UsageErrorf("missing experiment name (known: %s); usage: catena-lab experiment NAME --out DIR [--quick] [--seed S]", strings.Join(experiment.Names, ", "))
	}
	if len(args) > 1 {
		return cli.UsageErrorf("unexpected arguments %q", args[1:])
	}
	if *workers < 1 {
		return errors.New("--workers must be positive")
	}
	if *recoveryParallel < 0 {
		return errors.New("--recovery-parallel must not be negative")
	}
	return experiment.Run(args[0], experiment.Options{Out: *out, Quick: *quick, Seed: *seed, Workers: *workers, Progress: stdout,
		RecoveryPerServerMax: *recoveryParallel})
}
