package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/catena-kv/catena/internal/backup"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/release"
)

const backupDescription = `Takes an online backup of a cluster into -out while the cluster serves.
Each volume is read as one frozen state, at the chain member that answers
its updates (the tail; in a causal keyspace the k-th member), so every
write acknowledged before the backup began is in it, one volume after another,
at most -rate bytes a second; then the keyspaces and the users and roles
(with their password hashes: keep backups as safe as the cluster's
secrets) go into manifest.json with each volume file's SHA-256. A backup
that stops before its manifest is written resumes when run again with the
same -out: the volumes it finished are kept. With authorization on, use a
client certificate of a user with role admin. A deployment of several
sites is backed up site by site (docs/operations.md, "Backup and
restore").`

const restoreDescription = `Loads the backup in -from into a new, empty cluster (a new catena dev
directory, say): it checks every file against the manifest first and
refuses a partial or altered backup before writing anything; then it
creates the backup's keyspaces (the new cluster's default keyspace stands
for the old one's), writes every key with its deadline (keys whose
deadline has passed are left out), and adds the users and roles. The new
cluster places the keys over its own servers and volumes, whatever their
number; -max-replicas shortens chains for a cluster with fewer servers.
Exactly-once sessions are not restored: clients start new ones. -verify
only checks the backup.`

// runBackup runs catena backup.
func runBackup(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("backup", "catena backup -out DIR [-keyspaces a,b] [-rate 20MB] [flags]", backupDescription)
	cluster := registerClientFlags(fs)
	noTimeout(fs)
	out := fs.String("out", "", "the backup's directory (created; an unfinished backup there is resumed)")
	keyspaces := fs.String("keyspaces", "", "comma-separated keyspaces to back up (default: every one)")
	rate := fs.String("rate", "4M", "read at most this many bytes a second (suffixes K, M, G: powers of 1024; 0: no bound); at the default a backup raised the median p99 latency of a loaded 2-core machine by about 20% (docs/benchmarks.md); a machine with cores to spare takes more")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	if *out == "" {
		return cli.UsageErrorf("backup needs -out DIR")
	}
	bytesPerSecond, err := cli.ParseByteSize(*rate)
	if err != nil {
		return cli.UsageErrorf("-rate: %v", err)
	}
	var names []string
	if *keyspaces != "" {
		names = strings.Split(*keyspaces, ",")
	}
	ctx, cancel := commandContext(cluster)
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := backup.Run(ctx, backup.Options{Client: c, Dir: *out, Keyspaces: names, Rate: bytesPerSecond, Progress: stdout, Release: release.Version})
	if err != nil {
		return err
	}
	var objects int64
	for _, v := range m.Volumes {
		objects += v.Objects
	}
	fmt.Fprintf(stdout, "backup: done: %d keyspaces, %d volumes, %d objects in %s (%s)\n", len(m.Keyspaces), len(m.Volumes), objects, *out,
		m.Finished.Sub(m.Started).Round(1e6))
	return nil
}

// runRestore runs catena restore.
func runRestore(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("restore", "catena restore -from DIR [-verify] [-max-replicas N] [flags]", restoreDescription)
	cluster := registerClientFlags(fs)
	noTimeout(fs)
	from := fs.String("from", "", "the backup's directory")
	verify := fs.Bool("verify", false, "only check the backup: every file against the manifest")
	parallel := fs.Int("parallel", 32, "writes in flight at once")
	maxReplicas := fs.Int("max-replicas", 0, "create keyspaces with chains at most this long (0: as in the backup)")
	skipUsers := fs.Bool("skip-users", false, "leave the backup's users and roles out")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	switch {
	case *from == "":
		return cli.UsageErrorf("restore needs -from DIR")
	case *parallel < 1 || *maxReplicas < 0:
		return cli.UsageErrorf("-parallel must be at least 1 and -max-replicas not negative")
	}
	if *verify {
		m, err := backup.Verify(*from)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restore: %s is a whole backup: %d keyspaces, %d volumes, taken by catena %s from %s to %s\n", *from, len(m.Keyspaces), len(m.Volumes),
			m.Release, m.Started.Format("2006-01-02 15:04:05Z07:00"), m.Finished.Format("15:04:05Z07:00"))
		return nil
	}
	ctx, cancel := commandContext(cluster)
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := backup.Restore(ctx, backup.RestoreOptions{Client: c, Dir: *from, Parallel: *parallel, MaxReplicas: *maxReplicas, SkipUsers: *skipUsers, Progress: stdout})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restore: done: %d objects written, %d left out (expired), %d keyspaces created, %d roles and %d users added\n",
		st.Objects, st.Expired, st.Keyspaces, st.Roles, st.Users)
	return nil
}

// noTimeout makes a long command's -timeout default to none (0).
func noTimeout(fs *flag.FlagSet) {
	f := fs.Lookup("timeout")
	f.DefValue, f.Usage = "0s", "give up after this long (0: never)"
	if err := f.Value.Set("0s"); err != nil {
		panic(err)
	}
}

// commandContext is the context of a long command: bounded by -timeout
// when given, ended by SIGINT or SIGTERM.
func commandContext(f *clientFlags) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if *f.timeout <= 0 {
		return ctx, stop
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	return ctx, func() { cancel(); stop() }
}
