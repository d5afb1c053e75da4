// Package metrics exposes Catena's processes to Prometheus
// (github.com/prometheus/client_golang). Every metric is named
// catena_<subsystem>_<name> with Prometheus' units and suffixes (_total
// for counters, _seconds, _bytes); docs/operations.md lists them.
//
// The protocol state machines know nothing of this package: metrics come
// from the driver around them. Loop observes the messages each step takes
// and emits (a node.Observer); the collectors read a machine's read-only
// accessors at scrape time, on the machine's own goroutine (through an
// Inspect function such as node.Loop.Inspect); transport and storage
// report through counters and hooks of their own.
package metrics

import (
	"context"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/catena-kv/catena/internal/wire"
)

const namespace = "catena"

// latencyBuckets (seconds) span a request handled in tens of
// microseconds to a commit stuck behind a slow disk for seconds.
var latencyBuckets = prometheus.ExponentialBuckets(25e-6, 2, 18)

// Inspect runs f on the goroutine that owns a state machine and waits for
// it (node.Loop.Inspect); collectors read machines through it.
type Inspect func(ctx context.Context, f func(now wire.Time)) error

// inspectTimeout bounds how long a scrape waits for a busy loop.
const inspectTimeout = 5 * time.Second

// NewRegistry returns a registry holding the Go runtime's and the
// process's standard metrics and catena_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	return reg
}

// buildInfo is catena_build_info: 1, labelled with the module version,
// VCS revision and Go version the binary was built from.
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "(devel)", "unknown", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		goVersion = info.GoVersion
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; labelled with the version, VCS revision and Go version catena was built from.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return g
}

// Handler serves reg's metrics in Prometheus' text format (/metrics).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
