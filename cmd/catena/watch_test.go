package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
)

// -from takes what a watch's position line prints, and refuses anything
// else.
func TestParseWatchPosition(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want client.WatchPosition
		out  string
	}{
		{"0:117", client.WatchPosition{0: 117}, "0:117"},
		{"4:90,3:117", client.WatchPosition{3: 117, 4: 90}, "3:117,4:90"},
		{" 1:-1 , 2:0", client.WatchPosition{1: -1, 2: 0}, "1:-1,2:0"},
		{"4294967295:18446744073", client.WatchPosition{4294967295: 18446744073}, "4294967295:18446744073"},
	} {
		got, err := parseWatchPosition(tc.in)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("parseWatchPosition(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if s := formatWatchPosition(got); s != tc.out {
			t.Errorf("formatWatchPosition(%v) = %q, want %q", got, s, tc.out)
		}
	}
	for _, in := range []string{"", "1", "1:", ":5", "a:1", "1:x", "1:2:3", "1:-2", "1:2,1:3", "1:2,", "4294967296:1", "-1:5", "1;2"} {
		if got, err := parseWatchPosition(in); err == nil {
			t.Errorf("parseWatchPosition(%q) = %v, want an error", in, got)
		}
	}
	for _, args := range [][]string{
		{"watch", "-key"}, {"watch", "a", "b"}, {"watch", "k", "-from", "0:x"}, {"watch", "k", "-from", "0:1,0:2"},
	} {
		if code, _, stderr := runCatena(t, "", append(args, "-master", "127.0.0.1:1")...); code != 2 {
			t.Errorf("%v: exit status %d, stderr %q; want a usage error before connecting", args, code, stderr)
		}
	}
}

// A watch prints each change to its prefix once, in order, with its
// revision (puts with their value, a hash's fields or a deadline;
// deletes; expiries), and on exit the position; catena watch -from an
// earlier revision prints the same lines again, and -key only the key's.
func TestWatchPrintsChangesAndResumes(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out syncBuffer
	watching, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- printWatch(watching, cl, &out, "cfg/") }()
	// The watch starts from now: write until it prints a write.
	awaitCondition(t, "the watch prints a put", func() string {
		if err := cl.Put(ctx, "cfg/ping", []byte("1")); err != nil {
			return err.Error()
		}
		if !strings.Contains(out.String(), "put cfg/ping 1 rev 0:") {
			return fmt.Sprintf("printed %q", out.String())
		}
		return ""
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.Put(ctx, "cfg/a", []byte("42")))
	must(cl.Put(ctx, "other/x", []byte("not watched")))
	_, err := cl.HashSet(ctx, "cfg/h", client.Field{Name: "f", Value: []byte("v")}, client.Field{Name: "g", Value: []byte("w")})
	must(err)
	_, err = cl.Delete(ctx, "cfg/a")
	must(err)
	must(cl.Put(ctx, "cfg/t", []byte("soon"), client.WithTTL(200*time.Millisecond)))
	awaitCondition(t, "the watch prints the expiry", func() string {
		if !strings.Contains(out.String(), "expire cfg/t rev 0:") {
			return fmt.Sprintf("printed %q", out.String())
		}
		return ""
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the watch ended with %v", err)
	}
	printed := out.String()
	lines := strings.Split(strings.TrimSuffix(printed, "\n"), "\n")
	var after []string // (after the last ping: several may have been written before one was printed)
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "put cfg/ping ") {
			after = lines[i+1:]
			break
		}
	}
	patterns := []string{
		`^put cfg/a 42 rev 0:(\d+)$`,
		`^put cfg/h \(hash\) f=v g=w rev 0:(\d+)$`,
		`^delete cfg/a rev 0:(\d+)$`,
		`^put cfg/t soon rev 0:(\d+) expires 20\d\d-\d\d-\d\dT[0-9:.]+Z$`,
		`^expire cfg/t rev 0:(\d+)$`,
		`^position 0:(\d+)$`,
	}
	if len(after) != len(patterns) {
		t.Fatalf("printed after the pings:\n%s\nwant %d lines", strings.Join(after, "\n"), len(patterns))
	}
	var revisions []int
	for i, p := range patterns {
		m := regexp.MustCompile(p).FindStringSubmatch(after[i])
		if m == nil {
			t.Fatalf("line %d is %q, want it to match %s; printed:\n%s", i, after[i], p, printed)
		}
		n, _ := strconv.Atoi(m[1])
		if len(revisions) > 0 && n <= revisions[len(revisions)-1] && i < len(patterns)-1 {
			t.Errorf("%q: revision %d after %d", after[i], n, revisions[len(revisions)-1])
		}
		revisions = append(revisions, n)
	}
	if end := revisions[len(revisions)-1]; end < revisions[len(revisions)-2] {
		t.Errorf("position 0:%d is before the last event's revision %d", end, revisions[len(revisions)-2])
	}
	changes := after[:len(after)-1]

	// The command, from just before the first change, prints the same
	// lines; -key only cfg/a's. Both end at -timeout with the position.
	from := fmt.Sprintf("0:%d", revisions[0]-1)
	type result struct {
		code           int
		stdout, stderr string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, args := range [][]string{{"watch", "cfg/"}, {"watch", "cfg/a", "-key"}} {
		wg.Go(func() {
			var r result
			r.code, r.stdout, r.stderr = runCatena(t, "", append(args, "-from", from, "-timeout", "4s", "-master", master)...)
			results[i] = r
		})
	}
	wg.Wait()
	for i, want := range [][]string{changes, {changes[0], changes[2]}} {
		r := results[i]
		got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(got) != len(want)+1 || !slices.Equal(got[:len(want)], want) || !strings.HasPrefix(got[len(want)], "position 0:") {
			t.Errorf("watch -from %s (%d): exit status %d, stderr %q, stdout:\n%s\nwant:\n%s\nposition 0:...", from, i, r.code, r.stderr, r.stdout, strings.Join(want, "\n"))
		}
	}
}

// A watch from a revision no member holds any more (every member joined
// with a snapshot since) exits with status 1, naming the oldest revision
// and the -from to start again at, and prints no position.
func TestWatchCompacted(t *testing.T) {
	c := testcluster.Start(t, 2, testcluster.WithSpares(2))
	master := c.MasterAddr()
	addrs := c.ServerAddrs()
	cl := c.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		if err := cl.Put(ctx, fmt.Sprintf("cfg/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Replace both members: the spares join with snapshots, and a
	// snapshot starts no window.
	for _, i := range []int{0, 1} {
		c.Stop(i)
		awaitCondition(t, fmt.Sprintf("a spare in place of %s", addrs[i]), func() string {
			st, err := cl.Status(ctx)
			if err != nil {
				return err.Error()
			}
			if len(st.Volumes) != 1 {
				return fmt.Sprintf("%d volumes", len(st.Volumes))
			}
			v := st.Volumes[0]
			if len(v.Chain) != 2 || v.Joining != "" || slices.Contains(v.Chain, addrs[i]) {
				return fmt.Sprintf("chain %v, joining %q", v.Chain, v.Joining)
			}
			return ""
		})
	}
	code, stdout, stderr := runCatena(t, "", "watch", "cfg/", "-from", "0:0", "-timeout", "30s", "-master", master)
	m := regexp.MustCompile(`^catena watch: watch compacted: volume 0 keeps the changes after revision (\d+); the changes after revision 0 are gone: read the keys again \(catena scan, catena get\), then watch -from 0:(\d+)\n$`).FindStringSubmatch(stderr)
	if code != 1 || stdout != "" || m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("watch -from 0:0 after the window moved on: exit status %d, stdout %q, stderr %q; want 1, nothing printed, and the oldest revision", code, stdout, stderr)
	}
}
