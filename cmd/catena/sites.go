package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/transport"
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
		st := wire.Site{ID: id, Name: name, Masters: splitNodeIDs(addrs)}
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
// (catena dev -sites, tests): every message to a listed peer leaves
// rtt/2 ± jitter/2 after it was sent, FIFO per link
// (transport.SetLinkDelays). A real deployment has a real WAN and sets
// none of them.
//
// -wan-cut-file is a test hook for partitions between sites: the process
// reads the file every wanCutPoll and is cut off from the addresses it
// lists (transport.SetCut) until they are gone from it or it is removed.
type wanFlags struct {
	rtt, jitter time.Duration
	peers       string
	cutFile     string
}

// wanCutPoll is how often -wan-cut-file is read.
const wanCutPoll = 100 * time.Millisecond

// registerWANFlags defines -wan-rtt, -wan-jitter and -wan-peers on fs.
func registerWANFlags(fs *flag.FlagSet) *wanFlags {
	w := &wanFlags{}
	fs.DurationVar(&w.rtt, "wan-rtt", 0, "emulated WAN: delay messages to the -wan-peers by half this each way (testing several sites on one machine; 0: none)")
	fs.DurationVar(&w.jitter, "wan-jitter", 0, "emulated WAN: the round trip varies by up to ± this (half each way)")
	fs.StringVar(&w.peers, "wan-peers", "", "emulated WAN: comma-separated addresses of the processes of other sites (their masters and servers); messages to any other peer are not delayed")
	fs.StringVar(&w.cutFile, "wan-cut-file", "", "testing: a file of addresses (separated by commas, spaces or lines) this process is cut off from, as by a network partition, while they are listed; read every 100ms, absent or empty: none")
	return w
}

// validate checks the flags together.
func (w *wanFlags) validate() error {
	switch {
	case w.rtt < 0 || w.jitter < 0:
		return usageErrorf("-wan-rtt and -wan-jitter must not be negative")
	case w.jitter > w.rtt:
		return usageErrorf("-wan-jitter %s exceeds -wan-rtt %s", w.jitter, w.rtt)
	case w.rtt > 0 && w.peers == "":
		return usageErrorf("-wan-rtt needs -wan-peers: the addresses of the other sites' processes")
	case w.rtt == 0 && (w.jitter > 0 || w.peers != ""):
		return usageErrorf("-wan-jitter and -wan-peers need -wan-rtt")
	}
	return nil
}

// apply sets the transport's link delays; call it before the transport
// sends anything.
func (w *wanFlags) apply(tr *transport.Transport, log *slog.Logger) {
	if w.cutFile != "" {
		go watchCutFile(w.cutFile, tr, log)
	}
	if w.rtt == 0 {
		return
	}
	remote := map[wire.NodeID]bool{}
	for _, id := range splitNodeIDs(w.peers) {
		remote[id] = true
	}
	d := transport.LinkDelay{OneWay: w.rtt / 2, Jitter: w.jitter / 2}
	tr.SetLinkDelays(func(peer wire.NodeID) transport.LinkDelay {
		if remote[peer] {
			return d
		}
		return transport.LinkDelay{}
	})
}

// watchCutFile cuts the transport off from the addresses listed in path
// (-wan-cut-file), reading it every wanCutPoll for the process's life.
func watchCutFile(path string, tr *transport.Transport, log *slog.Logger) {
	var current string
	for {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot read -wan-cut-file", "file", path, "err", err)
		}
		peers := strings.Fields(strings.ReplaceAll(string(data), ",", " "))
		if list := strings.Join(peers, ","); list != current {
			current = list
			if len(peers) == 0 {
				tr.SetCut(nil)
				log.Warn("emulated partition lifted (-wan-cut-file)")
			} else {
				cut := map[wire.NodeID]bool{}
				for _, p := range peers {
					cut[wire.NodeID(p)] = true
				}
				tr.SetCut(func(peer wire.NodeID) bool { return cut[peer] })
				log.Warn("emulated partition: cut off from peers (-wan-cut-file)", "peers", list)
			}
		}
		time.Sleep(wanCutPoll)
	}
}
