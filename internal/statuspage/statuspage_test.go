package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/metrics"
)

// testStatus is a cluster of three servers: s1 heads volume 0 and is
// ahead, s2 is its tail, s3 is down and joining; volume 1 is s2's alone.
func testStatus(committed uint64) *client.ClusterStatus {
	return &client.ClusterStatus{
		Masters: []string{"m1", "m2", "m3"}, Leader: "m2",
		Volumes: []client.VolumeConfig{
			{Volume: 0, Epoch: 5, Chain: []string{"s1", "s2"}, Joining: "s3"},
			{Volume: 1, Epoch: 2, Chain: []string{"s2"}},
		},
		Keyspaces: []client.Keyspace{
			{Name: "default", Mode: "strong", Replicas: 2, Volumes: 1},
			{Name: "sessions", Prefix: "s/", Mode: "causal", K: 1, Replicas: 1, Volumes: 1, FirstVolume: 1},
		},
		Servers: []client.ServerStatus{
			{Addr: "s1", Alive: true, Incarnation: 1, MinProtocol: 1, MaxProtocol: 2, Volumes: []client.ReplicaStatus{{Volume: 0, Epoch: 5, Applied: committed + 7, Committed: committed, Watches: 2}}},
			{Addr: "s2", Alive: true, Incarnation: 3, MinProtocol: 1, MaxProtocol: 1, Volumes: []client.ReplicaStatus{{Volume: 0, Epoch: 4, Applied: committed, Committed: committed, Watches: 1}, {Volume: 1, Epoch: 2, Applied: 9, Committed: 9}}},
			{Addr: "s3", Alive: false, Incarnation: 2},
		},
	}
}

func TestBuildView(t *testing.T) {
	v := buildView(testStatus(100), "m1", throughput{})
	if len(v.Masters) != 3 || !v.Masters[0].Self || !v.Masters[1].Leader || v.Masters[0].Leader {
		t.Errorf("masters: %+v", v.Masters)
	}
	wantKeyspaces := []keyspaceRow{
		{Name: "default", Mode: "strong", Replicas: 2, Volumes: "1 (volume 0)"},
		{Name: "sessions", Prefix: "s/", Mode: "causal, k=1", Replicas: 1, Volumes: "1 (volume 1)"},
	}
	if !reflect.DeepEqual(v.Keyspaces, wantKeyspaces) {
		t.Errorf("keyspaces: %+v", v.Keyspaces)
	}
	if v.Volumes[0].Keyspace != "default" || v.Volumes[1].Keyspace != "sessions" {
		t.Errorf("volumes' keyspaces: %q, %q", v.Volumes[0].Keyspace, v.Volumes[1].Keyspace)
	}
	wantServers := []serverRow{
		{Addr: "s1", Alive: true, Incarnation: 1, Protocol: "1-2", Heads: 1},
		{Addr: "s2", Alive: true, Incarnation: 3, Protocol: "1", Tails: 1, Sole: 1},
		{Addr: "s3", Incarnation: 2, Protocol: "?", Joining: 1},
	}
	if !reflect.DeepEqual(v.Servers, wantServers) {
		t.Errorf("servers:\n%+v\nwant\n%+v", v.Servers, wantServers)
	}
	wantReplicas := []replicaRow{
		{Addr: "s1", Role: "head", Epoch: 5, Applied: 107, Reported: true, Watches: 2, Health: "ok", Class: "ok"},
		{Addr: "s2", Role: "tail", Epoch: 4, Applied: 100, Reported: true, Lag: 7, Watches: 1, Health: "at epoch 4", Class: "warn"},
		{Addr: "s3", Role: "joining", Health: "down", Class: "bad"},
	}
	if len(v.Volumes) != 2 || !reflect.DeepEqual(v.Volumes[0].Replicas, wantReplicas) {
		t.Errorf("volume 0:\n%+v\nwant\n%+v", v.Volumes[0].Replicas, wantReplicas)
	}
	if v.Volumes[0].Watches != 3 || v.Volumes[1].Watches != 0 {
		t.Errorf("watches per volume: %d, %d; want the members' 3, and 0", v.Volumes[0].Watches, v.Volumes[1].Watches)
	}
	if v.Throughput != "" {
		t.Errorf("throughput %q without an earlier sample", v.Throughput)
	}
}

// Throughput compares the committed sequence numbers with the oldest
// sample of the window, once they are far enough apart.
func TestThroughput(t *testing.T) {
	p := New(Options{})
	start := time.Now()
	if r := p.throughput(start, testStatus(100)); r.known {
		t.Fatalf("a rate from one sample: %+v", r)
	}
	if r := p.throughput(start.Add(500*time.Millisecond), testStatus(150)); r.known {
		t.Fatalf("a rate over half a second: %+v", r)
	}
	r := p.throughput(start.Add(2*time.Second), testStatus(300))
	if !r.known || r.total != 100 || r.volumes[0] != 100 || r.volumes[1] != 0 {
		t.Fatalf("after 200 updates in 2 s: %+v", r)
	}
	// Samples older than the window are dropped: the oldest left is the
	// one at 2 s.
	r = p.throughput(start.Add(11*time.Second), testStatus(400))
	if !r.known || r.total != 100.0/9 {
		t.Fatalf("11 s in: %+v, want 100 updates over 9 s", r)
	}
}

func serve(t *testing.T, p *Page, path string) (int, string) {
	t.Helper()
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestPage(t *testing.T) {
	committed := uint64(100)
	p := New(Options{
		Self:   "m1",
		Status: func(context.Context) (*client.ClusterStatus, error) { return testStatus(committed), nil },
		Recent: func() []metrics.Reconfiguration {
			return []metrics.Reconfiguration{{At: time.Now().Add(-3 * time.Second), Volume: 0, Epoch: 5, Kind: metrics.KindExtend, Chain: []string{"s1", "s2"}, Joining: "s3"}}
		},
	})
	code, body := serve(t, p, "/")
	for _, want := range []string{
		`<meta http-equiv="refresh" content="2">`,
		`data-server="s1" data-role="head"`, `data-server="s2" data-role="tail"`, `data-server="s3" data-role="joining"`,
		"at epoch 4", "lag 7", "lag 7 · watches 1", "<th>watches</th>", `<td class="num">3</td><td>`, "<td>extend</td>", "3s ago", "s1 → s2", ">default<", ">strong<", "<code>s/</code>", "causal, k=1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if code != http.StatusOK {
		t.Errorf("status %d", code)
	}

	code, body = serve(t, p, "/status.json")
	var got client.ClusterStatus
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK || !reflect.DeepEqual(&got, testStatus(committed)) {
		t.Errorf("/status.json: %d %v\n%s", code, err, body)
	}
	if code, _ := serve(t, p, "/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d", code)
	}
}

// Without a status from the master, the page and its JSON say why, with
// 503.
func TestPageWithoutStatus(t *testing.T) {
	p := New(Options{Self: "m1", Status: func(context.Context) (*client.ClusterStatus, error) {
		return nil, errors.New("catena: unavailable: master did not answer")
	}})
	for _, path := range []string{"/", "/status.json"} {
		code, body := serve(t, p, path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "master did not answer") {
			t.Errorf("%s: %d\n%s", path, code, body)
		}
	}
}

// A deployment of sites: the page lists them, marks this one, and shows
// the shipping lag and which site controls which hierarchical prefix;
// one site shows none of them.
func TestSitesOnThePage(t *testing.T) {
	st := testStatus(100)
	if v := buildView(st, "m1", throughput{}); v.Sites != nil || v.Shipping != nil {
		t.Fatalf("one site: sites %+v, shipping %+v", v.Sites, v.Shipping)
	}
	st.Site = 2
	st.Sites = []client.Site{{ID: 1, Name: "lisbon", Masters: []string{"a", "b"}}, {ID: 2, Name: "oslo", Masters: []string{"m1", "m2", "m3"}}}
	st.Keyspaces[0].Sites = []uint32{1, 2}
	st.Shipping = []client.ShippingLag{{Volume: 0, To: 1, Originated: 9, Shipped: 4, Lag: 5}}
	st.Control = []client.PathControl{{Keyspace: "builds", Volume: 1, Path: "b/src/", Site: 1, Deep: true}}
	v := buildView(st, "m1", throughput{})
	want := []siteRow{{ID: 1, Name: "lisbon", Masters: "a, b"}, {ID: 2, Name: "oslo", Masters: "m1, m2, m3", Self: true}}
	if !reflect.DeepEqual(v.Sites, want) || !reflect.DeepEqual(v.Shipping, st.Shipping) || v.Keyspaces[0].Mode != "strong, sites 1,2" {
		t.Fatalf("sites %+v, shipping %+v, keyspace mode %q", v.Sites, v.Shipping, v.Keyspaces[0].Mode)
	}
	var b strings.Builder
	if err := pageTemplate.Execute(&b, v); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"oslo (this site)", `<table id="shipping">`, `<td class="num">5</td>`,
		`<tr><td>b/src/</td><td>builds</td><td>1 lisbon</td><td>prefix</td></tr>`} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("page lacks %q", s)
		}
	}
}
