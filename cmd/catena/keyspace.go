package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/wire"
)

const keyspaceSynopsis = "catena keyspace create NAME -prefix PREFIX [-mode strong|causal|hierarchical] [-k K] [-replicas T] [-volumes N] [-sites ID,ID,...] [-depth D] [-relaxed] [-idle DURATION] [flags]\n       catena keyspace list [flags]\n       catena keyspace grace NAME -sites ID,ID,... [flags]\n       catena keyspace reassign NAME -sites ID,... [flags]\n       catena keyspace split NAME [-wait] [flags]"

// runKeyspace creates and lists keyspaces: named key prefixes with their
// own volumes, chain length and mode, kept by the master.
func runKeyspace(args []string, stdout io.Writer) error {
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"list", "-h"} // every verb's usage is the command's
	}
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "grace" && args[0] != "reassign" && args[0] != "split" && !strings.HasPrefix(args[0], "-")) {
		return cli.UsageErrorf("want create, list, grace, reassign or split (usage: %s)", keyspaceSynopsis)
	}
	verb := "list"
	if !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs := cli.NewFlagSet("keyspace", keyspaceSynopsis, `Creates a keyspace, or lists them. Keys that start with a keyspace's prefix
belong to it; the others to the default keyspace. A keyspace's prefix must
not be a prefix of another's, nor have one as its prefix. Mode strong is
chain replication (linearizable); mode causal is ChainReaction's causal+:
updates are answered once the first k replicas hold them, and reads go to
any replica the client may safely read from. In a deployment of several
sites, -sites names the sites that replicate the keyspace (each keeps a
sibling chain per volume and ships its updates to the others); it needs
mode causal or hierarchical; create creates the keyspace at every site
it names, this one first and then each other through its masters
(creating one that exists with the same settings succeeds). Mode hierarchical keeps one copy's
semantics across the sites (the NFSv4 paper's replication control): the
site writing a key, or a whole key prefix ('/' separates path segments),
is elected its primary by a majority of the sites and writes at local
speed until it has been idle for -idle; the others forward to it. Its
prefix must end in '/', keys are placed by their first -depth segments,
and a write is answered once a majority of the sites hold it, or with
-relaxed once the primary holds it (docs/adr/0016).

Grace forces the active view of a hierarchical keyspace to the sites
-sites (this one and a majority of the keyspace's sites among them)
without the majority a view change needs: the grace period after a
majority of the sites failed at once, when the surviving sites cannot
change the view and keep waiting for the failed ones. Run it at one
surviving site; the sites left out must be resynchronised before they
rejoin (docs/operations.md).

Reassign gives up the writes that only the sites -sites (failed, outside
the active view) hold of a relaxed hierarchical keyspace, whose keys they
controlled stay inaccessible otherwise: this site takes their keys over,
and they give those writes up when they return. Run it at every other
site of the view.

Split doubles a strong keyspace's volumes while it serves: each volume
hands the half of its keys whose hash's next bit is set to a new volume.
Every member of the volume's chain splits its copy at the same point of
the volume's history and seeds the new volume on its own server; the new
volume starts there once the chain's tail has split, and the placement
policy then spreads the new chains over every server, those added since
the keyspace was created included. Requests for moved keys are refused
until the new volume starts, and clients follow the new keyspace list
by themselves. With -wait it returns once every new volume serves
(docs/operations.md, "Growing a keyspace").`)
	cluster := registerClientFlags(fs)
	prefix := fs.String("prefix", "", "create: the keys' prefix (required)")
	mode := fs.String("mode", "strong", "create: strong, causal or hierarchical")
	k := fs.Int("k", 0, "create: with -mode causal, updates are answered once the first k replicas hold them (default: a majority of -replicas)")
	replicas := fs.Int("replicas", 3, "create: chain length t")
	volumes := fs.Int("volumes", 1, "create: volumes (chains) the keyspace's keys hash to")
	sites := fs.String("sites", "", "create: comma-separated ids of the sites that replicate the keyspace, this site among them (empty: this site only); grace: the sites of the forced view; reassign: the failed sites")
	depth := fs.Int("depth", 0, "create: with -mode hierarchical, the leading path segments that place a key (deep control is for prefixes at least this deep; 0: 1)")
	relaxed := fs.Bool("relaxed", false, "create: with -mode hierarchical, answer a write once its primary site holds it (the paper's), not a majority of the sites")
	idle := fs.Duration("idle", 0, "create: with -mode hierarchical, a site gives up control of a key or prefix after this long without writes (0: 1s)")
	wait := fs.Bool("wait", false, "split: return once every new volume serves, printing progress")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	want := map[string]int{"create": 1, "list": 0, "grace": 1, "reassign": 1, "split": 1}[verb]
	if len(args) != want {
		return cli.UsageErrorf("keyspace %s wants %d argument(s), got %d (usage: %s)", verb, want, len(args), keyspaceSynopsis)
	}
	spec := client.Keyspace{Mode: *mode, K: *k, Replicas: *replicas, Volumes: *volumes, Prefix: *prefix,
		PartitionDepth: *depth, Relaxed: *relaxed, Idle: *idle}
	if verb == "create" {
		spec.Name = args[0]
		if spec.Prefix == "" {
			return cli.UsageErrorf("keyspace create needs -prefix")
		}
		if _, err := wire.ParseMode(spec.Mode); err != nil {
			return cli.UsageErrorf("-mode: %v", err) // before any master is asked
		}
		if spec.Mode == "causal" && spec.K == 0 {
			spec.K = spec.Replicas/2 + 1
		}
		if *sites != "" {
			ids, err := parseSiteIDs(*sites)
			if err != nil {
				return cli.UsageErrorf("-sites: %v", err)
			}
			spec.Sites = clientSiteIDs(ids)
		}
		if spec.Mode != "hierarchical" && (*depth != 0 || *relaxed || *idle != 0) {
			return cli.UsageErrorf("-depth, -relaxed and -idle are for -mode hierarchical")
		}
	} else if *sites != "" && verb == "list" {
		return cli.UsageErrorf("-sites is for keyspace create, grace and reassign")
	}
	var overrideSites []uint32
	if verb == "grace" || verb == "reassign" {
		if *sites == "" {
			return cli.UsageErrorf("keyspace %s needs -sites", verb)
		}
		ids, err := parseSiteIDs(*sites)
		if err != nil {
			return cli.UsageErrorf("-sites: %v", err)
		}
		overrideSites = clientSiteIDs(ids)
	}
	ctx, cancel := cluster.context()
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	keyspaces := c.Keyspaces()
	switch verb {
	case "create":
		if keyspaces, err = c.CreateKeyspace(ctx, spec); err != nil {
			return err
		}
	case "grace":
		if keyspaces, err = c.ForceView(ctx, args[0], overrideSites); err != nil {
			return err
		}
	case "reassign":
		if keyspaces, err = c.Reassign(ctx, args[0], overrideSites); err != nil {
			return err
		}
	case "split":
		return splitKeyspace(ctx, c, args[0], *wait, stdout)
	}
	printKeyspaces(stdout, keyspaces)
	if verb == "create" {
		return createAtOtherSites(ctx, cluster, c, spec, stdout)
	}
	return nil
}

// createAtOtherSites creates a keyspace that names several sites at
// each of them but this one (created already), through their masters:
// until a majority of a hierarchical keyspace's sites have it, its keys
// cannot be served. Creating it where it exists with the same settings
// succeeds, so running the command at each site, as before, works too.
func createAtOtherSites(ctx context.Context, cluster *clientFlags, here *client.Client, spec client.Keyspace, stdout io.Writer) error {
	if len(spec.Sites) < 2 {
		return nil
	}
	st, err := here.Status(ctx)
	if err != nil {
		return fmt.Errorf("created at this site; the other sites not (no status to find their masters): %w", err)
	}
	for _, id := range spec.Sites {
		if id == st.Site {
			continue
		}
		i := slices.IndexFunc(st.Sites, func(s client.Site) bool { return s.ID == id })
		if i < 0 {
			return fmt.Errorf("created at site %d; site %d is not a site of this deployment", st.Site, id)
		}
		site := st.Sites[i]
		err := func() error {
			c, err := cluster.dialAt(ctx, strings.Join(site.Masters, ","))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.CreateKeyspace(ctx, spec)
			return err
		}()
		if err != nil {
			return fmt.Errorf("created at site %d, but not at site %d (%s): %w; run the command again, or with -master %s", st.Site, id, site.Name, err, strings.Join(site.Masters, ","))
		}
		fmt.Fprintf(stdout, "created at site %d (%s) too\n", id, site.Name)
	}
	return nil
}

// printKeyspaces lists keyspaces as a table.
func printKeyspaces(w io.Writer, keyspaces []client.Keyspace) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEYSPACE\tPREFIX\tMODE\tK\tREPLICAS\tVOLUMES\tSITES")
	for _, k := range keyspaces {
		prefix, kk := fmt.Sprintf("%q", k.Prefix), "-"
		if k.Prefix == "" {
			prefix = "(others)"
		}
		mode := k.Mode
		switch k.Mode {
		case "causal":
			kk = fmt.Sprint(k.K)
		case "hierarchical":
			durability := "durable"
			if k.Relaxed {
				durability = "relaxed"
			}
			mode = fmt.Sprintf("hierarchical (depth %d, %s, idle %s)", max(k.PartitionDepth, 1), durability, cmp.Or(k.Idle, time.Second))
			if k.GraceGeneration > 0 {
				mode += fmt.Sprintf(", view forced to sites %s (grace %d)", formatClientSiteIDs(k.GraceSites), k.GraceGeneration)
			}
			if k.ReassignGeneration > 0 {
				mode += fmt.Sprintf(", keys of sites %s reassigned (reassignment %d)", formatClientSiteIDs(k.ReassignSites), k.ReassignGeneration)
			}
		}
		sites := "-"
		if len(k.Sites) > 0 {
			sites = formatClientSiteIDs(k.Sites)
		}
		volumes := fmt.Sprintf("%d (%d..%d)", k.Volumes, k.FirstVolume, int(k.FirstVolume)+k.Volumes-1)
		if len(k.VolumeIDs) > 0 {
			volumes = fmt.Sprintf("%d (%s; split %d times)", k.Volumes, volumeRanges(k.VolumeIDs), k.Splits)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", k.Name, prefix, mode, kk, k.Replicas, volumes, sites)
	}
	tw.Flush()
}

// keyspaceFile is one entry of catena dev's -keyspaces file.
type keyspaceFile struct {
	Name     string   `json:"name"`
	Prefix   string   `json:"prefix"`
	Mode     string   `json:"mode"`
	K        int      `json:"k"`
	Replicas int      `json:"replicas"`
	Volumes  int      `json:"volumes"`
	Sites    []uint32 `json:"sites"`
	// Depth, Relaxed and Idle (a duration, "500ms") are a hierarchical
	// keyspace's (see keyspace create).
	Depth   int    `json:"depth"`
	Relaxed bool   `json:"relaxed"`
	Idle    string `json:"idle"`
}

// readKeyspaces reads a JSON list of keyspaces, e.g.
//
//	[{"name": "sessions", "prefix": "s/", "mode": "causal", "k": 2, "replicas": 3, "volumes": 4, "sites": [1, 2]}]
//
// Mode defaults to strong, replicas to 3, volumes to 1, k (causal) to a
// majority of replicas, and sites to this site only.
func readKeyspaces(path string) ([]client.Keyspace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []keyspaceFile
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("keyspaces file %s: %w", path, err)
	}
	var out []client.Keyspace
	for _, e := range entries {
		k := client.Keyspace{Name: e.Name, Prefix: e.Prefix, Mode: cmp.Or(e.Mode, "strong"), K: e.K,
			Replicas: cmp.Or(e.Replicas, 3), Volumes: cmp.Or(e.Volumes, 1), Sites: slices.Sorted(slices.Values(e.Sites)),
			PartitionDepth: e.Depth, Relaxed: e.Relaxed}
		if e.Idle != "" {
			idle, err := time.ParseDuration(e.Idle)
			if err != nil {
				return nil, fmt.Errorf("keyspaces file %s: keyspace %q: idle: %w", path, e.Name, err)
			}
			k.Idle = idle
		}
		if k.Mode == "causal" && k.K == 0 {
			k.K = k.Replicas/2 + 1
		}
		if k.Name == "" || k.Prefix == "" {
			return nil, fmt.Errorf("keyspaces file %s: every keyspace needs a name and a prefix", path)
		}
		out = append(out, k)
	}
	return out, nil
}

// createDevKeyspaces creates catena dev's keyspaces and lists them.
func createDevKeyspaces(ctx context.Context, masters string, keyspaces []client.Keyspace, tlsFiles client.TLSFiles, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, masters, client.Options{TLS: tlsFiles})
	if err != nil {
		return err
	}
	defer c.Close()
	var all []client.Keyspace
	for _, k := range keyspaces {
		if all, err = c.CreateKeyspace(ctx, k); err != nil {
			return fmt.Errorf("keyspace %s: %w", k.Name, err)
		}
	}
	fmt.Fprintln(stdout, "catena dev: keyspaces")
	printKeyspaces(stdout, all)
	return nil
}

// clientSiteIDs converts site ids for the client package.
func clientSiteIDs(ids []wire.SiteID) []uint32 {
	var out []uint32
	for _, id := range ids {
		out = append(out, uint32(id))
	}
	return out
}

// formatClientSiteIDs lists site ids separated by commas.
func formatClientSiteIDs(ids []uint32) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, strconv.FormatUint(uint64(id), 10))
	}
	return strings.Join(parts, ",")
}

// volumeRanges formats volume ids as runs: "0..3,9..12".
func volumeRanges(ids []uint32) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ids[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d..%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// splitKeyspace splits keyspace name once more and, with wait, waits
// until every new volume serves.
func splitKeyspace(ctx context.Context, c *client.Client, name string, wait bool, stdout io.Writer) error {
	i := slices.IndexFunc(c.Keyspaces(), func(k client.Keyspace) bool { return k.Name == name })
	if i < 0 {
		return fmt.Errorf("no keyspace %q", name)
	}
	before := c.Keyspaces()[i]
	k, err := c.SplitKeyspace(ctx, name, before.Splits)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "keyspace %s: splitting %d volumes into %d (split %d)\n", name, before.Volumes, k.Volumes, k.Splits)
	if !wait {
		return nil
	}
	start, last := time.Now(), -1
	for {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		started, volumes := client.SplitDone(st, k)
		if started != last || started == volumes {
			fmt.Fprintf(stdout, "keyspace %s: %d of %d volumes serve (%s)\n", name, started, volumes, time.Since(start).Round(time.Millisecond))
			last = started
		}
		if started == volumes {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("keyspace %s: %d of %d volumes serve: %w", name, started, volumes, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
