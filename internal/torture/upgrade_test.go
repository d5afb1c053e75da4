package torture

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// The schedule replaces servers, then masters, then the proxy, each once,
// then finalizes; a downgrade goes back in the same order and does not
// finalize; -no-finalize leaves the finalize out.
func TestUpgradeSchedule(t *testing.T) {
	servers, masters := []string{"s1", "s2"}, []string{"m1", "m2", "m3"}
	for _, tc := range []struct {
		name  string
		proxy string
		u     Upgrade
		want  string
	}{
		{"upgrade", "p1", Upgrade{}, "s1 → new, s2 → new, m1 → new, m2 → new, m3 → new, p1 → new, finalize"},
		{"no proxy", "", Upgrade{}, "s1 → new, s2 → new, m1 → new, m2 → new, m3 → new, finalize"},
		{"no finalize", "p1", Upgrade{NoFinalize: true}, "s1 → new, s2 → new, m1 → new, m2 → new, m3 → new, p1 → new"},
		{"downgrade", "p1", Upgrade{Downgrade: true},
			"s1 → new, s2 → new, m1 → new, m2 → new, m3 → new, p1 → new, s1 → old, s2 → old, m1 → old, m2 → old, m3 → old, p1 → old"},
	} {
		if got := scheduleString(UpgradeSchedule(servers, masters, tc.proxy, tc.u)); got != tc.want {
			t.Errorf("%s: schedule %s, want %s", tc.name, got, tc.want)
		}
	}
}

func scheduleString(steps []UpgradeStep) string {
	var out []string
	for _, s := range steps {
		out = append(out, s.String())
	}
	return strings.Join(out, ", ")
}

// The master leader's step goes after its followers' in the same
// direction, and nothing else moves.
func TestLeaderLast(t *testing.T) {
	steps := UpgradeSchedule([]string{"s1"}, []string{"m1", "m2", "m3"}, "p1", Upgrade{Downgrade: true})
	isMaster := func(name string) bool { return strings.HasPrefix(name, "m") }
	for _, tc := range []struct {
		i      int
		leader string
		want   string
	}{
		{1, "m1", "s1 → new, m2 → new, m1 → new, m3 → new, p1 → new, s1 → old, m1 → old, m2 → old, m3 → old, p1 → old"},
		{1, "m2", "s1 → new, m1 → new, m2 → new, m3 → new, p1 → new, s1 → old, m1 → old, m2 → old, m3 → old, p1 → old"},
		// The last master of the run: no follower left to swap with.
		{3, "m3", "s1 → new, m1 → new, m2 → new, m3 → new, p1 → new, s1 → old, m1 → old, m2 → old, m3 → old, p1 → old"},
		// Not across the proxy into the downgrade's masters.
		{6, "m1", "s1 → new, m1 → new, m2 → new, m3 → new, p1 → new, s1 → old, m2 → old, m1 → old, m3 → old, p1 → old"},
		{0, "s1", "s1 → new, m1 → new, m2 → new, m3 → new, p1 → new, s1 → old, m1 → old, m2 → old, m3 → old, p1 → old"},
	} {
		if got := scheduleString(leaderLast(steps, tc.i, tc.leader, isMaster)); got != tc.want {
			t.Errorf("step %d, leader %s:\n got %s\nwant %s", tc.i, tc.leader, got, tc.want)
		}
	}
	// Each time the leader comes up it moves on: m1 then m2 lead.
	got := leaderLast(steps, 1, "m1", isMaster)
	got = leaderLast(got, 2, "m1", isMaster)
	if s := scheduleString(got[:5]); s != "s1 → new, m2 → new, m3 → new, m1 → new, p1 → new" {
		t.Errorf("the leader twice: %s", s)
	}
}

// A cluster of an upgrade run starts every process, the proxy on a host
// of its own, from the old binary; the proxy serves the test network
// (-insecure) for the cluster's masters.
func TestUpgradeClusterStartsFromTheOldBinary(t *testing.T) {
	o := DefaultOptions
	o.Masters, o.Servers, o.Exe = 3, 4, "/new/catena"
	o.Upgrade = &Upgrade{Old: "/old/catena"}
	names := runHostNames(o)
	if want := []string{"m1", "m2", "m3", "s1", "s2", "s3", "s4", "p1"}; !slices.Equal(names, want) {
		t.Fatalf("hosts %v, want %v", names, want)
	}
	n, err := NewNet("ctort", "10.1.2", names)
	if err != nil {
		t.Fatal(err)
	}
	sites, err := newSites(n, o, clusterOptions{exe: startExe(o), masters: o.Masters, servers: o.Servers, volumes: 8, replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	c := sites[0]
	if c.Proxy == nil || len(c.All()) != 7 || len(c.every()) != 8 || len(c.Hosts) != 7 {
		t.Fatalf("proxy %v, %d processes (%d with the proxy), %d hosts: want a proxy apart from 7 processes on 7 hosts", c.Proxy, len(c.All()), len(c.every()), len(c.Hosts))
	}
	for _, p := range c.every() {
		if p.Exe() != "/old/catena" {
			t.Errorf("%s starts from %s, want the old binary", p.Name, p.Exe())
		}
	}
	if got, want := strings.Join(c.Proxy.args, " "), "proxy -listen 10.1.2.18:6379 -insecure -master "+c.MasterAddrs(); got != want {
		t.Errorf("the proxy's arguments: %s, want %s", got, want)
	}
	// Without the upgrade nemesis: no proxy, every process from Exe.
	o.Upgrade = nil
	n, _ = NewNet("ctort", "10.1.2", runHostNames(o))
	sites, err = newSites(n, o, clusterOptions{exe: startExe(o), masters: o.Masters, servers: o.Servers})
	if err != nil || sites[0].Proxy != nil || sites[0].Masters[0].Exe() != "/new/catena" {
		t.Fatalf("without an upgrade: %v, proxy %v, m1 from %s", err, sites[0].Proxy, sites[0].Masters[0].Exe())
	}
}

// The upgrade options must name an old binary apart from the new one,
// for a run of one site without backups.
func TestValidateUpgrade(t *testing.T) {
	dir := t.TempDir()
	old, exe := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for _, f := range []string{old, exe} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := DefaultOptions
	base.Exe, base.PipeEnv, base.Stdout = exe, "X", io.Discard
	for _, tc := range []struct {
		name    string
		change  func(o *Options)
		problem string
	}{
		{"ok", func(o *Options) {}, ""},
		{"several sites", func(o *Options) { o.Sites = 2 }, "one site"},
		{"the new binary", func(o *Options) { o.Upgrade.Old = exe }, "the new binary itself"},
		{"no old binary", func(o *Options) { o.Upgrade.Old = filepath.Join(dir, "missing") }, "no such file"},
		{"downgrade without finalize", func(o *Options) { o.Upgrade.Downgrade, o.Upgrade.NoFinalize = true, true }, "does not finalize"},
		{"backups", func(o *Options) { o.Backup = true }, "-backup: not with -upgrade-from"},
	} {
		o := base
		o.Upgrade = &Upgrade{Old: old}
		tc.change(&o)
		err := o.Validate()
		if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.problem)
		}
	}
}

// okPut is an acknowledged put to key called at call that returned at ret.
func okPut(key string, call, ret time.Duration) Record {
	return Record{Op: put(key, "v"), Call: int64(call), Return: int64(ret), Outcome: OK, Result: wire.Result{Found: true}}
}

// Each step's line says what it did and measures the outage from its
// start: a volume whose writes stop for 800 ms after the second step
// shows it there, the proxy's own outage apart, after the third.
func TestStepAvailability(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var history, proxy []Record
	key := "r0.0"
	for at := 0; at <= 10000; at += 10 {
		if at < 5100 || at > 5900 {
			history = append(history, okPut(key, ms(at-1), ms(at)))
		} else {
			history = append(history, Record{Op: okPut(key, 0, 0).Op, Call: int64(ms(at)), Return: int64(ms(at + 5)), Outcome: Failed})
		}
		if at < 8100 || at > 8400 {
			proxy = append(proxy, okPut("x0.0", ms(at-1), ms(at)))
		} else {
			proxy = append(proxy, Record{Op: okPut("x0.0", 0, 0).Op, Call: int64(ms(at)), Return: int64(ms(at + 5)), Outcome: Unknown})
		}
	}
	steps := []stepResult{
		{step: UpgradeStep{Process: "s1"}, start: ms(2000), end: ms(2400), how: "stopped in 5ms; healthy 400ms after"},
		{step: UpgradeStep{Process: "s2"}, start: ms(5000), end: ms(5500), how: "stopped in 6ms; healthy 500ms after"},
		{step: UpgradeStep{Process: "p1"}, start: ms(8000), end: ms(8100)},
		{step: UpgradeStep{Finalize: true}, start: ms(9000), end: ms(9100), err: fmt.Errorf("exit status 2")},
	}
	got := stepAvailability(steps, nil, history, proxy, 2)
	want := []string{
		"s1 → new at 2s: stopped in 5ms; healthy 400ms after; writes 0s, reads 0s; proxy writes 0s, reads 0s",
		"s2 → new at 5s: stopped in 6ms; healthy 500ms after; writes 810ms, reads 0s; proxy writes 0s, reads 0s",
		"p1 → new at 8s; writes 0s, reads 0s; proxy writes 310ms, reads 0s",
		"finalize at 9s: FAILED: exit status 2; writes 0s, reads 0s; proxy writes 0s, reads 0s",
	}
	if !slices.Equal(got, want) {
		t.Errorf("step lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// With a fault beside the steps, starting after s2 and before the
	// outage: the outage is the fault's, not s2's.
	faults := []faultWindow{{kind: KillServer, start: ms(5050), end: ms(5400)}}
	if got := stepAvailability(steps, faults, history, proxy, 2)[1]; !strings.Contains(got, "writes 0s") {
		t.Errorf("s2 with a fault after it: %s", got)
	}
	stepStarts := []time.Duration{ms(2000), ms(5000), ms(8000), ms(9000)}
	if got := availability(history, faults, stepStarts, 2); len(got) != 1 || got[0] != "kill-server (1): writes 810ms, reads 0s" {
		t.Errorf("the fault's availability: %q", got)
	}
	// A fault's window ends where the next step begins.
	early := []faultWindow{{kind: KillServer, start: ms(4000), end: ms(4100)}}
	if got := availability(history, early, stepStarts, 2); len(got) != 1 || got[0] != "kill-server (1): writes 0s, reads 0s" {
		t.Errorf("a fault before s2: %q", got)
	}
}
