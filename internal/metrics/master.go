package metrics

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/wire"
)

// Master collects a master member's state at each scrape (leadership,
// Raft term, volumes, servers, expired leases) and, through AfterBatch,
// watches its configurations and leader between scrapes: it counts each
// reconfiguration by kind, keeps the most recent ones for the status
// page, and counts leader changes.
type Master struct {
	m    *master.Master
	opts MasterOptions

	leaderChanges    prometheus.Counter
	reconfigurations *prometheus.CounterVec

	// Loop goroutine only.
	configs   map[wire.VolumeID]wire.Config
	keyspaces []wire.Keyspace
	leader    wire.NodeID
	started   bool

	mu     sync.Mutex
	recent []Reconfiguration // newest last, at most recentMax
}

// recentMax bounds the reconfigurations kept for the status page.
const recentMax = 64

// Reconfiguration kinds: what changed from one configuration of a volume
// to the next.
const (
	// KindRemove: members (or the joining server) left the chain: a
	// server failed, restarted, or was moved away by rebalancing.
	KindRemove = "remove"
	// KindExtend: a joining server was added after the tail; the state
	// transfer to it starts (CR §3 "Extending a Chain").
	KindExtend = "extend"
	// KindMove: a member left its place to join again at the tail, to
	// even out head and tail roles (docs/adr/0018-role-balance.md).
	KindMove = "move"
	// KindPromote: the joining server became the tail: an extension
	// completed.
	KindPromote = "promote"
	// KindAbort: an extension was abandoned, the chain unchanged.
	KindAbort = "abort"
	// KindSplit: the volume's keyspace is split: from this epoch it
	// hands half of its keys to a new volume (docs/adr/0031).
	KindSplit = "split"
	// KindStart: a split's new volume started, on the members of its
	// parent that seeded it.
	KindStart = "start"
	// KindOther: any other change (a volume recreated, a flag).
	KindOther = "other"
)

// Reconfiguration is one change of a volume's configuration, as a master
// member applied it.
type Reconfiguration struct {
	At      time.Time `json:"at"`
	Volume  uint32    `json:"volume"`
	Epoch   uint64    `json:"epoch"`
	Kind    string    `json:"kind"`
	Chain   []string  `json:"chain"`
	Joining string    `json:"joining,omitempty"`
	// Removed lists the servers that left the chain (KindRemove).
	Removed []string `json:"removed,omitempty"`
}

var (
	masterLeaderDesc = prometheus.NewDesc("catena_master_leader",
		"1 if this master member leads (a single master always does); else 0.", nil, nil)
	masterTermDesc = prometheus.NewDesc("catena_master_raft_term",
		"This member's Raft term; it grows with every election (replicated master only).", nil, nil)
	masterMembersDesc = prometheus.NewDesc("catena_master_members",
		"Members of the master.", nil, nil)
	masterServersDesc = prometheus.NewDesc("catena_master_servers",
		"Servers the leader knows, by whether it considers them alive (reported by the leader only).", []string{"state"}, nil)
	masterVolumesDesc = prometheus.NewDesc("catena_master_volumes",
		"Volumes (chains) of the cluster.", nil, nil)
	masterExtensionsDesc = prometheus.NewDesc("catena_master_extensions",
		"Volumes with a joining server: extensions (state transfers) in progress.", nil, nil)
	masterShortDesc = prometheus.NewDesc("catena_master_chains_short",
		"Volumes whose chain has fewer members than their keyspace's replication factor (recovery pending or in progress).", nil, nil)
	masterKeyspaceDesc = prometheus.NewDesc("catena_master_keyspace_volumes",
		"Volumes of each keyspace, labelled with its mode (strong or causal), k and replication factor.", []string{"keyspace", "mode", "k", "replicas"}, nil)
	masterExpiredDesc = prometheus.NewDesc("catena_master_leases_expired_total",
		"Servers this member, leading, removed because it had not heard from them within the failure timeout (their leases had run out).", nil, nil)
	volumeEpochDesc = prometheus.NewDesc("catena_volume_epoch",
		"Epoch of the volume's current configuration.", []string{"keyspace", "volume"}, nil)
	volumeChainDesc = prometheus.NewDesc("catena_volume_chain_length",
		"Members of the volume's chain (the joining server not counted).", []string{"keyspace", "volume"}, nil)
)

// MasterOptions configure a Master collector.
type MasterOptions struct {
	// Term returns the Raft term of a replicated master's member; nil for
	// a single master.
	Term func() uint64
	// Inspect reads the master on its goroutine.
	Inspect Inspect
}

// NewMaster returns the collector of m, registered with reg.
func NewMaster(reg prometheus.Registerer, m *master.Master, o MasterOptions) *Master {
	c := &Master{
		m: m, opts: o,
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "master", Name: "leader_changes_total",
			Help: "Times the leader this member knows of changed (to another member or to none).",
		}),
		reconfigurations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "master", Name: "reconfigurations_total",
			Help: "Configuration changes this member applied, by kind: remove (a server left the chain), extend (a joining server added; state transfer starts), move (a member joins again at the tail, to even out roles), promote (the joiner became the tail), abort (an extension abandoned), split (the volume's keyspace split: half its keys go to a new volume), start (a split's new volume started), other.",
		}, []string{"kind"}),
		configs: map[wire.VolumeID]wire.Config{},
	}
	for _, k := range []string{KindRemove, KindExtend, KindMove, KindPromote, KindAbort, KindOther} {
		c.reconfigurations.WithLabelValues(k)
	}
	reg.MustRegister(c, c.leaderChanges, c.reconfigurations)
	return c
}

// Changes is what AfterBatch found changed since the last batch.
type Changes struct {
	Reconfigurations []Reconfiguration
	// LeaderChanged is set when the leader this member knows changed;
	// Leader is the new one ("" if none).
	LeaderChanged bool
	Leader        wire.NodeID
}

// AfterBatch compares the master's configurations and leader with those
// of the previous batch, counts and records the changes, and returns
// them. The first call records the starting point and reports no
// change. It runs on the master's goroutine (node.Loop's
// AfterBatch).
func (c *Master) AfterBatch(at time.Time) Changes {
	var ch Changes
	if leader := c.m.Leader(); leader != c.leader {
		if c.started {
			c.leaderChanges.Inc()
			ch.LeaderChanged, ch.Leader = true, leader
		}
		c.leader = leader
	}
	for _, next := range c.m.Configs() {
		prev, known := c.configs[next.Volume]
		if known && prev.Epoch == next.Epoch {
			continue
		}
		c.configs[next.Volume] = next
		if !known {
			// A new keyspace's volumes, or the first batch.
			c.keyspaces = c.m.Keyspaces()
		}
		if c.started && !known && next.FromSplit {
			r := Classify(wire.Config{}, next)
			r.At, r.Kind = at, KindStart
			c.reconfigurations.WithLabelValues(r.Kind).Inc()
			ch.Reconfigurations = append(ch.Reconfigurations, r)
			continue
		}
		if !c.started || !known {
			continue
		}
		r := Classify(prev, next)
		r.At = at
		c.reconfigurations.WithLabelValues(r.Kind).Inc()
		ch.Reconfigurations = append(ch.Reconfigurations, r)
	}
	c.started = true
	c.record(ch.Reconfigurations)
	return ch
}

// record keeps rs, the oldest first, among the recent reconfigurations.
func (c *Master) record(rs []Reconfiguration) {
	if len(rs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent = append(c.recent, rs...)
	if extra := len(c.recent) - recentMax; extra > 0 {
		c.recent = slices.Delete(c.recent, 0, extra)
	}
}

// Recent returns the most recent reconfigurations, newest first. Safe for
// concurrent use.
func (c *Master) Recent() []Reconfiguration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.recent)
	slices.Reverse(out)
	return out
}

// Classify describes the change from prev to next, two configurations
// of one volume.
func Classify(prev, next wire.Config) Reconfiguration {
	r := Reconfiguration{Volume: uint32(next.Volume), Epoch: uint64(next.Epoch), Joining: string(next.Joining)}
	for _, id := range next.Chain {
		r.Chain = append(r.Chain, string(id))
	}
	for _, id := range prev.Chain {
		if !next.Contains(id) {
			r.Removed = append(r.Removed, string(id))
		}
	}
	joinerLeft := prev.Joining != "" && !next.Contains(prev.Joining)
	switch {
	case len(r.Removed) > 0:
		r.Kind = KindRemove
		if joinerLeft {
			r.Removed = append(r.Removed, string(prev.Joining))
		}
	case prev.Joining != "" && next.Index(prev.Joining) >= 0:
		r.Kind = KindPromote
	case next.Moved && next.Joining != prev.Joining:
		r.Kind = KindMove
	case next.Joining != "" && next.Joining != prev.Joining:
		r.Kind = KindExtend
	case joinerLeft && slices.Equal(prev.Chain, next.Chain):
		r.Kind = KindAbort
	case next.Split != prev.Split && !next.Split.IsZero():
		r.Kind = KindSplit
	default:
		r.Kind = KindOther
	}
	return r
}

// Recovery returns, from the configurations the last AfterBatch saw, how
// many volumes have fewer members than their keyspace's replication
// factor and how many are being extended. Loop goroutine only.
func (c *Master) Recovery() (short, extending int) {
	for _, cfg := range c.configs {
		moving := 0 // a moved member holds the volume throughout
		if cfg.Moved {
			moving = 1
		}
		if len(cfg.Chain)+moving < keyspaceOf(c.keyspaces, cfg.Volume).ReplicationFactor {
			short++
		}
		if cfg.Joining != "" {
			extending++
		}
	}
	return short, extending
}

// Describe implements prometheus.Collector.
func (c *Master) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{masterLeaderDesc, masterTermDesc, masterMembersDesc, masterServersDesc, masterVolumesDesc, masterExtensionsDesc, masterShortDesc, masterKeyspaceDesc, masterExpiredDesc, volumeEpochDesc, volumeChainDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Master) Collect(ch chan<- prometheus.Metric) {
	var (
		leading        bool
		term, expired  uint64
		status         *wire.StatusReply
		alive, failed  int
		joining, short int
	)
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	err := c.opts.Inspect(ctx, func(wire.Time) {
		leading, expired, status = c.m.Leading(), c.m.Expired(), c.m.Status()
		if c.opts.Term != nil {
			term = c.opts.Term()
		}
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(masterLeaderDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(masterLeaderDesc, prometheus.GaugeValue, boolValue(leading))
	if c.opts.Term != nil {
		ch <- prometheus.MustNewConstMetric(masterTermDesc, prometheus.GaugeValue, float64(term))
	}
	ch <- prometheus.MustNewConstMetric(masterMembersDesc, prometheus.GaugeValue, float64(len(status.Masters)))
	ch <- prometheus.MustNewConstMetric(masterExpiredDesc, prometheus.CounterValue, float64(expired))
	if leading {
		for _, s := range status.Servers {
			if s.Alive {
				alive++
			} else {
				failed++
			}
		}
		ch <- prometheus.MustNewConstMetric(masterServersDesc, prometheus.GaugeValue, float64(alive), "alive")
		ch <- prometheus.MustNewConstMetric(masterServersDesc, prometheus.GaugeValue, float64(failed), "failed")
	}
	ch <- prometheus.MustNewConstMetric(masterVolumesDesc, prometheus.GaugeValue, float64(len(status.Configs)))
	for _, ks := range status.Keyspaces {
		ch <- prometheus.MustNewConstMetric(masterKeyspaceDesc, prometheus.GaugeValue, float64(ks.Volumes),
			ks.Name, ks.Mode.String(), strconv.Itoa(ks.K), strconv.Itoa(ks.ReplicationFactor))
	}
	for _, cfg := range status.Configs {
		ks := keyspaceOf(status.Keyspaces, cfg.Volume)
		if cfg.Joining != "" {
			joining++
		}
		if len(cfg.Chain) < ks.ReplicationFactor {
			short++
		}
		v := strconv.FormatUint(uint64(cfg.Volume), 10)
		ch <- prometheus.MustNewConstMetric(volumeEpochDesc, prometheus.GaugeValue, float64(cfg.Epoch), ks.Name, v)
		ch <- prometheus.MustNewConstMetric(volumeChainDesc, prometheus.GaugeValue, float64(len(cfg.Chain)), ks.Name, v)
	}
	ch <- prometheus.MustNewConstMetric(masterExtensionsDesc, prometheus.GaugeValue, float64(joining))
	ch <- prometheus.MustNewConstMetric(masterShortDesc, prometheus.GaugeValue, float64(short))
}

// keyspaceOf returns the keyspace that volume v belongs to: the one whose
// volumes include it, else the first (the default keyspace).
func keyspaceOf(keyspaces []wire.Keyspace, v wire.VolumeID) wire.Keyspace {
	for _, ks := range keyspaces {
		if ks.HasVolume(v) {
			return ks
		}
	}
	if len(keyspaces) > 0 {
		return keyspaces[0]
	}
	return wire.Keyspace{}
}
