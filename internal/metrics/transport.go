package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/catena-kv/catena/internal/transport"
)

// Transport collects a transport's counters (transport.Stats) at each
// scrape.
type Transport struct{ tr *transport.Transport }

var (
	transportSentDesc = prometheus.NewDesc("catena_transport_sent_bytes_total",
		"Bytes written to TCP connections, framing included.", nil, nil)
	transportReceivedDesc = prometheus.NewDesc("catena_transport_received_bytes_total",
		"Bytes read from TCP connections, framing included.", nil, nil)
	transportReconnectsDesc = prometheus.NewDesc("catena_transport_reconnects_total",
		"Connections to peers re-established after one broke (the protocol re-synchronises each).", nil, nil)
	transportDialFailuresDesc = prometheus.NewDesc("catena_transport_dial_failures_total",
		"Failed attempts to connect to a peer.", nil, nil)
	transportOverflowsDesc = prometheus.NewDesc("catena_transport_overflows_total",
		"Connections reset because the peer did not keep up and its send queue filled.", nil, nil)
	transportInFlightRefusedDesc = prometheus.NewDesc("catena_transport_inflight_refused_total",
		"Client messages refused because their connection had as many waiting for this process as -client-inflight-max allows.", nil, nil)
	transportIncompatibleDesc = prometheus.NewDesc("catena_transport_incompatible_total",
		"Links refused, dialed or accepted, because the peer speaks no protocol version this process speaks (docs/upgrades.md).", nil, nil)
)

// NewTransport returns the collector of tr.
func NewTransport(tr *transport.Transport) *Transport { return &Transport{tr} }

// Describe implements prometheus.Collector.
func (t *Transport) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{transportSentDesc, transportReceivedDesc, transportReconnectsDesc, transportDialFailuresDesc, transportOverflowsDesc, transportInFlightRefusedDesc, transportIncompatibleDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (t *Transport) Collect(ch chan<- prometheus.Metric) {
	s := t.tr.Stats()
	ch <- prometheus.MustNewConstMetric(transportSentDesc, prometheus.CounterValue, float64(s.BytesSent))
	ch <- prometheus.MustNewConstMetric(transportReceivedDesc, prometheus.CounterValue, float64(s.BytesReceived))
	ch <- prometheus.MustNewConstMetric(transportReconnectsDesc, prometheus.CounterValue, float64(s.Reconnects))
	ch <- prometheus.MustNewConstMetric(transportDialFailuresDesc, prometheus.CounterValue, float64(s.DialFailures))
	ch <- prometheus.MustNewConstMetric(transportOverflowsDesc, prometheus.CounterValue, float64(s.Overflows))
	ch <- prometheus.MustNewConstMetric(transportInFlightRefusedDesc, prometheus.CounterValue, float64(s.InFlightRefused))
	ch <- prometheus.MustNewConstMetric(transportIncompatibleDesc, prometheus.CounterValue, float64(s.Incompatible))
}

// Storage measures a storage engine's group commits and its object
// cache; its OnCommit is storage.PebbleOptions.OnCommit, its OnCacheRead
// PebbleOptions.OnCacheRead.
type Storage struct {
	seconds             prometheus.Histogram
	bytes               prometheus.Counter
	cacheHit, cacheMiss prometheus.Counter
}

// NewStorage returns a Storage whose metrics are registered with reg.
// sync says whether commits wait for fsync.
func NewStorage(reg prometheus.Registerer, sync bool) *Storage {
	s := &Storage{
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "storage", Name: "commit_duration_seconds",
			Help:    "Time to write one group commit (every change of a batch of steps) to the write-ahead log, fsync included unless the server runs with -no-sync.",
			Buckets: latencyBuckets,
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "storage", Name: "committed_bytes_total",
			Help: "Bytes of the batches written by group commits.",
		}),
	}
	syncGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "storage", Name: "sync",
		Help: "1 if commits wait for fsync, 0 with -no-sync.",
	})
	syncGauge.Set(boolValue(sync))
	cacheReads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "storage", Name: "object_cache_reads_total",
		Help: "Reads of objects, by whether the object cache held them (hit) or Pebble was read (miss).",
	}, []string{"result"})
	s.cacheHit, s.cacheMiss = cacheReads.WithLabelValues("hit"), cacheReads.WithLabelValues("miss")
	reg.MustRegister(s.seconds, s.bytes, syncGauge, cacheReads)
	return s
}

// OnCacheRead records one read of an object through the object cache.
func (s *Storage) OnCacheRead(hit bool) {
	if hit {
		s.cacheHit.Inc()
	} else {
		s.cacheMiss.Inc()
	}
}

// OnCommit records one group commit.
func (s *Storage) OnCommit(elapsed time.Duration, batchBytes int) {
	s.seconds.Observe(elapsed.Seconds())
	s.bytes.Add(float64(batchBytes))
}
