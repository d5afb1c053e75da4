// Package experiment reproduces the papers' experiments with Catena's own
// models, deterministically from a seed, and writes their data and plots.
//
// fig7 is CR §5.4's Figure 7: the mean time between unavailability (MTBU)
// of any volume as a function of the number of servers and the chain
// length, for ring, rndseq and rndpar placement. See docs/experiments.md.
package experiment

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names lists the experiments Run knows.
var Names = []string{"fig7"}

// Options configure a run of an experiment.
type Options struct {
	Out      string // directory for the data and plot files; created if missing
	Quick    bool   // a small subset that runs in seconds
	Seed     uint64 // every random choice derives from it
	Workers  int    // replications run in parallel; 0 means one per CPU
	Progress io.Writer
	// ProgressEvery is the longest time between progress lines; 0 means 5 s.
	ProgressEvery time.Duration
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
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	cfg := Fig7Config{Seed: o.Seed, Quick: o.Quick, Workers: o.Workers, Progress: progress, ProgressEvery: o.ProgressEvery}
	start := time.Now()
	points, err := RunFig7(cfg)
	if err != nil {
		return err
	}
	csvPath, pngPath := filepath.Join(o.Out, "fig7.csv"), filepath.Join(o.Out, "fig7.png")
	f, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	if err := WriteFig7CSV(f, points); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := PlotFig7(pngPath, points, cfg.title()); err != nil {
		return err
	}
	fmt.Fprintf(progress, "fig7: wrote %s and %s in %s\n", csvPath, pngPath, time.Since(start).Round(100*time.Millisecond))
	return nil
}
