package main

import (
	"context"
	"errors"
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
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/statuspage"
	"github.com/catena-kv/catena/internal/wire"
)

const kvDescription = `put, get, del and status talk to a cluster through its master (any member
of a replicated master). put takes its value as an argument, from standard
input (VALUE "-"), or from a file (-file PATH); values are at most %d bytes.
A value that starts with "-" follows "--": catena put KEY -- -5. get prints
the value and a newline; get -o PATH writes exactly the value, byte for
byte, to PATH ("-": to standard output), so what put -file or put - stored
comes back unchanged.`

// kvSynopses are the forms of each command, for its usage line.
var kvSynopses = map[string]string{
	"put":    "catena put KEY VALUE | catena put KEY - | catena put KEY -file PATH  [flags]",
	"get":    "catena get KEY [-consistency strong|any-member] [-o PATH] [flags]",
	"del":    "catena del KEY [flags]",
	"ttl":    "catena ttl KEY [-consistency strong|any-member] [flags]",
	"expire": "catena expire KEY DURATION | catena expire KEY -persist  [flags]",
	"scan":   "catena scan [PREFIX] [-match PATTERN] [-limit N] [flags]",
	"status": "catena status [-json] [flags]",
}

// runKV runs put, get, del and status against a cluster. put reads its
// value from stdin when the value argument is "-".
func runKV(cmd string, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := cli.NewFlagSet(cmd, kvSynopses[cmd], fmt.Sprintf(kvDescription, kv.ValueSizeMax))
	cluster := registerClientFlags(fs)
	var valueFile, consistency, output *string
	var asJSON *bool
	var match *string
	var limit *int
	var ttl *time.Duration
	var persist *bool
	sites := new(int)
	switch cmd {
	case "put", "del":
		sites = fs.Int("sites", 0, "in a keyspace of several sites: answer only once this many sites (this one included) hold the write (0: once this site's k replicas do); more than the keyspace's sites is refused, nothing written")
	}
	switch cmd {
	case "put":
		valueFile = fs.String("file", "", "read the value from this file")
		ttl = fs.Duration("ttl", 0, "the key expires this long after the chain's head applies the write (e.g. 30s, 10m; docs/adr/0028); 0: never")
	case "expire":
		persist = fs.Bool("persist", false, "remove the key's deadline instead (Redis PERSIST)")
	case "get", "ttl":
		consistency = fs.String("consistency", "strong", "strong: the chain's tail answers; any-member: any member of the chain answers a key with no update in flight, the tail otherwise (CRAQ); both linearizable")
		if cmd == "get" {
			output = fs.String("o", "", "write exactly the value (no newline added) to the file `PATH`; -: to standard output")
		}
	case "scan":
		match = fs.String("match", "", "list the keys that match this Redis glob `PATTERN` (* ? [abc] \\x) instead of a PREFIX")
		limit = fs.Int("limit", 0, "stop once this many keys are found (0: list every key); they are printed sorted but are not the first ones in key order: a scan walks the volumes one after another")
	case "status":
		asJSON = fs.Bool("json", false, "print the status as JSON (what the master's status page serves at /status.json)")
	}
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	want := map[string]int{"put": 2, "get": 1, "del": 1, "status": 0, "ttl": 1, "expire": 2}[cmd]
	if persist != nil && *persist {
		want = 1
	}
	if valueFile != nil && *valueFile != "" {
		want = 1
	}
	if cmd == "scan" {
		pattern, err := scanPattern(args, *match, *limit)
		if err != nil {
			return err
		}
		*match, want = pattern, len(args)
	}
	if len(args) != want {
		return cli.UsageErrorf("want %d argument(s), got %d (usage: %s)", want, len(args), kvSynopses[cmd])
	}
	var reads client.Consistency
	if consistency != nil {
		if reads, err = parseConsistency(*consistency); err != nil {
			return cli.UsageErrorf("%v", err)
		}
	}
	var value []byte
	if cmd == "put" {
		if value, err = putValue(args, *valueFile, stdin); err != nil {
			return err
		}
		// Refuse an oversized key or value, or a bad TTL, before
		// connecting.
		if *ttl < 0 {
			return cli.UsageErrorf("-ttl %v: want a positive duration", *ttl)
		}
		if err := kv.Validate(wire.Op{Kind: wire.OpPut, Key: args[0], Value: value, TTL: wire.Time(*ttl)}); err != nil {
			return err
		}
	}
	var change client.Expiry
	if cmd == "expire" {
		if change, err = expiryChange(args, *persist); err != nil {
			return err
		}
	}
	if *sites < 0 {
		return cli.UsageErrorf("-sites %d: want 0 or more", *sites)
	}
	ctx, cancel := cluster.context()
	defer cancel()
	if *sites > 1 {
		ctx = client.WithSites(ctx, *sites)
	}
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "put":
		var opts []client.WriteOption
		if *ttl > 0 {
			opts = append(opts, client.WithTTL(*ttl))
		}
		if err := c.Put(ctx, args[0], value, opts...); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "OK")
	case "ttl":
		_, deadline, found, err := c.Deadline(ctx, args[0], reads)
		switch {
		case err != nil:
			return err
		case !found:
			return errNotFound
		case deadline.IsZero():
			fmt.Fprintln(stdout, "no deadline")
		default:
			fmt.Fprintf(stdout, "%v left (deadline %s)\n", time.Until(deadline).Round(time.Millisecond), deadline.UTC().Format(time.RFC3339Nano))
		}
	case "expire":
		changed, _, err := c.ChangeExpiry(ctx, args[0], change)
		if err != nil {
			return err
		}
		if !changed {
			if change.Persist {
				return errors.New("not found, or it has no deadline")
			}
			return errNotFound
		}
		fmt.Fprintln(stdout, "OK")
	case "get":
		value, found, err := c.Get(ctx, args[0], reads)
		if err != nil {
			return err
		}
		if !found {
			return errNotFound
		}
		return writeValue(stdout, value, *output)
	case "del":
		existed, err := c.Delete(ctx, args[0])
		if err != nil {
			return err
		}
		if !existed {
			return errNotFound
		}
		fmt.Fprintln(stdout, "OK")
	case "scan":
		return printScan(ctx, c, stdout, *match, *limit)
	case "status":
		s, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return statuspage.WriteJSON(stdout, s)
		}
		printStatus(stdout, *cluster.master, s)
		if len(s.Keyspaces) > 1 || len(s.Keyspaces) == 1 && s.Keyspaces[0].Mode != "strong" {
			fmt.Fprintln(stdout)
			printKeyspaces(stdout, s.Keyspaces)
		}
	}
	return nil
}

// expiryChange is what catena expire KEY DURATION (or -persist) asks.
func expiryChange(args []string, persist bool) (client.Expiry, error) {
	if persist {
		return client.Expiry{Persist: true}, nil
	}
	d, err := time.ParseDuration(args[1])
	if err != nil || d <= 0 {
		return client.Expiry{}, cli.UsageErrorf("expire %s: want a positive duration such as 30s or 10m", args[1])
	}
	op := wire.Op{Kind: wire.OpExpire, Key: args[0], TTL: wire.Time(d)}
	if err := kv.Validate(op); err != nil {
		return client.Expiry{}, err
	}
	return client.Expiry{TTL: d}, nil
}

// putValue returns put's value: from the file named by -file, from stdin
// when the value argument is "-", or the argument itself. It reads at
// most one byte more than kv.ValueSizeMax, so a huge input is refused
// without being held in memory.
func putValue(args []string, file string, stdin io.Reader) ([]byte, error) {
	var from string
	var r io.Reader
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		from, r = file, f
	case args[1] == "-":
		from, r = "standard input", stdin
	default:
		return []byte(args[1]), nil
	}
	value, err := io.ReadAll(io.LimitReader(r, kv.ValueSizeMax+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value from %s: %w", from, err)
	}
	if len(value) > kv.ValueSizeMax {
		if info, err := os.Stat(file); file != "" && err == nil {
			return nil, fmt.Errorf("%s: value of %d bytes exceeds the limit of %d bytes", from, info.Size(), kv.ValueSizeMax)
		}
		return nil, fmt.Errorf("%s: value exceeds the limit of %d bytes", from, kv.ValueSizeMax)
	}
	return value, nil
}

// writeValue writes get's value: to stdout with a newline after it, or
// exactly to the file output names ("-": to stdout without the newline).
func writeValue(stdout io.Writer, value []byte, output string) error {
	switch output {
	case "":
		_, err := fmt.Fprintf(stdout, "%s\n", value)
		return err
	case "-":
		_, err := stdout.Write(value)
		return err
	}
	return os.WriteFile(output, value, 0o666)
}

var errNotFound = errors.New("not found")

// parseConsistency parses a read consistency's name.
func parseConsistency(name string) (client.Consistency, error) {
	for _, c := range []client.Consistency{client.Strong, client.AnyMember} {
		if c.String() == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown consistency %q (want strong or any-member)", name)
}

// printStatus shows each volume's chain (or, with many volumes, how many
// volumes each server heads, is middle of, and tails) and each server's
// view.
func printStatus(w io.Writer, masterAddr string, s *client.ClusterStatus) {
	defer printControl(w, s) // (last: after the shipping)
	if len(s.Masters) > 1 {
		var members []string
		for _, m := range s.Masters {
			if m == s.Leader {
				members = append(members, m+" (leader)")
			} else {
				members = append(members, m)
			}
		}
		fmt.Fprintf(w, "masters %s\n", strings.Join(members, ", "))
	} else {
		fmt.Fprintf(w, "master %s\n", masterAddr)
	}
	if s.Site != 0 {
		var sites []string
		for _, st := range s.Sites {
			sites = append(sites, fmt.Sprintf("%d %s (masters %s)", st.ID, st.Name, strings.Join(st.Masters, ",")))
		}
		fmt.Fprintf(w, "site %d of deployment %s: sites %s\n", s.Site, s.Deployment, strings.Join(sites, "; "))
		defer printShipping(w, s)
	}
	roleIn := func(v uint32, server string) string {
		for _, c := range s.Volumes {
			if c.Volume == v {
				return c.Role(server)
			}
		}
		return ""
	}
	if len(s.Volumes) <= 4 {
		for _, c := range s.Volumes {
			joining := "-"
			if c.Joining != "" {
				joining = c.Joining
			}
			fmt.Fprintf(w, "volume %d  epoch %d  chain %s  joining %s\n", c.Volume, c.Epoch, strings.Join(c.Chain, " → "), joining)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVER\tALIVE\tINCARNATION\tVOLUME\tROLE\tEPOCH\tAPPLIED\tCOMMITTED")
		for _, srv := range s.Servers {
			if len(srv.Volumes) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t-\tspare\t-\t-\t-\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation)
			}
			for _, v := range srv.Volumes {
				role := roleIn(v.Volume, srv.Addr)
				if role == "" {
					role = "none"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation, v.Volume, role, v.Epoch, v.Applied, v.Committed)
			}
		}
		tw.Flush()
		return
	}
	joining := 0
	count := map[string]map[string]int{}
	for _, c := range s.Volumes {
		if c.Joining != "" {
			joining++
		}
		for _, id := range append(slices.Clone(c.Chain), c.Joining) {
			if id == "" {
				continue
			}
			if count[id] == nil {
				count[id] = map[string]int{}
			}
			count[id][c.Role(id)]++
		}
	}
	fmt.Fprintf(w, "%d volumes, %d extensions in progress\n", len(s.Volumes), joining)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tALIVE\tINCARNATION\tHEAD\tMIDDLE\tTAIL\tJOINING\tVOLUMES")
	for _, srv := range s.Servers {
		c := count[srv.Addr]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation,
			c["head"]+c["head+tail"], c["middle"], c["tail"]+c["head+tail"], c["joining"], c["head"]+c["middle"]+c["tail"]+c["head+tail"])
	}
	tw.Flush()
}

// printControl prints, in a deployment with hierarchical keyspaces,
// which site controls which of their keys and prefixes (the primary the
// other sites forward to), as each volume's head reports them.
func printControl(w io.Writer, s *client.ClusterStatus) {
	if !slices.ContainsFunc(s.Keyspaces, func(k client.Keyspace) bool { return k.Mode == "hierarchical" }) {
		return
	}
	if len(s.Control) == 0 {
		fmt.Fprintln(w, "control: no site controls a key of a hierarchical keyspace (each site reads its own copy)")
		return
	}
	names := siteNames(s)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTROLLED	KEYSPACE	BY SITE	SCOPE")
	for _, c := range s.Control {
		scope := "key"
		if c.Deep {
			scope = "prefix (every key under it)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strconv.Quote(c.Path), c.Keyspace, strings.TrimSpace(fmt.Sprintf("%d %s", c.Site, names[c.Site])), scope)
	}
	tw.Flush()
}

// siteNames maps the deployment's site ids to their names.
func siteNames(s *client.ClusterStatus) map[uint32]string {
	names := map[uint32]string{}
	for _, st := range s.Sites {
		names[st.ID] = st.Name
	}
	return names
}

// shippingAge formats how long ago the oldest update a site lacks was
// written ("-": it lacks none).
func shippingAge(l client.ShippingLag) string {
	if l.Lag == 0 {
		return "-"
	}
	return time.Duration(l.AgeSeconds * float64(time.Second)).Round(time.Millisecond).String()
}

// printShipping prints, per volume of several sites and per other site,
// the shipping lag (one line per site when there are many volumes).
func printShipping(w io.Writer, s *client.ClusterStatus) {
	if len(s.Shipping) == 0 {
		fmt.Fprintln(w, "shipping: no volume of several sites reported by its tail")
		return
	}
	names := siteNames(s)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(s.Shipping) <= shippingRowsMax {
		fmt.Fprintln(tw, "SHIPPING\tTO SITE\tORIGINATED\tSTABLE THERE\tLAG\tOLDEST UNSHIPPED")
		for _, l := range s.Shipping {
			fmt.Fprintf(tw, "volume %d\t%d %s\t%d\t%d\t%d\t%s\n", l.Volume, l.To, names[l.To], l.Originated, l.Shipped, l.Lag, shippingAge(l))
		}
		tw.Flush()
		return
	}
	type total struct {
		volumes         int
		lag, originated uint64
		lagMax          uint64
		oldest          client.ShippingLag // the volume whose unshipped update is oldest
	}
	totals := map[uint32]*total{}
	var order []uint32
	for _, l := range s.Shipping {
		t := totals[l.To]
		if t == nil {
			t = &total{}
			totals[l.To] = t
			order = append(order, l.To)
		}
		t.volumes++
		t.lag += l.Lag
		t.originated += l.Originated
		t.lagMax = max(t.lagMax, l.Lag)
		if l.Lag > 0 && (t.oldest.Lag == 0 || l.AgeSeconds > t.oldest.AgeSeconds) {
			t.oldest = l
		}
	}
	fmt.Fprintln(tw, "SHIPPING TO SITE\tVOLUMES\tORIGINATED\tLAG\tLAG MAX (ONE VOLUME)\tOLDEST UNSHIPPED")
	for _, to := range order {
		t := totals[to]
		fmt.Fprintf(tw, "%d %s\t%d\t%d\t%d\t%d\t%s\n", to, names[to], t.volumes, t.originated, t.lag, t.lagMax, shippingAge(t.oldest))
	}
	tw.Flush()
}

// shippingRowsMax bounds the shipping lines catena status prints one per
// volume and site; above it prints one per site.
const shippingRowsMax = 16

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// scanPattern returns the pattern catena scan lists: its PREFIX argument
// (every byte matched as itself) followed by "*", or -match's.
func scanPattern(args []string, match string, limit int) (string, error) {
	switch {
	case len(args) > 1:
		return "", cli.UsageErrorf("want at most one PREFIX, got %d arguments (usage: %s)", len(args), kvSynopses["scan"])
	case len(args) == 1 && match != "":
		return "", cli.UsageErrorf("give a PREFIX or -match, not both")
	case limit < 0:
		return "", cli.UsageErrorf("-limit %d: want 0 or more", limit)
	case len(match) > wire.ScanPatternMax:
		return "", cli.UsageErrorf("-match: a pattern of %d bytes exceeds the limit of %d", len(match), wire.ScanPatternMax)
	case len(args) == 1:
		return globQuote(args[0]) + "*", nil
	}
	return match, nil
}

// globQuote escapes the bytes a Redis glob pattern gives a meaning.
func globQuote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// printScan prints the keys that match pattern, sorted, one per line
// (at most limit of them unless limit is 0).
func printScan(ctx context.Context, c *client.Client, stdout io.Writer, pattern string, limit int) error {
	var keys []string
	for cur := (client.Cursor{}); !cur.Done() && (limit == 0 || len(keys) < limit); {
		page, next, err := c.Scan(ctx, cur, pattern, 1000)
		if err != nil {
			return err
		}
		keys, cur = append(keys, page...), next
	}
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	for _, k := range keys {
		fmt.Fprintln(stdout, k)
	}
	return nil
}
