package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/wire"
)

// Server collects, at each scrape, a chain server's state: per volume its
// replica's role, epoch, applied and committed sequence numbers, Sent
// list length, the watches it holds and the depth of the window they are
// served from and, at the tail of a volume of several sites, the
// shipping lag to each other site; and whether it holds a lease. It reads
// each of the server's loops (ServerLoop) on that loop's own goroutine.
type Server struct {
	loops []ServerLoop
}

// ServerLoop is one event loop of a server process: its part of the
// server (chain.LoopOptions) and how to read it.
type ServerLoop struct {
	Server  *chain.Server
	Inspect Inspect
}

var (
	replicaRoleDesc = prometheus.NewDesc("catena_replica_role",
		"Always 1, one series per volume this server holds, labelled with its role in the configuration it adopted: head, middle, tail, head+tail (a chain of one), joining or none.",
		[]string{"volume", "role"}, nil)
	replicaEpochDesc = prometheus.NewDesc("catena_replica_epoch",
		"Epoch of the configuration this server's replica of the volume adopted.",
		[]string{"volume"}, nil)
	replicaAppliedDesc = prometheus.NewDesc("catena_replica_applied_sequence",
		"Sequence number of the last update the replica applied.",
		[]string{"volume"}, nil)
	replicaCommittedDesc = prometheus.NewDesc("catena_replica_committed_sequence",
		"Highest sequence number the replica knows the tail processed.",
		[]string{"volume"}, nil)
	replicaSentDesc = prometheus.NewDesc("catena_replica_sent_updates",
		"Updates on the replica's Sent list (CR §3): forwarded down the chain, not yet known to be processed by the tail.",
		[]string{"volume"}, nil)
	replicaWedgedDesc = prometheus.NewDesc("catena_replica_wedged",
		"1 while the replica, restored from disk, waits for the master's next configuration; else 0.",
		[]string{"volume"}, nil)
	replicaWatchesDesc = prometheus.NewDesc("catena_replica_watches",
		"Watches (long polls of clients' Watch) the replica holds: waiting for a change to send, or for their hold time to end (docs/adr/0032-watch-and-leases.md).",
		[]string{"volume"}, nil)
	replicaWatchWindowDesc = prometheus.NewDesc("catena_replica_watch_window_updates",
		"Updates the replica keeps in memory (its catch-up log) and serves watches from: a watch resuming from an older revision here is answered compacted.",
		[]string{"volume"}, nil)
	replicaShippingLagDesc = prometheus.NewDesc("catena_replica_shipping_lag_updates",
		"At the tail of a volume replicated by several sites: this site's updates of the volume that the other site does not hold stable yet (docs/adr/0013-sites-and-geo-causal.md).",
		[]string{"volume", "site"}, nil)
	replicaShippingAgeDesc = prometheus.NewDesc("catena_replica_shipping_lag_seconds",
		"At the tail of a volume replicated by several sites: how long ago the oldest of this site's updates of the volume that the other site does not hold stable yet was written; 0 when it holds them all.",
		[]string{"volume", "site"}, nil)
	serverReplicasDesc = prometheus.NewDesc("catena_server_replicas",
		"Replicas this server holds, by role.",
		[]string{"role"}, nil)
	serverLeaseDesc = prometheus.NewDesc("catena_server_lease_valid",
		"1 while the server holds a lease from the master (it serves clients only then); else 0.",
		nil, nil)
	serverClockOffsetDesc = prometheus.NewDesc("catena_server_clock_offset_seconds",
		"The master's clock minus this server's, as the last heartbeat measured it (absent before one did).",
		nil, nil)
	serverClockTrustedDesc = prometheus.NewDesc("catena_server_clock_trusted",
		"1 while the heartbeats find this server's clock within half of -max-clock-offset of the master's; else 0, and the server answers nothing about keys that expire (docs/adr/0028).",
		nil, nil)
)

// serverRoles are the roles catena_server_replicas always reports.
var serverRoles = []string{"head", "middle", "tail", "head+tail", "joining", "none"}

// NewServer returns the collector of a server process run by loops
// (loop 0 first).
func NewServer(loops ...ServerLoop) *Server {
	return &Server{loops: loops}
}

// Describe implements prometheus.Collector.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{replicaRoleDesc, replicaEpochDesc, replicaAppliedDesc, replicaCommittedDesc, replicaSentDesc, replicaWedgedDesc, replicaWatchesDesc, replicaWatchWindowDesc, replicaShippingLagDesc, replicaShippingAgeDesc, serverReplicasDesc, serverLeaseDesc, serverClockOffsetDesc, serverClockTrustedDesc} {
		ch <- d
	}
}

type replicaSample struct {
	volume                      string
	role                        string
	epoch                       wire.Epoch
	applied, committed, sentLen wire.SN
	wedged                      bool
	watches, watchWindow        int
	shippingLag                 []wire.SiteCount
	shippingAge                 []wire.SiteTime
}

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	var samples []replicaSample
	var lease, measured, trusted bool
	var offset wire.Time
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	for i, l := range s.loops {
		err := l.Inspect(ctx, func(now wire.Time) {
			if i == 0 {
				lease = l.Server.HasLease(now) // loop 0 holds the lease first: it asks for it
				offset, measured, trusted = l.Server.ClockOffset(now)
			}
			samples = sampleReplicas(samples, l.Server, now)
		})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(serverLeaseDesc, err)
			return
		}
	}
	ch <- prometheus.MustNewConstMetric(serverLeaseDesc, prometheus.GaugeValue, boolValue(lease))
	ch <- prometheus.MustNewConstMetric(serverClockTrustedDesc, prometheus.GaugeValue, boolValue(trusted))
	if measured {
		ch <- prometheus.MustNewConstMetric(serverClockOffsetDesc, prometheus.GaugeValue, time.Duration(offset).Seconds())
	}
	roles := map[string]int{}
	for _, r := range samples {
		roles[r.role]++
		ch <- prometheus.MustNewConstMetric(replicaRoleDesc, prometheus.GaugeValue, 1, r.volume, r.role)
		ch <- prometheus.MustNewConstMetric(replicaEpochDesc, prometheus.GaugeValue, float64(r.epoch), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaAppliedDesc, prometheus.GaugeValue, float64(r.applied), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaCommittedDesc, prometheus.GaugeValue, float64(r.committed), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaSentDesc, prometheus.GaugeValue, float64(r.sentLen), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaWedgedDesc, prometheus.GaugeValue, boolValue(r.wedged), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaWatchesDesc, prometheus.GaugeValue, float64(r.watches), r.volume)
		ch <- prometheus.MustNewConstMetric(replicaWatchWindowDesc, prometheus.GaugeValue, float64(r.watchWindow), r.volume)
		for _, e := range r.shippingLag {
			ch <- prometheus.MustNewConstMetric(replicaShippingLagDesc, prometheus.GaugeValue, float64(e.N), r.volume, strconv.FormatUint(uint64(e.Site), 10))
		}
		for _, e := range r.shippingAge {
			ch <- prometheus.MustNewConstMetric(replicaShippingAgeDesc, prometheus.GaugeValue, time.Duration(e.Age).Seconds(), r.volume, strconv.FormatUint(uint64(e.Site), 10))
		}
	}
	for _, role := range serverRoles {
		ch <- prometheus.MustNewConstMetric(serverReplicasDesc, prometheus.GaugeValue, float64(roles[role]), role)
	}
}

// sampleReplicas appends a sample of each of server's replicas.
func sampleReplicas(samples []replicaSample, server *chain.Server, now wire.Time) []replicaSample {
	for _, v := range server.Volumes() {
		r := server.Replica(v)
		first, last := r.Sent()
		sentLen := wire.SN(0)
		if first > 0 {
			sentLen = last - first + 1
		}
		window, _ := r.WatchWindow()
		samples = append(samples, replicaSample{
			volume: strconv.FormatUint(uint64(v), 10), role: r.Role(), epoch: r.Config().Epoch,
			applied: r.AppliedSN(), committed: r.CommittedSN(), sentLen: sentLen, wedged: r.Wedged(),
			watches: r.Watches(), watchWindow: window,
			shippingLag: r.ShippingLag(), shippingAge: r.ShippingAge(now),
		})
	}
	return samples
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
