package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestProxy(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := NewProxy(reg, func() ProxyStats { return ProxyStats{Connections: 3, Accepted: 7, Rejected: 1} })
	p.Command("get", false, time.Millisecond)
	p.Command("get", false, 2*time.Millisecond)
	p.Command("get", true, time.Millisecond)
	p.Command("unknown", true, 0)
	for _, tc := range []struct {
		command, result string
		want            float64
	}{{"get", "ok", 2}, {"get", "error", 1}, {"unknown", "error", 1}, {"set", "ok", 0}} {
		if n := testutil.ToFloat64(p.commands.WithLabelValues(tc.command, tc.result)); n != tc.want {
			t.Errorf("commands_total{command=%s,result=%s} = %v, want %v", tc.command, tc.result, n, tc.want)
		}
	}
	if n := testutil.CollectAndCount(p.seconds); n != 2 { // get and unknown
		t.Errorf("%d latency histograms, want 2", n)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.Gauge != nil {
				got[f.GetName()] = m.Gauge.GetValue()
			}
			if m.Counter != nil && len(m.GetLabel()) == 0 {
				got[f.GetName()] = m.Counter.GetValue()
			}
		}
	}
	for name, want := range map[string]float64{"catena_proxy_connections": 3, "catena_proxy_connections_accepted_total": 7, "catena_proxy_connections_rejected_total": 1} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
