package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

func runSim(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("sim", "catena-lab sim [flags]", `Runs seeded deterministic simulations of chains under faults and checks
every run: CR §3's invariants after every step, linearizability, no lost
acknowledged update, recovery once faults stop.`)
	seeds := fs.Int("seeds", 100, "number of seeded runs")
	first := fs.Uint64("first-seed", 1, "first seed; runs use first-seed .. first-seed+seeds-1")
	seed := fs.Uint64("seed", 0, "replay this one seed (overrides -seeds), printing its faults")
	faults := fs.Bool("faults", false, "inject random faults (crashes of head, middle, tail and joining servers, a crash during recovery, false suspicion, broken links, one-way links between chain neighbours)")
	chainLength := fs.Int("chain", 0, "chain length; 0 alternates 3 and 5 by seed")
	clients := fs.Int("clients", sim.DefaultOptions.Clients, "concurrent clients")
	masters := fs.Int("masters", 1, "master members: 1 (single master) or 3, 5 (Raft-replicated, with master faults)")
	servers := fs.Int("servers", 0, "servers (0: chain length + 2 spares)")
	volumes := fs.Int("volumes", 0, "volumes (chains) keys hash to (0: 1, or in causal mode 1..3 drawn per seed)")
	strategy := fs.String("placement", "", "placement strategy: ring, random, random-seq, bidirectional, rotated (default: random with more than one volume)")
	workers := fs.Int("workers", runtime.NumCPU(), "seeds run in parallel")
	trace := fs.Bool("trace", false, "with -seed: print every simulated event")
	printTraces := fs.Bool("print-traces", false, "print each seed's trace hash (a hash of every processed event), so two builds can be shown to run identically")
	craq := fs.Bool("craq-reads", false, "clients read from any chain member (CRAQ): clean keys there, dirty ones at the tail")
	scans := fs.Bool("scans", false, "strong mode: read-write clients also walk whole scans (every 8th operation, pages of 2 keys), checked against Redis's SCAN promise: every key that exists throughout is listed")
	splits := fs.Bool("splits", false, "strong mode, one site: split the default keyspace once or twice during the fault phase, doubling its volumes while clients read and write (docs/adr/0031); every chain, the new ones included, and every key's history across the move are checked")
	watches := fs.Bool("watch", false, "strong mode, one site: watchers follow every volume with long polls (docs/adr/0032) through the faults and splits; each stream is checked against the volumes' final histories: every update that changed a key, once, in SN order, as it was, and nothing the chain lost")
	backups := fs.Bool("backups", false, "strong or causal mode, one site: read-write clients also read whole volumes as a backup does (every 8th operation, pages of 2 objects), each checked against the history: every key that exists throughout is held, only keys some write created, one SN per read")
	expiry := fs.Bool("expiry", false, "strong mode: read-write clients also write keys with TTLs of 100-600 ms, each once, and read them back, with every clock started up to a quarter of the 100 ms bound off; checked against ADR 28's rule (a read after the deadline plus the bound never finds the key, one before it less the bound always does) and the keys' reclamation")
	hashes := fs.Bool("hashes", false, "strong mode: a fifth of the read-write clients' operations are a hash's (HSET, HSETNX, HDEL, HINCRBY, HGET) on the same keys as the strings', so WRONGTYPE happens both ways; checked for linearizability")
	mode := fs.String("mode", "strong", "keyspace mode: strong, causal (ChainReaction: k drawn per seed unless -k; checked for causal+) or hierarchical (the NFSv4 paper's control across -sites, 3 unless given; durable or relaxed by seed; checked for linearizability)")
	k := fs.Int("k", 0, "with -mode causal: updates are answered after the first k members (0: drawn per seed from 1..t)")
	loops := fs.Int("loops", 1, "event loops per server process, as catena server -loops runs them (volume v on loop v mod loops); one site only")
	sites := fs.Int("sites", 1, "sites (whole clusters) replicating the keyspace; above 1 runs ChainReaction's geo mode (-mode causal, implied) or -mode hierarchical")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	if *seeds < 1 || *workers < 1 || *clients < 1 || *chainLength < 0 {
		return errors.New("-seeds, -workers and -clients must be positive and -chain not negative")
	}
	if *masters != 1 && *masters != 3 && *masters != 5 {
		return errors.New("-masters must be 1, 3 or 5")
	}
	if *volumes < 0 || *servers < 0 {
		return errors.New("-volumes and -servers must not be negative")
	}
	if *sites < 1 || *sites > 26 {
		return errors.New("-sites must be 1..26")
	}
	if *loops < 1 || *loops > 1 && *sites > 1 {
		return errors.New("-loops must be positive, and 1 with several sites (a server of several sites runs one event loop)")
	}
	m, err := wire.ParseMode(*mode)
	if err != nil {
		return err
	}
	if *k < 0 || *k > 0 && m != wire.ModeCausal {
		return errors.New("-k needs -mode causal and must not be negative")
	}
	if *k > 0 && *chainLength > 0 && *k > *chainLength {
		return fmt.Errorf("-k %d exceeds the chain length %d", *k, *chainLength)
	}
	var place placement.Strategy
	if *strategy != "" {
		p, err := placement.Parse(*strategy)
		if err != nil {
			return err
		}
		place = p
	}
	if *scans && (m != wire.ModeStrong || *sites > 1) {
		return errors.New("-scans needs -mode strong at one site")
	}
	if *backups && (m == wire.ModeHierarchical || *sites > 1) {
		return errors.New("-backups needs -mode strong or causal at one site")
	}
	if *watches && (m != wire.ModeStrong || *sites > 1) {
		return errors.New("-watch needs -mode strong at one site: watches of causal and hierarchical keyspaces are not built (docs/adr/0032)")
	}
	if *splits && (m != wire.ModeStrong || *sites > 1) {
		return errors.New("-splits needs -mode strong at one site: only strong keyspaces split (docs/adr/0031)")
	}
	if *hashes && (m != wire.ModeStrong || *sites > 1) {
		return errors.New("-hashes needs -mode strong at one site")
	}
	if *expiry && (m != wire.ModeStrong || *sites > 1) {
		return errors.New("-expiry needs -mode strong at one site: keys of causal and hierarchical keyspaces do not expire (docs/adr/0028)")
	}
	base := sim.Options{Faults: *faults, ChainLength: *chainLength, Clients: *clients, Masters: *masters, CRAQReads: *craq, Scans: *scans, Backups: *backups, Splits: *splits, Watches: *watches, Expiry: *expiry, Hashes: *hashes,
		Servers: *servers, Volumes: *volumes, Placement: place, ViolationDir: os.TempDir(),
		Causal: m == wire.ModeCausal || *sites > 1 && m != wire.ModeHierarchical, K: *k, Sites: *sites, Hierarchical: m == wire.ModeHierarchical, Loops: *loops}
	if *seed != 0 {
		o := base
		o.Seed = *seed
		if *trace {
			o.Trace = func(line string) { fmt.Fprintln(stdout, line) }
		}
		r := sim.Run(o)
		for _, f := range r.Faults {
			fmt.Fprintf(stdout, "  fault %s\n", f)
		}
		scansChecked := ""
		if o.Scans {
			scansChecked = fmt.Sprintf(", %d whole scans", r.Scans)
		}
		if o.Backups {
			scansChecked += fmt.Sprintf(", %d volumes exported", r.Exports)
		}
		if o.Expiry {
			scansChecked += fmt.Sprintf(", %d keys that expire read %d times", r.ExpiryKeys, r.ExpiryReads)
		}
		if o.Splits {
			scansChecked += fmt.Sprintf(", split into %d volumes", r.Volumes)
		}
		if o.Watches {
			scansChecked += fmt.Sprintf(", %d watch events", r.WatchEvents)
		}
		fmt.Fprintf(stdout, "seed %d: %d operations (%d outcome unknown)%s, %.1fs simulated, %d catch-ups, %d snapshots, trace %016x\n",
			r.Seed, r.Operations, r.Unknown, scansChecked, float64(r.Elapsed)/1e9, r.CatchUps, r.Snapshots, r.Trace)
		if r.Err != nil {
			fmt.Fprintf(stdout, "FAIL seed %d:\n%v\n0 passed, 1 failed\n", r.Seed, r.Err)
			return errors.New("simulation failed")
		}
		fmt.Fprintln(stdout, "1 passed, 0 failed")
		return nil
	}

	results := make(chan sim.Result)
	next := make(chan uint64)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for s := range next {
				o := base
				o.Seed = s
				results <- sim.Run(o)
			}
		})
	}
	go func() {
		for s := *first; s < *first+uint64(*seeds); s++ {
			next <- s
		}
		close(next)
		wg.Wait()
		close(results)
	}()

	start := time.Now()
	passed, failed, done, ops, catchUps, snapshots := 0, 0, 0, 0, 0, 0
	lastProgress := time.Now()
	for r := range results {
		done++
		ops += r.Operations
		catchUps += r.CatchUps
		snapshots += r.Snapshots
		if *printTraces {
			fmt.Fprintf(stdout, "trace seed %d %016x\n", r.Seed, r.Trace)
		}
		if r.Err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL seed %d: %v\n  replay: go run ./cmd/catena-lab sim -seed %d%s\n", r.Seed, r.Err, r.Seed, replayFlags(base))
		} else {
			passed++
		}
		if time.Since(lastProgress) > 2*time.Second || done == *seeds {
			lastProgress = time.Now()
			fmt.Fprintf(stdout, "progress: %d/%d seeds, %d failed, %d operations checked, %s\n", done, *seeds, failed, ops, time.Since(start).Round(time.Second))
		}
	}
	fmt.Fprintf(stdout, "joining servers: %d caught up, %d took a snapshot\n", catchUps, snapshots)
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d seeds failed", failed, *seeds)
	}
	return nil
}

func replayFlags(o sim.Options) string {
	s := ""
	if o.Faults {
		s += " -faults"
	}
	if o.ChainLength != 0 {
		s += fmt.Sprintf(" -chain %d", o.ChainLength)
	}
	if o.Masters != 1 {
		s += fmt.Sprintf(" -masters %d", o.Masters)
	}
	if o.Servers != 0 {
		s += fmt.Sprintf(" -servers %d", o.Servers)
	}
	if o.Volumes != 0 {
		s += fmt.Sprintf(" -volumes %d", o.Volumes)
	}
	if o.Loops > 1 {
		s += fmt.Sprintf(" -loops %d", o.Loops)
	}
	if o.Placement != "" {
		s += fmt.Sprintf(" -placement %s", o.Placement)
	}
	if o.CRAQReads {
		s += " -craq-reads"
	}
	if o.Scans {
		s += " -scans"
	}
	if o.Backups {
		s += " -backups"
	}
	if o.Splits {
		s += " -splits"
	}
	if o.Watches {
		s += " -watch"
	}
	if o.Expiry {
		s += " -expiry"
	}
	if o.Hashes {
		s += " -hashes"
	}
	if o.Clients != sim.DefaultOptions.Clients {
		s += fmt.Sprintf(" -clients %d", o.Clients)
	}
	if o.Causal {
		s += " -mode causal"
	}
	if o.Hierarchical {
		s += " -mode hierarchical"
	}
	if o.K != 0 {
		s += fmt.Sprintf(" -k %d", o.K)
	}
	if o.Sites > 1 {
		s += fmt.Sprintf(" -sites %d", o.Sites)
	}
	return s
}
