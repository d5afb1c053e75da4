package torture

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		list    string
		masters int
		want    []Kind
	}{
		{"all", 3, AllKinds},
		{"none", 3, nil},
		{"kill", 3, []Kind{KillServer, KillMasterLeader, KillMasterFollower}},
		{"kill", 1, []Kind{KillServer, KillMasterLeader}},
		{"partition-one-way, pause-server,kill-server", 3, []Kind{KillServer, PauseServer, OneWay}},
		{"partition,partition-split", 3, []Kind{Isolate, Split, Bridge, OneWay}},
	} {
		got, err := ParseKinds(tc.list, tc.masters)
		if err != nil || !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
			t.Errorf("ParseKinds(%q, %d) = %v, %v; want %v", tc.list, tc.masters, got, err, tc.want)
		}
	}
	if _, err := ParseKinds("kill,flood", 3); err == nil || !strings.Contains(err.Error(), `"flood"`) {
		t.Errorf("an unknown kind: err = %v", err)
	}
}

// The seed fixes the plan; the plan fits the duration; every fault lasts
// longer than the lease (600 ms) and, for partitions, the failure
// timeout (1 s); a long plan uses every kind.
func TestPlan(t *testing.T) {
	a := Plan(7, AllKinds, 8, 30*time.Minute)
	if !reflect.DeepEqual(a, Plan(7, AllKinds, 8, 30*time.Minute)) {
		t.Fatal("the same seed made two plans")
	}
	if reflect.DeepEqual(a, Plan(8, AllKinds, 8, 30*time.Minute)) {
		t.Fatal("seeds 7 and 8 made the same plan")
	}
	var total time.Duration
	used := map[Kind]bool{}
	for _, s := range a {
		total += s.Gap + s.Duration
		used[s.Kind] = true
		if s.Duration <= time.Second || s.Gap < gapRange[0] {
			t.Errorf("step %+v: too short", s)
		}
		if len(s.Order) != 8 {
			t.Errorf("step %+v: order of %d hosts", s, len(s.Order))
		}
	}
	if total > 30*time.Minute {
		t.Errorf("plan takes %s, longer than 30m", total)
	}
	if len(used) != len(AllKinds) {
		t.Errorf("a 30-minute plan used only %v", used)
	}
	if n := len(Plan(1, AllKinds, 8, 2*time.Minute)); n < 5 {
		t.Errorf("a 2-minute plan has %d faults", n)
	}
	if p := Plan(1, nil, 8, time.Hour); p != nil {
		t.Errorf("no kinds: plan %v", p)
	}
	if p := Plan(1, AllKinds, 8, time.Second); p != nil {
		t.Errorf("a plan longer than its duration: %v", p)
	}
}

// testCluster is a cluster of 3 masters and 5 servers that exists only on
// paper: enough for partition's rules.
func testCluster(t *testing.T) *Cluster {
	n, err := NewNet("ctort", "10.1.2", []string{"m1", "m2", "m3", "s1", "s2", "s3", "s4", "s5"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Net: n}
	for _, h := range n.Hosts[:3] {
		c.Masters = append(c.Masters, &Process{Name: h.Name, Master: true, Host: h})
	}
	for _, h := range n.Hosts[3:] {
		c.Servers = append(c.Servers, &Process{Name: h.Name, Host: h})
	}
	return c
}

// cuts returns, for rules made of Cut, the unordered pairs they cut.
func cuts(t *testing.T, rules []Rule) map[[2]string]bool {
	t.Helper()
	pairs := map[[2]string]int{}
	for _, r := range rules {
		if len(r.Args) != 4 || r.Args[0] != "-s" || r.Args[3] != "DROP" {
			t.Fatalf("not a cut: %v", r)
		}
		pair := [2]string{r.At.IP, r.Args[1]}
		slices.Sort(pair[:])
		pairs[pair]++
	}
	out := map[[2]string]bool{}
	for p, n := range pairs {
		if n != 2 {
			t.Fatalf("pair %v cut one way only", p)
		}
		out[p] = true
	}
	return out
}

func TestPartitionRules(t *testing.T) {
	c := testCluster(t)
	ip := func(name string) string { return c.Net.Host(name).IP }
	pair := func(a, b string) [2]string {
		p := [2]string{ip(a), ip(b)}
		slices.Sort(p[:])
		return p
	}
	order := []int{3, 0, 4, 1, 5, 2, 6, 7} // s1 m1 s2 m2 s3 m3 s4 s5

	desc, rules := partition(c, Step{Kind: Isolate, Order: order}, [2]*Host{})
	got := cuts(t, rules)
	if len(got) != 7 || !got[pair("s1", "m1")] || !got[pair("s1", "s5")] {
		t.Errorf("isolate %s: cuts %v", desc, got)
	}

	desc, rules = partition(c, Step{Kind: Split, Order: order, Pick: 2}, [2]*Host{}) // minority of 3
	got = cuts(t, rules)
	if len(got) != 3*5 || !got[pair("s1", "m2")] || got[pair("s1", "m1")] || got[pair("m2", "s3")] {
		t.Errorf("split %s: cuts %v", desc, got)
	}

	desc, rules = partition(c, Step{Kind: Bridge, Order: order}, [2]*Host{})
	got = cuts(t, rules)
	for p := range got {
		if p[0] == ip("s1") || p[1] == ip("s1") {
			t.Errorf("bridge %s: the bridge s1 is cut (%v)", desc, p)
		}
	}
	if len(got) != 3*4 || !got[pair("m1", "s3")] || got[pair("m1", "m2")] {
		t.Errorf("bridge %s: cuts %v", desc, got)
	}

	// One way: variant 1 is "s1 hears nothing from the masters": each
	// master's connections to s1 are dropped at s1.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 1}, [2]*Host{})
	if len(rules) != 3 || !strings.Contains(desc, "s1 hears nothing from [m1 m2 m3]") {
		t.Fatalf("one-way %s: %v", desc, rules)
	}
	for _, r := range rules {
		if r.At.Name != "s1" || !slices.Contains(r.Args, "ORIGINAL") {
			t.Errorf("one-way %s: rule %v", desc, r)
		}
	}
	// Variants 2 and 5 are between two servers only: chain neighbours
	// (predecessor first) when the status names them, else the first two
	// servers of the order. Variant 5: the predecessor's messages (its
	// forwards) are lost: the rule is at the successor, against it.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 5}, [2]*Host{})
	if len(rules) != 1 || rules[0].At.Name != "s2" || rules[0].Args[1] != ip("s1") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
	link := [2]*Host{c.Net.Host("s4"), c.Net.Host("s3")}
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 5}, link)
	if len(rules) != 1 || rules[0].At.Name != "s3" || rules[0].Args[1] != ip("s4") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
	// Variant 2: the successor's messages (its acknowledgements) are
	// lost: the rule is at the predecessor, against the successor.
	desc, rules = partition(c, Step{Kind: OneWay, Order: order, Variant: 2}, link)
	if len(rules) != 1 || rules[0].At.Name != "s4" || rules[0].Args[1] != ip("s3") || !strings.Contains(desc, "s4 hears nothing from [s3]") {
		t.Errorf("one-way %s: %v", desc, rules)
	}
}
