package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/catena-kv/catena/client"
)

// Environment variables that make TestObservability fail, rather than
// skip a part, when a Debian tool it runs is missing.
const (
	requireChromiumEnv   = "CATENA_REQUIRE_CHROMIUM"   // chromium (the status page)
	requirePrometheusEnv = "CATENA_REQUIRE_PROMETHEUS" // promtool and prometheus (Debian package prometheus)
	// screenshotEnv names where the status-page subtest saves its
	// screenshot (default: a temporary file). README's docs/status-page.png
	// comes from: CATENA_STATUS_SCREENSHOT=$PWD/docs/status-page.png go test ./cmd/catena -run TestObservability/status-page -count=1
	screenshotEnv = "CATENA_STATUS_SCREENSHOT"
)

// observeWait bounds each wait for the cluster, Chromium or Prometheus;
// generous, so a busy machine passes.
const observeWait = 90 * time.Second

// lookTool returns the path of a tool, or skips the test with how to
// install it, or fails when requireEnv is set.
func lookTool(t *testing.T, name, pkg, requireEnv string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found (install it with: apt-get install -y %s)", name, pkg)
	if os.Getenv(requireEnv) != "" {
		t.Fatalf("%s, and %s is set", msg, requireEnv)
	}
	t.Skipf("skipping: %s; set %s=1 to make this a failure", msg, requireEnv)
	return ""
}

// devHTTP is one process of catena dev as its banner lists it.
type devHTTP struct{ name, addr, http string }

// httpAddrs returns the processes of dev's banner with their HTTP
// addresses.
func (d *devRun) httpAddrs() []devHTTP {
	d.t.Helper()
	var out []devHTTP
	for _, m := range regexp.MustCompile(`(?m)^  (\S+)\s+(\S+)  https?://(\S+)/  pid`).FindAllStringSubmatch(d.stdout.String(), -1) {
		out = append(out, devHTTP{name: m[1], addr: m[2], http: m[3]})
	}
	if len(out) == 0 {
		d.t.Fatalf("no HTTP addresses in dev's banner:\n%s", d.stdout.String())
	}
	return out
}

// httpsClient trusts the CA of the catena dev a test started
// (trustDevCA); plain http.Get for others.
var httpsClient = http.DefaultClient

// trustDevCA makes httpGet trust the CA of dev's directory dir.
func trustDevCA(t *testing.T, dir string) {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	httpsClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := httpsClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// scrape returns a process's metrics, parsed.
func scrape(t *testing.T, httpAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := new(expfmt.TextParser).TextToMetricFamilies(strings.NewReader(httpGet(t, "https://"+httpAddr+"/metrics")))
	if err != nil {
		t.Fatalf("metrics of %s: %v", httpAddr, err)
	}
	return families
}

// value returns the sum of a family's samples whose labels include
// labels (name=value pairs), and whether the family exists.
func value(families map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, true
}

// awaitCondition polls f until it returns "" (met) or observeWait passed,
// and fails with f's last answer.
func awaitCondition(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(observeWait)
	for {
		missing := f()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, observeWait, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestObservability runs one catena dev with a causal keyspace beside the
// default one and a writer keeping both busy, kills a server and lets it
// rejoin, and checks what the cluster shows:
// every process's /metrics (names, values, promtool check metrics), the
// status page and its JSON against catena status --json, the page in
// headless Chromium (with a screenshot), and a Prometheus server scraping
// the cluster.
func TestObservability(t *testing.T) {
	base := freeBasePort(t, 3)
	if os.Getenv(screenshotEnv) != "" {
		base = 7100 // the README's screenshot shows catena dev's default addresses
	}
	d := startDev(t, nil, "-servers", "3", "-base-port", strconv.Itoa(base), "-restart-delay", "2s")
	dir := d.awaitBanner()
	trustDevCA(t, dir)
	procs := d.httpAddrs()
	if len(procs) != 5 || procs[0].name != "master" || procs[0].http != fmt.Sprintf("127.0.0.1:%d", base+devHTTPOffset) || procs[4].name != "proxy" {
		t.Fatalf("dev's processes: %+v, want the master's HTTP at base+%d, 3 servers and the proxy", procs, devHTTPOffset)
	}
	servers := procs[1:4]
	masterAddr, masterHTTP := procs[0].addr, procs[0].http
	if !strings.Contains(d.stdout.String(), "status page: https://"+masterHTTP+"/") {
		t.Errorf("dev does not print the status page's address:\n%s", d.stdout.String())
	}

	// A second keyspace, causal, beside the default one; a writer keeps
	// updates flowing to both, so there is throughput to see.
	ctx, cancel := context.WithCancel(context.Background())
	c, err := client.Dial(ctx, masterAddr, client.Options{TLS: d.tlsFiles()})
	if err != nil {
		t.Fatal(err)
	}
	create, cancelCreate := context.WithTimeout(ctx, observeWait)
	_, err = c.CreateKeyspace(create, client.Keyspace{Name: "sessions", Prefix: "s/", Mode: "causal", K: 2, Replicas: 3, Volumes: 1})
	cancelCreate()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("key-%d", i%500)
			if i%2 == 1 {
				key = "s/" + key
			}
			c.Put(ctx, key, []byte(strings.Repeat("v", 100)))
			time.Sleep(2 * time.Millisecond)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); c.Close() })

	// Kill s1: the master removes it when its lease has expired, dev
	// restarts it, and it rejoins at the tail with a state transfer.
	pid, err := os.ReadFile(filepath.Join(dir, "s1.pid"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitCondition(t, "s1 rejoined", func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil {
			return err.Error()
		}
		if ready, missing := st.Ready([]string{procs[1].addr, procs[2].addr, procs[3].addr}); !ready {
			return missing
		}
		if len(st.Volumes) != 2 {
			return fmt.Sprintf("%d volumes", len(st.Volumes))
		}
		for _, cfg := range st.Volumes {
			if len(cfg.Chain) != 3 || cfg.Epoch < 4 {
				return fmt.Sprintf("volume %d is %+v", cfg.Volume, cfg)
			}
		}
		return ""
	})

	t.Run("metrics", func(t *testing.T) {
		want := map[string][]string{
			"master": {"catena_master_leader", "catena_master_reconfigurations_total", "catena_master_leases_granted_total", "catena_master_leases_expired_total",
				"catena_master_servers", "catena_volume_epoch", "catena_volume_chain_length", "catena_transport_sent_bytes_total", "catena_node_messages_received_total", "catena_build_info"},
			"server": {"catena_replica_role", "catena_replica_epoch", "catena_replica_applied_sequence", "catena_replica_sent_updates",
				"catena_server_lease_valid", "catena_server_clock_trusted", "catena_server_clock_offset_seconds",
				"catena_storage_commit_duration_seconds", "catena_storage_object_cache_reads_total", "catena_transport_received_bytes_total", "catena_transport_reconnects_total",
				"catena_state_transfer_bytes_total", "catena_build_info"},
			"proxy": {"catena_proxy_connections", "catena_proxy_connections_accepted_total", "catena_build_info"},
		}
		for _, p := range procs {
			kind := "server"
			if p.name == "master" || p.name == "proxy" {
				kind = p.name
			}
			families := scrape(t, p.http)
			for _, name := range want[kind] {
				if families[name] == nil {
					t.Errorf("%s (%s): no %s", p.name, p.http, name)
				}
			}
			if kind == "server" {
				for _, volume := range []string{"0", "1"} {
					if v, _ := value(families, "catena_replica_role", "volume", volume); v != 1 {
						t.Errorf("%s: catena_replica_role{volume=%s} sums to %v, want 1 (one role)", p.name, volume, v)
					}
				}
			}
		}
		master := scrape(t, masterHTTP)
		for _, tc := range []struct {
			name   string
			labels []string
		}{
			{"catena_master_reconfigurations_total", []string{"kind", "remove"}},
			{"catena_master_reconfigurations_total", []string{"kind", "extend"}},
			{"catena_master_reconfigurations_total", []string{"kind", "promote"}},
			{"catena_master_leases_expired_total", nil},
			{"catena_master_leases_granted_total", nil},
		} {
			if v, _ := value(master, tc.name, tc.labels...); v < 1 {
				t.Errorf("master: %s%v = %v after s1 was killed and rejoined, want at least 1", tc.name, tc.labels, v)
			}
		}
		// s1 received a snapshot when it rejoined; the head handles the
		// writer's updates.
		if v, _ := value(scrape(t, procs[1].http), "catena_state_transfer_bytes_total", "direction", "received"); v <= 0 {
			t.Errorf("s1 rejoined but received %v bytes of state", v)
		}
		// (A server that took no request in has no request metrics yet.)
		awaitCondition(t, "the head counts the writer's puts", func() string {
			requests, latencies := 0.0, 0.0
			for _, p := range servers {
				families := scrape(t, p.http)
				v, _ := value(families, "catena_server_requests_total", "op", "put")
				requests += v
				v, _ = value(families, "catena_server_request_duration_seconds", "op", "put")
				latencies += v
			}
			if requests == 0 || latencies == 0 {
				return fmt.Sprintf("servers counted %v puts and %v latencies", requests, latencies)
			}
			return ""
		})
	})

	t.Run("promtool", func(t *testing.T) {
		promtool := lookTool(t, "promtool", "prometheus", requirePrometheusEnv)
		for _, p := range procs {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(httpGet(t, "https://"+p.http+"/metrics"))
			if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("promtool check metrics on %s (%s): %v\n%s", p.name, p.http, err, out)
			}
		}
	})

	t.Run("status-json", func(t *testing.T) {
		var page client.ClusterStatus
		if err := json.Unmarshal([]byte(httpGet(t, "https://"+masterHTTP+"/status.json")), &page); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCatena(t, "", "status", "-json", "-master", masterAddr,
			"-tls-ca", d.tlsFiles().CA, "-tls-cert", d.tlsFiles().Cert, "-tls-key", d.tlsFiles().Key)
		if code != 0 {
			t.Fatalf("catena status -json: exit status %d\n%s", code, stderr)
		}
		var cli client.ClusterStatus
		if err := json.Unmarshal([]byte(stdout), &cli); err != nil {
			t.Fatalf("catena status -json: %v\n%s", err, stdout)
		}
		// Sequence numbers move on between the two; the rest agrees.
		addrs := func(s client.ClusterStatus) []string {
			var out []string
			for _, srv := range s.Servers {
				out = append(out, fmt.Sprintf("%s alive=%v", srv.Addr, srv.Alive))
			}
			return out
		}
		if page.Leader != masterAddr || !slices.Equal(page.Masters, cli.Masters) || fmt.Sprint(page.Volumes) != fmt.Sprint(cli.Volumes) || !slices.Equal(addrs(page), addrs(cli)) {
			t.Errorf("/status.json and catena status -json disagree:\n%+v\n%+v", page, cli)
		}
		if len(page.Servers) != 3 || len(page.Volumes) != 2 || len(page.Volumes[0].Chain) != 3 || len(page.Keyspaces) != 2 || page.Keyspaces[1].Mode != "causal" {
			t.Errorf("/status.json: %+v", page)
		}
	})

	t.Run("status-page", func(t *testing.T) {
		chromium := lookTool(t, "chromium", "chromium", requireChromiumEnv)
		pageURL := "https://" + masterHTTP + "/"
		// The page measures throughput between two of its loads.
		awaitCondition(t, "the page shows throughput", func() string {
			body := httpGet(t, pageURL)
			if !regexp.MustCompile(`id="throughput">[0-9]`).MatchString(body) {
				return "no throughput yet"
			}
			return ""
		})
		profile := t.TempDir()
		headless := func(args ...string) []byte {
			ctx, cancel := context.WithTimeout(context.Background(), observeWait)
			defer cancel()
			all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
				"--user-data-dir=" + profile, "--ignore-certificate-errors", "--window-size=1280,1120"}, args...)
			cmd := exec.CommandContext(ctx, chromium, append(all, pageURL)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			return out
		}
		dom := string(headless("--dump-dom"))
		for _, p := range servers {
			if !strings.Contains(dom, `data-server="`+p.addr+`"`) {
				t.Errorf("the page in Chromium does not show server %s", p.addr)
			}
		}
		for _, role := range []string{"head", "middle", "tail"} {
			if !strings.Contains(dom, `data-role="`+role+`"`) {
				t.Errorf("the page in Chromium shows no %s", role)
			}
		}
		for _, want := range []string{"Catena cluster", masterAddr, "leader", "promote", "remove", ">default<", ">sessions<", "causal, k=2"} {
			if !strings.Contains(dom, want) {
				t.Errorf("the page in Chromium does not show %q", want)
			}
		}
		if !regexp.MustCompile(`id="throughput">[0-9]`).MatchString(dom) {
			t.Errorf("the page in Chromium shows no throughput")
		}
		shot := os.Getenv(screenshotEnv)
		if shot == "" {
			shot = filepath.Join(t.TempDir(), "status-page.png")
		}
		headless("--screenshot=" + shot)
		f, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg, err := png.DecodeConfig(f)
		if err != nil || cfg.Width < 1000 || cfg.Height < 800 {
			t.Fatalf("screenshot %s: %v, %dx%d", shot, err, cfg.Width, cfg.Height)
		}
		t.Logf("screenshot of the status page: %s", shot)
	})

	t.Run("prometheus", func(t *testing.T) {
		prometheus := lookTool(t, "prometheus", "prometheus", requirePrometheusEnv)
		work := t.TempDir()
		var targets []string
		for _, p := range procs {
			targets = append(targets, "'"+p.http+"'")
		}
		config := filepath.Join(work, "prometheus.yml")
		if err := os.WriteFile(config, []byte(prometheusConfig(targets, filepath.Join(dir, "tls", "ca.crt"))), 0o644); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := ln.Addr().String()
		ln.Close()
		var logs syncBuffer
		cmd := exec.Command(prometheus, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(work, "data"),
			"--web.listen-address="+listen, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("prometheus's log:\n%s", logs.String())
			}
		})
		query := func(q string) (string, error) {
			resp, err := http.Get("http://" + listen + "/api/v1/query?query=" + url.QueryEscape(q))
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			var r struct {
				Status string
				Data   struct {
					Result []struct {
						Metric map[string]string
						Value  []any
					}
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				return "", err
			}
			var lines []string
			for _, s := range r.Data.Result {
				lines = append(lines, fmt.Sprintf("%v %v", s.Metric, s.Value[1]))
			}
			slices.Sort(lines)
			return strings.Join(lines, "\n"), nil
		}
		awaitCondition(t, "Prometheus scrapes every process", func() string {
			got, err := query(`sum(up)`)
			if err != nil {
				return err.Error()
			}
			if want := fmt.Sprintf("map[] %d", len(procs)); got != want {
				return "sum(up): " + got + ", want " + want
			}
			return ""
		})
		const q = `count by (role) (catena_replica_role)`
		want := "map[role:head] 2\nmap[role:middle] 2\nmap[role:tail] 2"
		var got string
		awaitCondition(t, "Prometheus answers "+q, func() string {
			got, err = query(q)
			if err != nil {
				return err.Error()
			}
			if got != want {
				return "answer:\n" + got
			}
			return ""
		})
		t.Logf("Prometheus query %s:\n%s", q, got)
	})
}

// prometheusConfig scrapes targets every second over HTTPS, trusting
// the CA in caFile.
func prometheusConfig(targets []string, caFile string) string {
	return `global:
  scrape_interval: 1s
scrape_configs:
  - job_name: catena
    scheme: https
    tls_config:
      ca_file: '` + caFile + `'
    static_configs:
      - targets: [` + strings.Join(targets, ", ") + `]
`
}
