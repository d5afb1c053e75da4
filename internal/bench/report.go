package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goals the project set for Catena (issue 18; docs/benchmarks.md); not
// tests: a report shows which a run met.
const (
	goalVsEtcd      = 5.0 // Catena/etcd throughput on A, B and C
	goalWorkloads   = "ABC"
	goalP99         = 5 * time.Millisecond // Catena p99 on A, B and C
	goalReplication = 0.7                  // writes at t=3 / t=1 (A and the load)
)

// goalVsRedis is Catena/Redis (appendfsync everysec) throughput per
// workload; against Redis with appendfsync always (the durability-matched
// peer) Catena should be ahead (≥ 1) on every workload.
var goalVsRedis = map[string]float64{"A": 0.5, "B": 0.8, "C": 1.0}

// workloadsRun returns the workload letters that have runs, in A..F order.
func (r *Report) workloadsRun() []string {
	var out []string
	for _, w := range Workloads {
		for _, run := range r.Runs {
			if run.Workload == w.Name {
				out = append(out, w.Name)
				break
			}
		}
	}
	return out
}

func (r *Report) systemsRun() []string {
	var out []string
	for _, run := range r.Runs {
		if !slices.Contains(out, run.System) {
			out = append(out, run.System)
		}
	}
	return out
}

// table is a header and rows of cells, rendered as text or Markdown.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.header, "\t")+"\t")
	for _, row := range t.rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

func (t *table) markdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.header, " | "))
	seps := make([]string, len(t.header))
	for i := range seps {
		seps[i] = "---:"
		if i == 0 {
			seps[i] = "---"
		}
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
	for _, row := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// resultsTable: one row per workload and system.
func (r *Report) resultsTable() *table {
	t := &table{header: []string{"workload", "system", "ops/s", "p50 ms", "p99 ms", "errors", "server CPU µs/op", "client CPU µs/op"}}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		for _, s := range r.systemsRun() {
			run, ok := r.Find(s, w)
			if !ok {
				continue
			}
			all := run.Ops[OpAll]
			ops := fmt.Sprintf("%.0f", run.Throughput())
			if !run.Complete {
				ops += " (cut short)"
			}
			scpu, ccpu := run.CPUPerOp()
			t.add(w, s, ops, ms(all.P50), ms(all.P99), fmt.Sprint(run.Errors), fmt.Sprint(scpu.Microseconds()), fmt.Sprint(ccpu.Microseconds()))
		}
	}
	return t
}

// ratioTable: Catena (t=3) against etcd and Redis per workload.
func (r *Report) ratioTable() *table {
	t := &table{header: []string{"workload", "catena/etcd ops/s", "catena/redis ops/s", "catena/redis-always ops/s", "catena p99 / etcd p99", "catena p99 / redis p99"}}
	for _, w := range r.workloadsRun() {
		c, ok := r.Find(SystemCatena, w)
		_, etcd := r.Find(SystemEtcd, w)
		_, redis := r.Find(SystemRedis, w)
		_, always := r.Find(SystemRedisAlways, w)
		if !ok || !etcd && !redis && !always {
			continue // nothing to compare with
		}
		row := []string{w}
		for _, other := range []string{SystemEtcd, SystemRedis, SystemRedisAlways} {
			o, ok := r.Find(other, w)
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, ratio(c.Throughput(), o.Throughput()))
		}
		for _, other := range []string{SystemEtcd, SystemRedis} {
			o, ok := r.Find(other, w)
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, ratio(float64(c.Ops[OpAll].P99), float64(o.Ops[OpAll].P99)))
		}
		t.add(row...)
	}
	return t
}

// protocolTable: Catena through its Redis-protocol proxy (go-redis)
// against Catena through its Go client, and against Redis through the
// same go-redis.
func (r *Report) protocolTable() *table {
	t := &table{header: []string{"workload", "catena-resp ops/s", "catena-resp/catena ops/s", "catena-resp/redis ops/s", "catena-resp p99 ms", "redis p99 ms"}}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		p, ok := r.Find(SystemCatenaRESP, w)
		if !ok {
			continue
		}
		row := []string{w, fmt.Sprintf("%.0f", p.Throughput())}
		for _, other := range []string{SystemCatena, SystemRedis} {
			if o, ok := r.Find(other, w); ok {
				row = append(row, ratio(p.Throughput(), o.Throughput()))
			} else {
				row = append(row, "-")
			}
		}
		row = append(row, ms(p.Ops[OpAll].P99))
		if o, ok := r.Find(SystemRedis, w); ok {
			row = append(row, ms(o.Ops[OpAll].P99))
		} else {
			row = append(row, "-")
		}
		t.add(row...)
	}
	return t
}

// taxTable: Catena with t=3 against t=1.
func (r *Report) taxTable() *table {
	t := &table{header: []string{"workload", "t=3 ops/s", "t=1 ops/s", "t=3/t=1", "t=3 p99 ms", "t=1 p99 ms"}}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		c3, ok3 := r.Find(SystemCatena, w)
		c1, ok1 := r.Find(SystemCatenaT1, w)
		if !ok3 || !ok1 {
			continue
		}
		t.add(w, fmt.Sprintf("%.0f", c3.Throughput()), fmt.Sprintf("%.0f", c1.Throughput()),
			ratio(c3.Throughput(), c1.Throughput()), ms(c3.Ops[OpAll].P99), ms(c1.Ops[OpAll].P99))
	}
	return t
}

// causalTable: Catena with the records in a causal+ keyspace (t=3, k=2)
// against strong Catena (t=3), and the causal clients' metadata.
func (r *Report) causalTable() *table {
	t := &table{header: []string{"workload", "strong ops/s", "causal ops/s", "causal/strong", "strong p99 ms", "causal p99 ms",
		"strong, reads at any member ops/s", "causal/any-member", "metadata mean keys", "metadata max keys", "clients"}}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		c, ok := r.Find(SystemCatenaCausal, w)
		if !ok {
			continue
		}
		row := []string{w, "-", fmt.Sprintf("%.0f", c.Throughput()), "-", "-", ms(c.Ops[OpAll].P99), "-", "-"}
		if s, ok := r.Find(SystemCatena, w); ok {
			row[1], row[3], row[4] = fmt.Sprintf("%.0f", s.Throughput()), ratio(c.Throughput(), s.Throughput()), ms(s.Ops[OpAll].P99)
		}
		if a, ok := r.Find(SystemCatenaCRAQ, w); ok {
			row[6], row[7] = fmt.Sprintf("%.0f", a.Throughput()), ratio(c.Throughput(), a.Throughput())
		}
		if m := c.Metadata; m != nil {
			row = append(row, fmt.Sprintf("%.1f", m.Mean), fmt.Sprint(m.Max), fmt.Sprint(m.Clients))
		} else {
			row = append(row, "-", "-", "-")
		}
		t.add(row...)
	}
	return t
}

// roundsTable: with several rounds, each (phase, system)'s throughput
// and server CPU per operation over the rounds: the median (the run the
// other tables show), the least and the most, and the spread of
// throughput ((most − least) / median).
func (r *Report) roundsTable() *table {
	t := &table{header: []string{"workload", "system", "rounds", "ops/s median", "ops/s min", "ops/s max", "spread", "server CPU µs/op median", "min", "max"}}
	if len(r.Rounds) == 0 {
		return t
	}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		for _, s := range r.systemsRun() {
			med, ok := r.Find(s, w)
			if !ok {
				continue
			}
			var ops []float64
			var cpu []time.Duration
			for _, run := range r.Rounds {
				if run.System == s && run.Workload == w {
					ops = append(ops, run.Throughput())
					c, _ := run.CPUPerOp()
					cpu = append(cpu, c)
				}
			}
			slices.Sort(ops)
			slices.Sort(cpu)
			spread := "-"
			if m := med.Throughput(); m > 0 {
				spread = fmt.Sprintf("%.0f%%", 100*(ops[len(ops)-1]-ops[0])/m)
			}
			t.add(w, s, fmt.Sprint(len(ops)), fmt.Sprintf("%.0f", med.Throughput()), fmt.Sprintf("%.0f", ops[0]), fmt.Sprintf("%.0f", ops[len(ops)-1]), spread,
				fmt.Sprint(cpu[(len(cpu)-1)/2].Microseconds()), fmt.Sprint(cpu[0].Microseconds()), fmt.Sprint(cpu[len(cpu)-1].Microseconds()))
		}
	}
	return t
}

// opsTable: per operation kind latencies.
func (r *Report) opsTable() *table {
	t := &table{header: []string{"workload", "system", "operation", "count", "errors", "p50 ms", "p99 ms", "max ms"}}
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		for _, s := range r.systemsRun() {
			run, ok := r.Find(s, w)
			if !ok {
				continue
			}
			for _, op := range []string{OpRead, OpUpdate, OpInsert, OpRMW} {
				st, ok := run.Ops[op]
				if !ok {
					continue
				}
				t.add(w, s, op, fmt.Sprint(st.Count), fmt.Sprint(st.Errors), ms(st.P50), ms(st.P99), ms(st.Max))
			}
		}
	}
	return t
}

// Goal is one of the project's goals checked against a report.
type Goal struct {
	What   string
	Actual string
	Met    bool
}

// Goals checks the project's goals: Catena/etcd ≥ 5 and Catena p99 ≤
// 5 ms on A, B and C; Catena/Redis ≥ 0.5 on A, 0.8 on B, 1.0 on C;
// Catena ahead of Redis with appendfsync always on every workload; writes
// at t=3 at least 0.7 of t=1 (A and the load).
func (r *Report) Goals() []Goal {
	var out []Goal
	for _, w := range append([]string{"load"}, r.workloadsRun()...) {
		c, ok := r.Find(SystemCatena, w)
		if !ok {
			continue
		}
		abc := strings.Contains(goalWorkloads, w) && w != "load"
		if e, ok := r.Find(SystemEtcd, w); ok && abc {
			x := c.Throughput() / e.Throughput()
			out = append(out, Goal{What: fmt.Sprintf("%s: catena/etcd throughput ≥ %.0f", w, goalVsEtcd), Actual: fmt.Sprintf("%.2f", x), Met: x >= goalVsEtcd})
		}
		if abc {
			p := c.Ops[OpAll].P99
			out = append(out, Goal{What: fmt.Sprintf("%s: catena p99 ≤ %s ms", w, ms(goalP99)), Actual: ms(p) + " ms", Met: p <= goalP99})
		}
		if rd, ok := r.Find(SystemRedis, w); ok && goalVsRedis[w] > 0 {
			x := c.Throughput() / rd.Throughput()
			out = append(out, Goal{What: fmt.Sprintf("%s: catena/redis throughput ≥ %.1f", w, goalVsRedis[w]), Actual: fmt.Sprintf("%.2f", x), Met: x >= goalVsRedis[w]})
		}
		if ra, ok := r.Find(SystemRedisAlways, w); ok && w != "load" {
			x := c.Throughput() / ra.Throughput()
			out = append(out, Goal{What: fmt.Sprintf("%s: catena/redis-always throughput ≥ 1", w), Actual: fmt.Sprintf("%.2f", x), Met: x >= 1})
		}
		if t1, ok := r.Find(SystemCatenaT1, w); ok && (w == "A" || w == "load") {
			x := c.Throughput() / t1.Throughput()
			out = append(out, Goal{What: fmt.Sprintf("%s: catena t=3 / t=1 throughput ≥ %.1f", w, goalReplication), Actual: fmt.Sprintf("%.2f", x), Met: x >= goalReplication})
		}
	}
	return out
}

func (r *Report) goalsTable() *table {
	t := &table{header: []string{"goal", "measured", "met"}}
	for _, g := range r.Goals() {
		met := "no"
		if g.Met {
			met = "yes"
		}
		t.add(g.What, g.Actual, met)
	}
	return t
}

// WriteText prints the report's tables for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nThroughput and latency (%d records, %d operations per workload, %d threads)%s:\n\n", r.Sizing.Records, r.Sizing.Operations, r.Sizing.Threads, r.medianNote())
	r.resultsTable().text(w)
	if t := r.roundsTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nOver the rounds:")
		fmt.Fprintln(w)
		t.text(w)
	}
	if t := r.ratioTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nRatios:")
		fmt.Fprintln(w)
		t.text(w)
	}
	if t := r.taxTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nReplication tax (Catena t=3 vs t=1):")
		fmt.Fprintln(w)
		t.text(w)
	}
	if t := r.protocolTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nThrough the Redis protocol (catena-resp: go-redis through catena proxy):")
		fmt.Fprintln(w)
		t.text(w)
	}
	if t := r.causalTable(); len(t.rows) > 0 {
		fmt.Fprintf(w, "\nCausal+ (catena-causal: t=3, k=%d) against strong Catena (t=3); metadata: keys per client not yet known stable, sampled every %s:\n\n", causalK, metadataEvery)
		t.text(w)
	}
	if t := r.memoryTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nPeak resident memory per process (load and every workload):")
		fmt.Fprintln(w)
		t.text(w)
	}
	if t := r.goalsTable(); len(t.rows) > 0 {
		fmt.Fprintln(w, "\nGoals:")
		fmt.Fprintln(w)
		t.text(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// WriteMarkdown renders the measured part of docs/benchmarks.md.
func (r *Report) WriteMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Run on %s; the whole comparison took %s.\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"), formatDuration(r.Duration))
	fmt.Fprintf(w, "- Machine: %d cores (%s), %.1f GiB memory, %s, Linux %s, %s\n", m.Cores, m.CPU, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	fmt.Fprintf(w, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- Load average: %.1f before the run, %s after each phase (other work on the machine skews results)\n", r.LoadAtStart, r.loadRange())
	fmt.Fprintf(w, "- YCSB (go-ycsb core workload): %d records of %d fields × %d bytes, %d operations per workload, %d threads, writeallfields=true\n",
		r.Sizing.Records, r.Sizing.FieldCount, r.Sizing.FieldLength, r.Sizing.Operations, r.Sizing.Threads)
	fmt.Fprintln(w, "- Systems, each alone on the machine while it ran, with the benchmark client on the same machine:")
	for _, s := range r.Systems {
		fmt.Fprintf(w, "  - **%s** (%s): %s\n", s.Name, s.Version, s.Setup)
	}
	if n := r.rounds(); n > 1 {
		fmt.Fprintf(w, "- Rounds: %d, each system once per round, the systems' order rotated by one from round to round; every figure below is the run of median throughput of its system and phase, the spread over the rounds after it\n", n)
	}
	fmt.Fprint(w, "\n### Throughput and latency\n\n")
	fmt.Fprint(w, "Latency is per YCSB operation (a read-modify-write counts as one operation: its read and its write), measured in the client.\n\n")
	r.resultsTable().markdown(w)
	if t := r.roundsTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Over the rounds\n\n")
		t.markdown(w)
	}
	if t := r.ratioTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Catena against etcd and Redis\n\n")
		t.markdown(w)
	}
	if t := r.goalsTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Goals\n\n")
		t.markdown(w)
	}
	if t := r.taxTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Replication tax: Catena with t=3 against t=1\n\n")
		t.markdown(w)
	}
	if t := r.protocolTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Through the Redis protocol: catena-resp against Catena's Go client and Redis\n\n")
		fmt.Fprint(w, "catena-resp is the same 3-replica cluster driven by go-redis through `catena proxy`, the client library the Redis run uses.\n\n")
		t.markdown(w)
	}
	if t := r.causalTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Causal+ against strong: catena-causal against catena\n\n")
		fmt.Fprintf(w, "catena-causal is the same 3-replica cluster and Go client with the records in a causal+ keyspace "+
			"(ChainReaction, k=%d: the second replica answers a write, any replica the client may use answers a read). "+
			"Metadata is what a causal client keeps: the keys whose newest version it saw is not yet known stable "+
			"(mean of samples every %s over the clients, and the most one client held at once). "+
			"Strong with reads at any member is catena-craq: a strong keyspace whose client reads a clean key at whichever member it asks (CRAQ), "+
			"so its reads spread over the three processes as the causal client's do.\n\n", causalK, metadataEvery)
		t.markdown(w)
	}
	if t := r.memoryTable(); len(t.rows) > 0 {
		fmt.Fprint(w, "\n### Memory\n\n")
		fmt.Fprint(w, "Each process's peak resident memory (VmHWM) over its system's whole run, with default settings.\n\n")
		t.markdown(w)
	}
	if len(r.Notes) > 0 {
		fmt.Fprint(w, "\n### Notes from the run\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	fmt.Fprint(w, "\n### Latency per operation\n\n")
	r.opsTable().markdown(w)
}

// rounds is how many rounds the report's runs came from.
func (r *Report) rounds() int {
	n := 1
	for _, run := range r.Rounds {
		n = max(n, run.Round)
	}
	return n
}

// medianNote says, with several rounds, that the figures are medians.
func (r *Report) medianNote() string {
	if n := r.rounds(); n > 1 {
		return fmt.Sprintf(", the median of %d rounds", n)
	}
	return ""
}

// memoryTable: each system's processes' peak resident memory.
func (r *Report) memoryTable() *table {
	t := &table{header: []string{"system", "process", "peak RSS MiB"}}
	for _, s := range r.Systems {
		for _, m := range s.Memory {
			rss := "-"
			if m.PeakRSS > 0 {
				rss = fmt.Sprintf("%.0f", float64(m.PeakRSS)/(1<<20))
			}
			t.add(s.Name, m.Process, rss)
		}
	}
	return t
}

// loadRange is the range of load averages seen after the phases.
func (r *Report) loadRange() string {
	lo, hi := -1.0, -1.0
	for _, run := range r.Runs {
		if run.Load < 0 {
			continue
		}
		if lo < 0 || run.Load < lo {
			lo = run.Load
		}
		hi = max(hi, run.Load)
	}
	if lo < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f–%.1f", lo, hi)
}

func formatDuration(d time.Duration) string { return d.Round(time.Second).String() }

// Markers delimit the generated part of docs/benchmarks.md; text outside
// them is kept when the file is regenerated.
const (
	BeginMarker = "<!-- BEGIN catena bench compare output: generated, do not edit -->"
	EndMarker   = "<!-- END catena bench compare output -->"
)

// UpdateMarkdownFile writes the report between the markers of path, or
// creates path from a template when it does not exist or lacks them.
func (r *Report) UpdateMarkdownFile(path string) error {
	var gen bytes.Buffer
	r.WriteMarkdown(&gen)
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, SpliceGenerated(old, gen.Bytes()), 0o644)
}

// SpliceGenerated replaces the text between the markers in doc with gen;
// a doc without them is replaced by a default one.
func SpliceGenerated(doc, gen []byte) []byte {
	block := []byte(BeginMarker + "\n\n" + strings.TrimSpace(string(gen)) + "\n\n" + EndMarker)
	b := bytes.Index(doc, []byte(BeginMarker))
	e := bytes.Index(doc, []byte(EndMarker))
	if b < 0 || e < b {
		return []byte(defaultDoc(string(block)))
	}
	var out bytes.Buffer
	out.Write(doc[:b])
	out.Write(block)
	out.Write(doc[e+len(EndMarker):])
	return out.Bytes()
}

func defaultDoc(block string) string {
	return "# Benchmarks\n\n" +
		"Catena against etcd and Redis, measured by `catena-lab bench compare` in one run on one machine.\n\n" +
		"## Latest run\n\n" + block + "\n"
}
