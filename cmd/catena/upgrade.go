package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
)

const upgradeSynopsis = "catena upgrade status [-json] [flags]\n       catena upgrade finalize [-version N] [flags]"

// runUpgrade shows what a cluster's processes speak, and finalizes a
// rolling upgrade (docs/upgrades.md).
func runUpgrade(args []string, stdout io.Writer) error {
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"status", "-h"}
	}
	if len(args) == 0 || (args[0] != "status" && args[0] != "finalize") {
		return cli.UsageErrorf("want status or finalize (usage: %s)", upgradeSynopsis)
	}
	verb, args := args[0], args[1:]
	fs := cli.NewFlagSet("upgrade", upgradeSynopsis, `Status shows the protocol version the cluster runs at, and the release and
protocol versions each master member and server speaks.

Finalize raises the cluster's protocol version once every master member
and server runs the new release (docs/upgrades.md): from then on the
cluster uses what the new version brings, and a process of an older
release that cannot speak it stops rather than join. Until then a
downgrade to the previous release works; after, it does not. Each
master member is asked, and the leader checks every server; a refusal
names the process that holds it back. Only an admin may finalize.`)
	cluster := registerClientFlags(fs)
	asJSON := fs.Bool("json", false, "status: print JSON")
	version := fs.Uint("version", 0, "finalize: the protocol version to run at (0: the newest every master member speaks)")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	ctx, cancel := cluster.context()
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if verb == "finalize" {
		before, err := c.Versions(ctx)
		if err != nil {
			return err
		}
		v, err := c.FinalizeUpgrade(ctx, uint32(*version))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cluster protocol version %d (was %d)\n", v, before.ClusterVersion)
		return nil
	}
	v, err := c.Versions(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, v)
	}
	printVersions(stdout, v)
	return nil
}

// printVersions prints a cluster's versions as a table.
func printVersions(w io.Writer, v *client.Versions) {
	fmt.Fprintf(w, "cluster protocol version %d\n", v.ClusterVersion)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tADDRESS\tRELEASE\tPROTOCOL\t")
	for _, m := range v.Masters {
		role := "master"
		if m.Addr == v.Leader {
			role = "master (leader)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", role, m.Addr, m.Release, protocolRange(m.MinProtocol, m.MaxProtocol))
	}
	for _, m := range v.Missing {
		fmt.Fprintf(tw, "master\t%s\t?\tdid not answer\t\n", m)
	}
	for _, s := range v.Servers {
		p := protocolRange(s.MinProtocol, s.MaxProtocol)
		if !s.Alive {
			p += " (down)"
		}
		fmt.Fprintf(tw, "server\t%s\t\t%s\t\n", s.Addr, p)
	}
	tw.Flush()
}

// protocolRange formats a range of protocol versions: "1", "1-2", or
// "?" when none was heard.
func protocolRange(lo, hi uint32) string {
	switch {
	case hi == 0:
		return "?"
	case lo == hi:
		return fmt.Sprint(lo)
	}
	return strings.Join([]string{fmt.Sprint(lo), fmt.Sprint(hi)}, "-")
}
