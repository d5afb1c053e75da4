package process

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func serverConfig(t *testing.T, listen string, masters ...wire.NodeID) ServerConfig {
	return ServerConfig{Listen: listen, Masters: masters, DataDir: t.TempDir(), NoSync: true,
		HeartbeatInterval: 25 * time.Millisecond, Tick: 5 * time.Millisecond, Loops: 2, Links: Links{Limits: DefaultClientLimits}, Log: discard}
}

func masterConfig(t *testing.T, listen string, servers ...wire.NodeID) MasterConfig {
	return MasterConfig{Listen: listen, DataDir: t.TempDir(),
		Cluster: ClusterSpec{Given: master.Settings{Servers: servers}, Volumes: 1, Placement: placement.Random},
		Lease:   150 * time.Millisecond, FailureTimeout: 300 * time.Millisecond, ClockDriftMax: 0.01, ExtensionTimeout: 5 * time.Second,
		Tick: 5 * time.Millisecond, Links: Links{Limits: DefaultClientLimits}, Log: discard}
}

// A configuration that cannot run is refused with an error naming what
// is wrong, before anything is opened.
func TestValidate(t *testing.T) {
	server := func(f func(*ServerConfig)) error {
		c := serverConfig(t, "127.0.0.1:1", "m:1")
		f(&c)
		return c.Validate()
	}
	mc := func(f func(*MasterConfig)) error { c := masterConfig(t, "127.0.0.1:1"); f(&c); return c.Validate() }
	proxy := func(f func(*ProxyConfig)) error {
		c := ProxyConfig{Listen: "127.0.0.1:1", Masters: "m:1", ConnectionsMax: 1, ConnectionsPerAddressMax: 1, PipelineMax: 1, Log: discard}
		f(&c)
		return c.Validate()
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{server(func(c *ServerConfig) {}), ""},
		{server(func(c *ServerConfig) { c.DataDir = "" }), "DataDir is required"},
		{server(func(c *ServerConfig) { c.Masters = nil }), "Masters is required"},
		{server(func(c *ServerConfig) { c.Loops = 0 }), "Loops 0"},
		{server(func(c *ServerConfig) { c.Site = 2 }), "several sites runs one event loop"},
		{server(func(c *ServerConfig) { c.Tick = 0 }), "Tick must be positive"},
		{server(func(c *ServerConfig) { c.Limits.ConnectionsMax = 0 }), "ConnectionsMax"},
		{server(func(c *ServerConfig) { c.WAN.RTT = time.Second }), "RTT needs Peers"},
		{mc(func(c *MasterConfig) {}), ""},
		{mc(func(c *MasterConfig) { c.Log = nil }), "Log is required"},
		{mc(func(c *MasterConfig) { c.Members = []wire.NodeID{"a:1", "b:1", "c:1"} }), "not among Members"},
		{mc(func(c *MasterConfig) { c.Members = []wire.NodeID{"127.0.0.1:1", "b:1", "c:1"} }), "needs a positive ElectionTimeout"},
		{proxy(func(c *ProxyConfig) {}), ""},
		{proxy(func(c *ProxyConfig) { c.Listen = "0.0.0.0:1" }), "loopback address only"},
		{proxy(func(c *ProxyConfig) { c.Listen, c.Insecure = "0.0.0.0:1", true }), ""},
		{proxy(func(c *ProxyConfig) { c.Listen, c.TLSListen = "", "127.0.0.1:2" }), "TLSListen needs TLS"},
		{proxy(func(c *ProxyConfig) { c.Listen = "" }), "would serve nothing"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("Validate: %v, want nil", tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("Validate: %v, want an error containing %q", tc.err, tc.want)
		}
	}
}

// A master, a server and a proxy built from their configurations serve a
// cluster together, and stop when their context ends; a server closed
// before it ran releases its port and storage.
func TestMasterServerProxy(t *testing.T) {
	mAddr, sAddr, pAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	mc := masterConfig(t, mAddr, wire.NodeID(sAddr))
	m, err := NewMaster(mc)
	if err != nil {
		t.Fatal(err)
	}
	sc := serverConfig(t, sAddr, wire.NodeID(mAddr))
	s, err := NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // closed before it ran
		t.Fatal(err)
	}
	if s, err = NewServer(sc); err != nil { // the same port and data directory
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(sc.DataDir, "incarnation")); err != nil || strings.Count(string(data), "\n") != 1 {
		t.Fatalf("incarnation file %q, %v", data, err)
	}
	p, err := NewProxy(ProxyConfig{Listen: pAddr, Masters: mAddr, ConnectionsMax: 10, ConnectionsPerAddressMax: 10, PipelineMax: 10, Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	if m.Addr() != mAddr || s.Addr() != sAddr || s.Loops() != 2 || p.Addrs()[0] != pAddr {
		t.Fatalf("addresses %s %s %v, loops %d", m.Addr(), s.Addr(), p.Addrs(), s.Loops())
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 3)
	for _, proc := range []Process{s, m, p} {
		go func() { errs <- Run(ctx, proc) }()
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	cl, err := client.Dial(dctx, mAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Put(dctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialTimeout("tcp", pAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(nc, "GET k\r\n")
	reply := make([]byte, len("$1\r\nv\r\n"))
	if _, err := io.ReadFull(nc, reply); err != nil || string(reply) != "$1\r\nv\r\n" {
		t.Fatalf("the proxy answered GET k with %q, %v", reply, err)
	}
	cancel()
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	for _, proc := range []Process{s, m, p} {
		select {
		case <-proc.Done():
		default:
			t.Errorf("%T not done after Run returned", proc)
		}
	}
}
