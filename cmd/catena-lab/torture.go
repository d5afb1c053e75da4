package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/torture"
)

// errVerdictFail is the error of a torture run whose verdict is FAIL: it
// has printed its summary, whose last line is the verdict, so main
// prints nothing more and exits with status 1.
var errVerdictFail = fmt.Errorf("verdict: FAIL: %w", cli.ErrFailureReported)

func runTorture(args []string, stdout io.Writer) error {
	d := torture.DefaultOptions
	fs := cli.NewFlagSet("torture", "catena-lab torture [flags]", `Runs a Jepsen-style fault test of the real binary: masters and servers,
each on its own host (a network namespace on a bridge), under a nemesis
that kills, pauses and partitions them, skews their clocks and fails
their disks on a plan drawn from -seed, while clients run registers
(reads, unique writes, compare-and-sets, increments) and a set workload
(appends of unique elements) and causal sessions (a causal keyspace).
With -sites, several whole clusters, the causal keyspace replicated by
all, messages between sites delayed as over a WAN, and sites crashed or
cut off too. Then it heals everything, reads every key again, and checks
the history: linearizability per key (porcupine), no acknowledged
element lost, causal+ and the same final values at every site. The last line is "verdict: ok" (exit
status 0) or "verdict: FAIL reason" (exit status 1). Needs root,
iproute2 and iptables (docs/torture.md).

With -upgrade-from OLD, a rolling upgrade: every process (and a Redis
proxy, with a client workload of its own) starts from the catena binary
OLD (catena-lab build-release makes one from this repository's history);
while the workloads run, each is stopped and started again from the new
binary, one at a time (servers, masters with the leader last, the
proxy), the cluster healthy between steps; then catena upgrade finalize.
-downgrade replaces every process back with OLD instead of finalizing.
No other fault unless -nemesis names some.

With -backup, the harness also takes backups of the cluster while the
faults go on (internal/backup), restores the last into a new cluster of
one master and one server at the end, and checks each backup and the
restored cluster against the history: every key's value one the key
could hold between the backup's start and end, every key acknowledged
before its start present.

With -split, the harness also splits the register and set workloads'
keyspace (catena keyspace split) once to three times while the faults
go on, at times drawn from -seed, and checks at the end that every
split finished and that every volume holds exactly the keys the final
keyspace map routes to it, with the values the final reads saw; the
keys that moved are checked for linearizability across the move like
any other.

With -watch, the harness also watches the register, counter and set keys
(client.Watch) from before the workloads start to the end, resuming each
watch from its position after any error and, now and then, mid-stream on
purpose, and checks that every acknowledged update was delivered exactly
once, in an order the history allows, and nothing else.`)
	duration := fs.Duration("duration", d.Duration, "how long the workload runs under faults")
	seed := fs.Uint64("seed", 0, "seed of the nemesis plan and the clients (0: a random one, printed)")
	nemesis := fs.String("nemesis", "all", "faults to draw from: a comma-separated list of all (every kind but the unsafe clock faults; the site kinds only with -sites), none, kill, pause, partition, clock, disk, site, or single kinds ("+kindNames()+")")
	out := fs.String("out", "", "directory for the results: summary and nemesis log, and on FAIL the history, porcupine's visualization and every process's log and data (default: a temporary directory, removed when the verdict is ok)")
	masters := fs.Int("masters", d.Masters, "master members (of each site): 1, 3 or 5")
	servers := fs.Int("servers", d.Servers, fmt.Sprintf("servers (of each site; with -sites, %d unless given)", sitesServers))
	volumes := fs.Int("volumes", d.Volumes, fmt.Sprintf("volumes (chains; of each site; with -sites, %d unless given)", sitesVolumes))
	sites := fs.Int("sites", d.Sites, "sites (whole clusters): above 1, the causal keyspace is replicated by every site, and the nemesis also crashes and cuts off whole sites (site-crash, site-partition)")
	wanRTT := fs.Duration("wan-rtt", d.WANRTT, "with -sites: the round trip between processes of different sites, emulated by delaying messages (± a twelfth)")
	replicas := fs.Int("replicas", d.Replicas, "replicas per volume")
	rate := fs.Float64("rate", d.Rate, "client operations per second, in all")
	subnet := fs.String("subnet", d.Subnet, "the hosts' /24, as three octets (the harness is .1, the hosts .11 on)")
	recovery := fs.Duration("recovery-timeout", d.RecoveryTimeout, "after healing, fail if the cluster is not healthy and every key readable within this")
	checkEnv := fs.Bool("check-env", false, "only report whether this machine can run the test (root, ip, iptables, network namespaces), and exit 0 if so")
	recheck := fs.String("recheck", "", "only check again the history a failed run saved in this directory (its history.jsonl), with -check-timeout for porcupine per key")
	checkTimeout := fs.Duration("check-timeout", d.CheckTimeout, "how long porcupine may spend on one key before the key counts as undecided (a FAIL)")
	catenaPath := fs.String("binary", "", "catena binary the hosts run (default: catena beside catena-lab, or one built from this source tree with catena-lab's build tags)")
	upgradeFrom := fs.String("upgrade-from", "", "the old catena binary: start every process from it and upgrade them to the new one (-binary) one at a time, under load, then finalize; -nemesis defaults to none, -servers to "+fmt.Sprint(upgradeServers))
	downgrade := fs.Bool("downgrade", false, "with -upgrade-from: once every process runs the new binary, replace each with the old one again (in the same order), and do not finalize")
	noFinalize := fs.Bool("no-finalize", false, "with -upgrade-from: leave out catena upgrade finalize")
	backups := fs.Bool("backup", false, "take backups under faults (one every eighth of -duration, 2 s to 30 s), restore the last into a new cluster at the end, and check them against the history; not with -upgrade-from")
	splits := fs.Bool("split", false, "split the workload's keyspace (the default one) once to three times under faults (one per 40 s of -duration at most, at times drawn from -seed), and check every split finished and every volume's contents; not with -upgrade-from")
	watches := fs.Bool("watch", false, "watch the register, counter and set keys throughout (resuming each watch from its position after errors and now and then on purpose), and check every acknowledged update was delivered once, in an order the history allows, and nothing else; not with -upgrade-from")
	cleanup := fs.Bool("cleanup", false, "only remove what a crashed run left (namespaces "+d.Prefix+"-*, their processes, the link "+d.Prefix+"-h)")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	if *checkEnv {
		if err := torture.CheckEnvironment(d.Prefix); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "catena-lab torture can run here")
		return nil
	}
	if *recheck != "" {
		ok, err := torture.Recheck(*recheck, *checkTimeout, stdout)
		switch {
		case err != nil:
			return err
		case !ok:
			fmt.Fprintln(stdout, "verdict: FAIL")
			return errVerdictFail
		}
		fmt.Fprintln(stdout, "verdict: ok")
		return nil
	}
	if *cleanup {
		removed, err := torture.RemoveLeftovers(d.Prefix)
		if len(removed) == 0 {
			removed = []string{"nothing"}
		}
		fmt.Fprintf(stdout, "removed %s\n", strings.Join(removed, ", "))
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *sites > 1 && !given["servers"] {
		*servers = sitesServers
	}
	if *sites > 1 && !given["volumes"] {
		*volumes = sitesVolumes
	}
	upgrade, err := upgradeOptions(*upgradeFrom, *downgrade, *noFinalize)
	if err != nil {
		return err
	}
	if upgrade != nil && !given["nemesis"] {
		*nemesis = "none"
	}
	if upgrade != nil && !given["servers"] {
		*servers = upgradeServers
	}
	kinds, err := torture.ParseKinds(*nemesis, *masters, *sites)
	if err != nil {
		return cli.UsageErrorf("-nemesis: %v", err)
	}
	if *seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		*seed = binary.LittleEndian.Uint64(b[:])>>1 | 1
	}
	o := d
	// The binary is found (or built) once the options are valid.
	o.Exe, o.PipeEnv, o.Stdout = cmp.Or(*catenaPath, "catena"), cli.DevPipeEnv, stdout
	o.Duration, o.Seed, o.Nemesis, o.Out = *duration, *seed, kinds, *out
	o.Masters, o.Servers, o.Volumes, o.Replicas, o.Rate = *masters, *servers, *volumes, *replicas, *rate
	o.Sites, o.WANRTT = *sites, *wanRTT
	o.Subnet, o.RecoveryTimeout, o.CheckTimeout = *subnet, *recovery, *checkTimeout
	o.Upgrade, o.Backup, o.Split, o.Watch = upgrade, *backups, *splits, *watches
	if err := o.Validate(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	removeBinary, err := orCatenaBinary(catenaPath)
	if err != nil {
		return err
	}
	defer removeBinary()
	o.Exe = *catenaPath
	// Ctrl-C, SIGTERM and SIGHUP end the run; it stops its processes and
	// removes its network before it returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := torture.Run(ctx, o)
	if err != nil {
		return err
	}
	if !res.OK {
		return errVerdictFail
	}
	return nil
}

// upgradeOptions returns the upgrade nemesis's options from the flags,
// nil without -upgrade-from; the old binary's path made absolute.
func upgradeOptions(from string, downgrade, noFinalize bool) (*torture.Upgrade, error) {
	if from == "" {
		if downgrade || noFinalize {
			return nil, cli.UsageErrorf("-downgrade and -no-finalize need -upgrade-from")
		}
		return nil, nil
	}
	old, err := filepath.Abs(from)
	if err != nil {
		return nil, err
	}
	if info, err := os.Stat(old); err != nil || info.IsDir() {
		return nil, cli.UsageErrorf("-upgrade-from %s: no such binary (catena-lab build-release -out PATH builds one)", from)
	}
	return &torture.Upgrade{Old: old, Downgrade: downgrade, NoFinalize: noFinalize}, nil
}

// upgradeServers is an upgrade run's servers unless -servers is given:
// issue 33's cluster of 3 masters and 4 servers.
const upgradeServers = 4

// A run of several sites has smaller sites than a run of one by default,
// so that three of them fit a small machine.
const (
	sitesServers = 3
	sitesVolumes = 4
)

func kindNames() string {
	var names []string
	for _, k := range torture.Kinds {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}
