// Package experiment reproduces the papers' experiments with Catena's own
// models, deterministically from a seed, and writes their data and plots.
//
// fig4, fig5 and fig6 are CR §5.1-5.3's throughput experiments, bcr is the
// BCR paper's §5, chainreaction-fig2b and chainreaction-fig5 are
// ChainReaction's single-site experiments (§VII-A Figure 2(b), §VII-D
// Figure 5) on Catena's causal mode, and chainreaction-fig3 and
// chainreaction-fig4 its two-site experiments (§VII-B Figure 3(a), §VII-C
// Figure 4: GET-TRANSACTIONs) on the causal mode across sites: they run Catena's protocol code in
// the deterministic simulator with modelled service times (sim.RunLoad).
// nfsv4-fig6, nfsv4-fig7 and nfsv4-fig8 are the NFSv4 paper's §4 (Figs.
// 5-8): a build-like workload under Catena's hierarchical replication
// control (internal/control) across modelled sites (nfsv4.go).
// fig7 is CR §5.4's Figure 7: the mean time between unavailability (MTBU)
// of any volume as a function of the number of servers and the chain
// length, for ring, rndseq and rndpar placement, from a model of failures
// and recovery bandwidth in which Catena's own placement policy
// (internal/placement, the functions the master runs) places volumes and
// decides every recovery. scaleout is Catena's own (issue 34): a
// keyspace's throughput as servers join, with and without splitting its
// volumes, on the protocol code with CR §5's modelled costs (scaleout.go).
// See docs/experiments.md.
package experiment

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Names lists the experiments Run knows, in the papers' order.
var Names = []string{"fig4", "fig5", "fig6", "fig7", "bcr", "chainreaction-fig2b", "chainreaction-fig3", "chainreaction-fig4", "chainreaction-fig5",
	"nfsv4-fig6", "nfsv4-fig7", "nfsv4-fig8", "scaleout"}

// runners runs each experiment: it writes NAME.csv and NAME.png into
// o.Out (which exists) and reports progress on o.Progress.
var runners = map[string]func(o Options) error{
	"fig4": runFig4,
	"fig5": runFig5,
	"fig6": runFig6,
	"fig7": runFig7,
	"bcr":  runBCR,

	"chainreaction-fig2b": runCRFig2b,
	"chainreaction-fig3":  runCRFig3,
	"chainreaction-fig4":  runCRFig4,
	"chainreaction-fig5":  runCRFig5,

	"nfsv4-fig6": runNFSv4Fig6,
	"nfsv4-fig7": runNFSv4Fig7,
	"nfsv4-fig8": runNFSv4Fig8,

	"scaleout": runScaleoutExperiment,
}

// Options configure a run of an experiment.
type Options struct {
	Out      string // directory for the data and plot files; created if missing
	Quick    bool   // a small subset that runs in seconds
	Seed     uint64 // every random choice derives from it
	Workers  int    // runs in parallel; 0 means one per CPU
	Progress io.Writer
	// ProgressEvery is the longest time between progress lines; 0 means 5 s.
	ProgressEvery time.Duration
	// RecoveryPerServerMax is, for fig7, the master's budget of transfers
	// per server (Model.RecoveryPerServerMax); 0 means the master's
	// default.
	RecoveryPerServerMax int
}

// Run runs the experiment called name and writes its files into o.Out.
func Run(name string, o Options) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("unknown experiment %q (known: %s)", name, strings.Join(Names, ", "))
	}
	if o.Out == "" {
		return fmt.Errorf("no output directory: --out DIR is required")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Workers <= 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	start := time.Now()
	if err := runners[name](o); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "%s: wrote %s and %s in %s\n", name, filepath.Join(o.Out, name+".csv"), filepath.Join(o.Out, name+".png"), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runFig7(o Options) error {
	cfg := Fig7Config{Seed: o.Seed, Quick: o.Quick, Workers: o.Workers, Progress: o.Progress, ProgressEvery: o.ProgressEvery,
		RecoveryPerServerMax: o.RecoveryPerServerMax}
	points, err := RunFig7(cfg)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Out, "fig7.csv"), func(w io.Writer) error { return WriteFig7CSV(w, points) }); err != nil {
		return err
	}
	return PlotFig7(filepath.Join(o.Out, "fig7.png"), points, cfg.title())
}
