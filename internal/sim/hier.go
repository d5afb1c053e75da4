package sim

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/chain/hierarchical"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Runs of mode hierarchical (Options.Hierarchical): the sites of a geo
// run (geo.go) replicate the default keyspace under the NFSv4 paper's
// hierarchical replication control (docs/adr/0016). Clients at every
// site read and write keys "dI/kJ" (directories, so that sites elect
// each other primary of whole prefixes as well as keys) through the
// strong client core; besides each site's chain checks, the history of
// every site's clients together, final reads at every site included, is
// linearizable per key, and after healing every site holds the same
// versions. After a server's step (at most once per simulated
// millisecond), the heads' control machines of every site are checked
// together (checkControl).

// keyDirs is how many directories the keys of a hierarchical run spread
// over.
const keyDirs = 3

// keyName returns the run's i-th key.
func (c *Cluster) keyName(i int) string {
	if c.opts.Hierarchical {
		return fmt.Sprintf("d%d/k%d", i%keyDirs, i)
	}
	return fmt.Sprintf("k%d", i)
}

// volumeOf returns the volume of the default keyspace a key belongs to.
func (c *Cluster) volumeOf(key string) wire.VolumeID {
	if c.opts.Hierarchical {
		return placement.VolumeIn(wire.Keyspace{Volumes: c.opts.Volumes, PartitionDepth: 1, Mode: wire.ModeHierarchical}, key)
	}
	if ks := c.keyspaces(); c.opts.Splits && len(ks) > 0 {
		return placement.VolumeIn(ks[0], key) // (as split so far)
	}
	return placement.VolumeOf(key, c.opts.Volumes)
}

// hierObserver is the replicas' observer in hierarchical mode: the
// histories the chain invariants use, and which updates any replica
// applied (check.Settle).
type hierObserver struct {
	*check.Histories
	c *Cluster
}

func (o hierObserver) Applied(node wire.NodeID, v wire.VolumeID, u *wire.Update) {
	o.Histories.Applied(node, v, u)
	if u.Client != 0 {
		g := o.c.geo
		if g.applied == nil {
			g.applied = map[check.UpdateID]bool{}
		}
		g.applied[check.UpdateID{Client: u.Client, ReqNo: u.ReqNo}] = true
	}
}

// checkLinearizable checks the history of every site's clients together,
// less the writes of unknown outcome no replica applied.
func (g *geoRun) checkLinearizable() error {
	history := check.Settle(g.history, g.applied)
	result, _ := check.Linearizable(history, 30*time.Second)
	if result == porcupine.Ok {
		return nil
	}
	byKey := map[string][]check.Operation{}
	for _, op := range history {
		byKey[op.Op.Key] = append(byKey[op.Op.Key], op)
	}
	var keys []string
	for key, ops := range byKey {
		if r, _ := check.Linearizable(ops, 10*time.Second); r != porcupine.Ok {
			keys = append(keys, key)
		}
	}
	return fmt.Errorf("history of %d operations at %d sites is %s (not linearizable): keys %v", len(g.history), g.o.Sites, result, keys)
}

// controlCheckEvery is how often, in simulated time, checkControl looks:
// control state changes by messages a WAN apart, and a violation stays
// until a message repairs it, so every step would cost much and catch
// little more.
const controlCheckEvery = wire.Millisecond

// checkControl asserts the control invariants of NFSv4 §2 across sites
// (control.Check) over the machines the sites' heads of each volume run:
// each site's own (its ancestry table equals the one its votes give),
// at most one site controls any key, deep control of a prefix above it
// counted, a control held only while a majority acknowledges it; and
// no two sites ever adopt different views with one number. While some
// site has no head running a machine (a head just changed), only the
// present sites' own invariants and the views are checked: counting a
// subset of the acknowledgements would make holds look unacknowledged.
func (g *geoRun) checkControl() {
	if g.w.now < g.controlCheckedAt+controlCheckEvery {
		return
	}
	g.controlCheckedAt = g.w.now
	if g.views == nil {
		g.views = control.Views{}
	}
	for v := range g.o.Volumes {
		vol := wire.VolumeID(v)
		var ms []*control.Machine
		for _, c := range g.clusters {
			if s := c.server(c.VolumeConfig(vol).Head()); s != nil && s.Replica(vol) != nil {
				if h, ok := s.Replica(vol).Mode().(*hierarchical.Mode); ok {
					if m := h.ControlMachine(); m != nil {
						ms = append(ms, m)
					}
				}
			}
		}
		err := g.views.Check(ms)
		if err == nil && len(ms) == len(g.clusters) {
			err = control.Check(ms)
		}
		for _, m := range ms {
			if err == nil && len(ms) < len(g.clusters) {
				err = m.CheckSite()
			}
		}
		if err != nil {
			panic(fmt.Sprintf("volume %d: %v", vol, err))
		}
	}
}
