package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisBenchmarkRequirements are the programs `catena-lab bench redis` runs.
var RedisBenchmarkRequirements = []Requirement{
	{"redis-server", "redis-server"},
	{"redis-benchmark", "redis-tools"},
}

// RedisBenchmarkOptions configure RunRedisBenchmark. The zero values of
// Tests, Requests, Pipeline and Clients take redis-benchmark's arguments
// of the issue that asked for it: -t set,get,incr,mset -n 100000 -P 16
// (and redis-benchmark's default of 50 clients).
type RedisBenchmarkOptions struct {
	// CatenaBinary runs `catena dev`.
	CatenaBinary string
	// Dir holds the processes' data and logs.
	Dir      string
	Tests    string
	Requests int
	Pipeline int
	Clients  int
	// KeySpace, when positive, is redis-benchmark's -r: random keys out
	// of that many, instead of one key per test.
	KeySpace int
	// Install installs redis-server and redis-tools with apt-get when
	// missing.
	Install  bool
	Progress io.Writer
	// Command is the command line, for the report.
	Command string
}

func (o *RedisBenchmarkOptions) defaults() {
	if o.Tests == "" {
		o.Tests = "set,get,incr,mset"
	}
	if o.Requests == 0 {
		o.Requests = 100_000
	}
	if o.Pipeline == 0 {
		o.Pipeline = 16
	}
	if o.Clients == 0 {
		o.Clients = 50
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// args are redis-benchmark's arguments, without the address.
func (o *RedisBenchmarkOptions) args() []string {
	a := []string{"-t", o.Tests, "-n", strconv.Itoa(o.Requests), "-P", strconv.Itoa(o.Pipeline), "-c", strconv.Itoa(o.Clients)}
	if o.KeySpace > 0 {
		a = append(a, "-r", strconv.Itoa(o.KeySpace))
	}
	return a
}

// RedisBenchmarkRow is one test's result on one system.
type RedisBenchmarkRow struct {
	Test     string
	RPS      float64 // requests (commands) per second
	P50, P99 float64 // milliseconds
}

// RedisBenchmarkReport is what RunRedisBenchmark measured.
type RedisBenchmarkReport struct {
	Date          time.Time
	Machine       Machine
	Command       string
	BenchmarkArgs string
	LoadAtStart   float64
	CatenaSetup   string
	RedisSetup    string
	RedisVersion  string
	CatenaVersion string
	Catena, Redis []RedisBenchmarkRow
}

// RunRedisBenchmark runs redis-benchmark against the Redis-protocol proxy
// of a `catena dev` cluster, then against a redis-server, one after the
// other on this machine, with the same arguments.
func RunRedisBenchmark(ctx context.Context, o RedisBenchmarkOptions) (*RedisBenchmarkReport, error) {
	o.defaults()
	logf := func(format string, args ...any) { fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...) }
	if o.Install {
		if err := ensureInstalled(ctx, logWriter(logf), RedisBenchmarkRequirements); err != nil {
			return nil, err
		}
	}
	for _, r := range RedisBenchmarkRequirements {
		if _, err := exec.LookPath(r.Program); err != nil {
			return nil, fmt.Errorf("%s not found (apt-get install -y %s)", r.Program, r.Package)
		}
	}
	rep := &RedisBenchmarkReport{Date: time.Now(), Machine: DescribeMachine(), Command: o.Command,
		BenchmarkArgs: strings.Join(o.args(), " "), LoadAtStart: loadAverage(), CatenaVersion: catenaVersion()}

	base, err := freeDevBasePort(1)
	if err != nil {
		return nil, err
	}
	proxy := fmt.Sprintf("127.0.0.1:%d", base+devRedisPortOffset)
	logf("starting catena dev (base port %d, proxy %s)", base, proxy)
	dev, err := startDev(ctx, o.Dir, o.CatenaBinary, "-dir", filepath.Join(o.Dir, "dev"),
		"-base-port", strconv.Itoa(base), "-redis", proxy, "-http-offset", "0")
	if err != nil {
		return nil, err
	}
	defer dev.Stop(stopGrace)
	rep.CatenaSetup = "`catena dev`: a master, 3 servers (one chain, t=3, Pebble with fsync on every group commit) and one `catena proxy`, as separate processes, mutual TLS between them (dev's default); redis-benchmark on the proxy's plaintext loopback port"
	logf("redis-benchmark %s against catena dev's proxy", rep.BenchmarkArgs)
	if rep.Catena, err = runRedisBenchmark(ctx, proxy, o.args()); err != nil {
		return nil, fmt.Errorf("catena: %w (logs in %s)", err, o.Dir)
	}
	dev.Stop(stopGrace)

	logf("starting redis-server")
	sys, err := StartRedis(ctx, RedisOptions{Dir: o.Dir})
	if err != nil {
		if sys != nil {
			sys.Stop()
		}
		return nil, err
	}
	defer sys.Stop()
	rep.RedisSetup, rep.RedisVersion = sys.Setup, sys.Version
	logf("redis-benchmark %s against redis-server", rep.BenchmarkArgs)
	if rep.Redis, err = runRedisBenchmark(ctx, sys.Addr, o.args()); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return rep, nil
}

// devRedisPortOffset is where catena dev puts its proxy relative to
// -base-port (cmd/catena's devRedisPortOffset).
const devRedisPortOffset = 279

// freeDevBasePort finds a base port with the ports catena dev -sites
// sites takes (per site, 1000 apart: base to base+3 and the proxy's
// plaintext and TLS ports) free.
func freeDevBasePort(sites int) (int, error) {
	for range 100 {
		base := 20000 + rand.IntN(30000)
		free := true
		var ports []int
		for i := range sites {
			b := base + 1000*i
			ports = append(ports, b, b+1, b+2, b+3, b+devRedisPortOffset, b+devRedisPortOffset+1)
		}
		for _, port := range ports {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, errors.New("no free ports for catena dev")
}

// runRedisBenchmark runs redis-benchmark against addr and parses its CSV.
// redis-benchmark exits at the first error reply, so a complete result
// means every request succeeded.
func runRedisBenchmark(ctx context.Context, addr string, args []string) ([]RedisBenchmarkRow, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "redis-benchmark", append([]string{"-h", host, "-p", port, "--csv"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("redis-benchmark: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if strings.Contains(stderr.String(), "Error") {
		return nil, fmt.Errorf("redis-benchmark reported errors: %s", strings.TrimSpace(stderr.String()))
	}
	rows, err := parseBenchmarkCSV(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark output: %w\n%s", err, stdout.String())
	}
	if want := len(strings.Split(args[1], ",")); len(rows) != want {
		return nil, fmt.Errorf("redis-benchmark reported %d tests, want %d:\n%s%s", len(rows), want, stdout.String(), stderr.String())
	}
	return rows, nil
}

// parseBenchmarkCSV reads redis-benchmark --csv output: a header naming
// the columns, then one row per test.
func parseBenchmarkCSV(data []byte) ([]RedisBenchmarkRow, error) {
	records, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, errors.New("no output")
	}
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	for _, name := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("no %q column in %v", name, records[0])
		}
	}
	var rows []RedisBenchmarkRow
	for _, rec := range records[1:] {
		var row RedisBenchmarkRow
		row.Test = rec[col["test"]]
		for name, dst := range map[string]*float64{"rps": &row.RPS, "p50_latency_ms": &row.P50, "p99_latency_ms": &row.P99} {
			if *dst, err = strconv.ParseFloat(rec[col[name]], 64); err != nil {
				return nil, fmt.Errorf("%s of %s: %w", name, row.Test, err)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteMarkdown writes the report as Markdown.
func (r *RedisBenchmarkReport) WriteMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Run on %s.\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- Machine: %d cores (%s), %.1f GiB memory, %s, Linux %s, %s\n", m.Cores, m.CPU, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	fmt.Fprintf(w, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- redis-benchmark's arguments for both: `%s` (MSET sets 10 keys per request).\n", r.BenchmarkArgs)
	fmt.Fprintf(w, "- Catena (%s): %s.\n", r.CatenaVersion, r.CatenaSetup)
	fmt.Fprintf(w, "- Redis (%s): %s.\n", r.RedisVersion, r.RedisSetup)
	fmt.Fprintf(w, "- One after the other on the same machine, redis-benchmark on it too; 1-minute load average before the run: %.1f.\n\n", r.LoadAtStart)
	fmt.Fprintln(w, "| test | Catena requests/s | p50 ms | p99 ms | Redis requests/s | p50 ms | p99 ms | Catena/Redis |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	redis := map[string]RedisBenchmarkRow{}
	for _, row := range r.Redis {
		redis[row.Test] = row
	}
	for _, c := range r.Catena {
		rd := redis[c.Test]
		ratio := "-"
		if rd.RPS > 0 {
			ratio = fmt.Sprintf("%.3f", c.RPS/rd.RPS)
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %s |\n", c.Test, c.RPS, c.P50, c.P99, rd.RPS, rd.P50, rd.P99, ratio)
	}
}

// Markers delimit the generated part of `catena bench redis` in
// docs/benchmarks.md.
const (
	RedisBeginMarker = "<!-- BEGIN catena bench redis output: generated, do not edit -->"
	RedisEndMarker   = "<!-- END catena bench redis output -->"
)

// UpdateMarkdownFile writes the report between its markers in path, or
// appends a section with them when path lacks them.
func (r *RedisBenchmarkReport) UpdateMarkdownFile(path string) error {
	var gen bytes.Buffer
	r.WriteMarkdown(&gen)
	return updateMarkedSection(path, RedisBeginMarker, RedisEndMarker, "redis-benchmark: Catena's proxy and Redis", gen.Bytes())
}

// updateMarkedSection writes gen between the markers begin and end in the
// Markdown file path, keeping the text outside them; a file without them
// gets a section with the heading and the markers appended.
func updateMarkedSection(path, begin, end, heading string, gen []byte) error {
	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	block := begin + "\n\n" + strings.TrimSpace(string(gen)) + "\n\n" + end
	b, e := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	var out bytes.Buffer
	if b < 0 || e < b {
		out.Write(doc)
		if len(doc) > 0 && !bytes.HasSuffix(doc, []byte("\n")) {
			out.WriteString("\n")
		}
		out.WriteString("\n## " + heading + "\n\n" + block + "\n")
	} else {
		out.Write(doc[:b])
		out.WriteString(block)
		out.Write(doc[e+len(end):])
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
