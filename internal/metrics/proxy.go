package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ProxyStats are a Redis-protocol proxy's connection counts.
type ProxyStats struct {
	Connections, Accepted, Rejected int64
}

// Proxy holds the metrics of a Redis-protocol proxy (catena proxy): its
// commands by name and result with their latency, and its connections.
// Command is safe for concurrent use.
type Proxy struct {
	commands *prometheus.CounterVec
	seconds  *prometheus.HistogramVec

	mu    sync.Mutex
	cache map[proxyCommand]proxyMetrics
}

type proxyCommand struct {
	name   string
	failed bool
}

type proxyMetrics struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// NewProxy returns a proxy's metrics, registered with reg; stats reads
// its connection counts at scrape time.
func NewProxy(reg prometheus.Registerer, stats func() ProxyStats) *Proxy {
	p := &Proxy{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "proxy", Name: "commands_total",
			Help: "Redis commands answered, by command (lower case; unknown for commands the proxy does not serve) and result: ok, or error for an error reply.",
		}, []string{"command", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "proxy", Name: "command_duration_seconds",
			Help:    "Time from reading a Redis command to its reply being ready, waiting for the connection's earlier commands on the same keys included, by command.",
			Buckets: latencyBuckets,
		}, []string{"command"}),
		cache: map[proxyCommand]proxyMetrics{},
	}
	gauge := func(name, help string, v func(ProxyStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "proxy", Name: name, Help: help},
			func() float64 { return float64(v(stats())) })
	}
	counter := func(name, help string, v func(ProxyStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Subsystem: "proxy", Name: name, Help: help},
			func() float64 { return float64(v(stats())) })
	}
	reg.MustRegister(p.commands, p.seconds,
		gauge("connections", "Redis client connections open.", func(s ProxyStats) int64 { return s.Connections }),
		counter("connections_accepted_total", "Redis client connections accepted.", func(s ProxyStats) int64 { return s.Accepted }),
		counter("connections_rejected_total", "Redis client connections refused because the proxy had -max-clients open.", func(s ProxyStats) int64 { return s.Rejected }),
	)
	return p
}

// Command records one command's result and latency.
func (p *Proxy) Command(name string, failed bool, took time.Duration) {
	key := proxyCommand{name, failed}
	p.mu.Lock()
	m, ok := p.cache[key]
	if !ok {
		result := "ok"
		if failed {
			result = "error"
		}
		m = proxyMetrics{count: p.commands.WithLabelValues(name, result), latency: p.seconds.WithLabelValues(name)}
		p.cache[key] = m
	}
	p.mu.Unlock()
	m.count.Inc()
	m.latency.Observe(took.Seconds())
}
