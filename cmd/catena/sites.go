package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/process"
	"github.com/catena-kv/catena/internal/wire"
)

// Sites on the command line (docs/adr/0013-sites-and-geo-causal.md,
// docs/operations.md "Sites"): a deployment of several sites gives every
// master -site, -sites and, for a default keyspace replicated by several
// sites, -default-sites and -default-k; every server -site.

// parseSiteID parses a site id: a number from 1 to 2³²−1.
func parseSiteID(s string) (wire.SiteID, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("site id %q: want a number from 1 to %d", s, uint32(math.MaxUint32))
	}
	return wire.SiteID(n), nil
}

// parseSiteIDs parses a comma-separated list of site ids, which must be
// distinct; it returns them in increasing order (the order keyspaces
// keep them in).
func parseSiteIDs(list string) ([]wire.SiteID, error) {
	var out []wire.SiteID
	for _, f := range strings.Split(list, ",") {
		id, err := parseSiteID(f)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, id) {
			return nil, fmt.Errorf("site %d listed twice in %q", id, list)
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// parseSites parses a deployment's sites: entries ID=NAME@MASTER,MASTER,...
// separated by semicolons, e.g.
//
//	1=lisbon@10.0.0.1:7100,10.0.0.2:7100,10.0.0.3:7100;2=oslo@10.1.0.1:7100
//
// It returns them in increasing id order. Names and masters must be
// distinct; the master's Settings.Validate checks the rest.
func parseSites(list string) ([]wire.Site, error) {
	var out []wire.Site
	masters := map[wire.NodeID]string{}
	for _, entry := range strings.Split(list, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		idText, rest, ok1 := strings.Cut(entry, "=")
		name, addrs, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("site %q: want ID=NAME@MASTER,MASTER,...", entry)
		}
		id, err := parseSiteID(idText)
		if err != nil {
			return nil, fmt.Errorf("site %q: %w", entry, err)
		}
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " \t,;=@") {
			return nil, fmt.Errorf("site %q: want a name without spaces or any of ,;=@", entry)
		}
		st := wire.Site{ID: id, Name: name, Masters: cli.SplitNodeIDs(addrs)}
		if len(st.Masters) == 0 {
			return nil, fmt.Errorf("site %q: no master address", entry)
		}
		for _, m := range st.Masters {
			if other, ok := masters[m]; ok {
				return nil, fmt.Errorf("master %s listed in sites %s and %s", m, other, name)
			}
			masters[m] = name
		}
		if slices.ContainsFunc(out, func(o wire.Site) bool { return o.ID == id || o.Name == name }) {
			return nil, fmt.Errorf("site %q: id %d or name %q listed twice", entry, id, name)
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sites %q: want ID=NAME@MASTER,...;ID=NAME@MASTER,...", list)
	}
	slices.SortFunc(out, func(a, b wire.Site) int { return int(int64(a.ID) - int64(b.ID)) })
	return out, nil
}

// formatSites is parseSites' inverse.
func formatSites(sites []wire.Site) string {
	var parts []string
	for _, st := range sites {
		var addrs []string
		for _, m := range st.Masters {
			addrs = append(addrs, string(m))
		}
		parts = append(parts, fmt.Sprintf("%d=%s@%s", st.ID, st.Name, strings.Join(addrs, ",")))
	}
	return strings.Join(parts, ";")
}

// formatSiteIDs is parseSiteIDs' inverse.
func formatSiteIDs(ids []wire.SiteID) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, strconv.FormatUint(uint64(id), 10))
	}
	return strings.Join(parts, ",")
}

// wanFlags emulate a wide-area network between sites on one machine
// (catena dev -sites, tests): process.WAN. A real deployment has a real
// WAN and sets none of them.
type wanFlags struct {
	rtt, jitter time.Duration
	peers       string
	cutFile     string
}

// registerWANFlags defines -wan-rtt, -wan-jitter, -wan-peers and
// -wan-cut-file on fs.
func registerWANFlags(fs *flag.FlagSet) *wanFlags {
	w := &wanFlags{}
	fs.DurationVar(&w.rtt, "wan-rtt", 0, "emulated WAN: delay messages to the -wan-peers by half this each way (testing several sites on one machine; 0: none)")
	fs.DurationVar(&w.jitter, "wan-jitter", 0, "emulated WAN: the round trip varies by up to ± this (half each way)")
	fs.StringVar(&w.peers, "wan-peers", "", "emulated WAN: comma-separated addresses of the processes of other sites (their masters and servers); messages to any other peer are not delayed")
	fs.StringVar(&w.cutFile, "wan-cut-file", "", "testing: a file of addresses (separated by commas, spaces or lines) this process is cut off from, as by a network partition, while they are listed; read every 100ms, absent or empty: none")
	return w
}

// wan returns the emulated WAN the flags give, or a usage error for
// flags that do not go together.
func (w *wanFlags) wan() (process.WAN, error) {
	switch {
	case w.rtt < 0 || w.jitter < 0:
		return process.WAN{}, cli.UsageErrorf("-wan-rtt and -wan-jitter must not be negative")
	case w.jitter > w.rtt:
		return process.WAN{}, cli.UsageErrorf("-wan-jitter %s exceeds -wan-rtt %s", w.jitter, w.rtt)
	case w.rtt > 0 && w.peers == "":
		return process.WAN{}, cli.UsageErrorf("-wan-rtt needs -wan-peers: the addresses of the other sites' processes")
	case w.rtt == 0 && (w.jitter > 0 || w.peers != ""):
		return process.WAN{}, cli.UsageErrorf("-wan-jitter and -wan-peers need -wan-rtt")
	}
	return process.WAN{RTT: w.rtt, Jitter: w.jitter, Peers: cli.SplitNodeIDs(w.peers), CutFile: w.cutFile}, nil
}
