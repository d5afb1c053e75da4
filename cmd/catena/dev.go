package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/wire"
)

// Limits of catena dev.
const (
	// devReadyPoll is the pause between two checks of a starting cluster.
	devReadyPoll = 100 * time.Millisecond
	// devStatusTimeout bounds one status request while the cluster starts.
	devStatusTimeout = 2 * time.Second
	// devLogTailLines is how much of a failed process's log dev prints.
	devLogTailLines = 10
	// devStopWait is how long dev waits for its processes to stop after
	// SIGTERM before it kills them.
	devStopWait = 5 * time.Second
)

// runDev starts a master and servers as separate processes on loopback,
// waits until the cluster answers, so a user can kill one and watch the
// chain repair, and stops them on Ctrl-C.
func runDev(args []string, stdout io.Writer) error {
	fs := newFlagSet("dev", "catena dev [flags]", `Starts a local cluster: a master (or a replicated master's members),
servers and a Redis-protocol proxy as separate processes on loopback, with
their data, logs and pid files in one directory. It prints the cluster once
every process is up and every chain runs its configuration, restarts a
process that exits, and stops them all on Ctrl-C. A temporary directory it
created is removed then. Each process serves HTTP on its port plus
-http-offset: the master its status page (/) and every process its
Prometheus metrics (/metrics).

Every link between the processes, and from clients, is mutual TLS 1.3:
dev creates a CA and a certificate per process in <dir>/tls, and a client
certificate for the catena commands, whose environment variables it
prints. The status page and metrics are HTTPS. The proxy serves the Redis
protocol over TLS on -redis-tls and, on the loopback address -redis,
in plaintext without a password. -insecure turns TLS off everywhere.`)
	dir := fs.String("dir", "", "directory for data, logs and pid files, kept when dev stops (default: a new temporary directory, removed when dev stops)")
	servers := fs.Int("servers", 3, "number of servers; all form the chain")
	masters := fs.Int("masters", 1, "master members: 1, or 3 or 5 for a Raft-replicated master")
	volumes := fs.Int("volumes", 1, "volumes (chains) keys hash to")
	replicas := fs.Int("replicas", 0, "replicas per volume (0: every server with one volume, else 3)")
	strategy := fs.String("placement", "random", "placement: ring, random, random-seq, bidirectional, rotated")
	basePort := fs.Int("base-port", 7100, "master member i (from 0) listens on base-port+10·i, server i (from 1) on base-port+i")
	noSync := fs.Bool("no-sync", false, "run servers without fsync (see catena server -h)")
	restartDelay := fs.Duration("restart-delay", 5*time.Second, "restart a process that exited after this long (0: leave it stopped)")
	readyTimeout := fs.Duration("ready-timeout", 30*time.Second, "fail when the cluster is not ready after this long")
	keyspacesFile := fs.String("keyspaces", "", "create the keyspaces this JSON file lists once the cluster runs (see docs/operations.md, \"Keyspaces\")")
	httpOffset := fs.Int("http-offset", 80, "every process serves HTTP on its port plus this (the master its status page at /, every process its metrics at /metrics); 0: none")
	redisAddr := fs.String("redis", defaultRedisAddr, "address of the Redis-protocol proxy (catena proxy) dev starts, plaintext without a password (a loopback address); moves with -base-port (base-port+279) unless given; 'off': no proxy. With -sites, site i's proxy is at base-port+1000·(i−1)+279 (-redis off: none)")
	redisTLSAddr := fs.String("redis-tls", "", "address where the proxy serves the Redis protocol over TLS (redis-cli --tls); default base-port+280; 'off': none. With -sites, site i's at base-port+1000·(i−1)+280 (-redis-tls off: none)")
	insecure := fs.Bool("insecure", false, "plaintext on every link and HTTP, for every site: no certificates, anyone who reaches a port may join the cluster")
	sites := fs.Int("sites", 1, "sites (datacenters) to start, each a whole cluster with -masters masters and -servers servers, site i's ports at base-port+1000·(i−1); with more than one the default keyspace is causal and replicated by every site (docs/adr/0013-sites-and-geo-causal.md)")
	defaultK := fs.Int("default-k", 0, "make the default keyspace causal with this k (0: strong with one site; with -sites, a majority of its replicas)")
	wanRTT := fs.Duration("wan-rtt", 0, "with -sites: the round trip between processes of different sites, emulated by delaying messages (the paper uses 120ms; 0: none)")
	wanJitter := fs.Duration("wan-jitter", 10*time.Millisecond, "with -wan-rtt: the round trip varies by up to ± this")
	logs := registerLogFlags(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	redisGiven := false
	fs.Visit(func(f *flag.Flag) { redisGiven = redisGiven || f.Name == "redis" })
	if !redisGiven {
		*redisAddr = fmt.Sprintf("127.0.0.1:%d", *basePort+devRedisPortOffset)
	}
	if *redisAddr == "off" {
		*redisAddr = ""
	}
	redisTLSGiven := false
	fs.Visit(func(f *flag.Flag) { redisTLSGiven = redisTLSGiven || f.Name == "redis-tls" })
	if *sites < 1 || *sites > devSitesMax {
		return usageErrorf("-sites %d: want 1 to %d", *sites, devSitesMax)
	}
	if *sites > 1 && redisGiven && *redisAddr != "" {
		return usageErrorf("-redis with -sites: only off (each site's proxy port follows its base port)")
	}
	if *sites > 1 && redisTLSGiven && *redisTLSAddr != "off" {
		return usageErrorf("-redis-tls with -sites: only off (each site's proxy TLS port follows its base port)")
	}
	if *wanRTT < 0 || *wanJitter < 0 || *wanJitter > *wanRTT && *wanRTT > 0 {
		return usageErrorf("-wan-rtt and -wan-jitter must not be negative, and the jitter not above the round trip")
	}
	if *wanRTT > 0 && *sites == 1 {
		return usageErrorf("-wan-rtt needs -sites 2 or more: it delays messages between sites")
	}
	if *defaultK < 0 {
		return usageErrorf("-default-k must not be negative")
	}
	// redisTLS: whether the proxies serve a TLS port; redisTLSAddr is its
	// address when given (one site only), else each site's default.
	redisTLS := !*insecure && *redisAddr != "" && *redisTLSAddr != "off"
	if !redisTLS || !redisTLSGiven {
		*redisTLSAddr = ""
	}
	if *redisAddr != "" {
		if _, port, err := net.SplitHostPort(*redisAddr); err != nil || port == "" {
			return usageErrorf("-redis %q: want host:port or off", *redisAddr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return usageErrorf("-redis %q: the port must be a number from 1 to 65535", *redisAddr)
		}
	}
	if err := noArguments(args); err != nil {
		return err
	}
	logHandler, err := logs.handler(stdout)
	if err != nil {
		return err
	}
	log := slog.New(logHandler)
	if *servers < 1 || *servers > 9 || *basePort < 1 || *httpOffset < 0 || *basePort+devSitePortStep*(*sites-1)+max(10**masters, devRedisPortOffset+1)+*httpOffset > 65535 {
		return errors.New("-servers must be 1 to 9, -http-offset at least 0, and ports must fit below 65536")
	}
	if *masters != 1 && *masters != 3 && *masters != 5 {
		return errors.New("-masters must be 1, 3 or 5")
	}
	var keyspaces []client.Keyspace
	if *keyspacesFile != "" {
		if keyspaces, err = readKeyspaces(*keyspacesFile); err != nil {
			return err
		}
	}
	if *readyTimeout <= 0 {
		return errors.New("-ready-timeout must be positive")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	k := *defaultK
	if *sites > 1 && k == 0 {
		t := *replicas
		if t == 0 {
			t = *servers
			if *volumes > 1 {
				t = min(t, 3)
			}
		}
		k = t/2 + 1
	}
	var devSites []*devSite
	for i := 1; i <= *sites; i++ {
		devSites = append(devSites, newDevSite(i, *sites, *basePort+devSitePortStep*(i-1), *masters, *servers, *redisAddr, redisGiven, redisTLS, *redisTLSAddr))
	}
	var siteList []wire.Site
	var allSites []wire.SiteID
	for _, ds := range devSites {
		siteList = append(siteList, ds.site)
		allSites = append(allSites, ds.site.ID)
	}
	var procs []*devProcess
	for _, ds := range devSites {
		var remote []string
		for _, o := range devSites {
			if o != ds {
				remote = append(remote, o.masterAddrs...)
				remote = append(remote, o.addrs...)
			}
		}
		var wanArgs []string
		if *wanRTT > 0 {
			wanArgs = []string{"-wan-rtt", wanRTT.String(), "-wan-jitter", wanJitter.String(), "-wan-peers", strings.Join(remote, ",")}
		}
		for i, addr := range ds.masterAddrs {
			a := []string{"master", "-listen", addr, "-servers", strings.Join(ds.addrs, ","),
				"-volumes", strconv.Itoa(*volumes), "-replicas", strconv.Itoa(*replicas), "-placement", *strategy}
			if k > 0 {
				a = append(a, "-default-k", strconv.Itoa(k))
			}
			if *sites > 1 {
				a = append(a, "-site", strconv.Itoa(int(ds.site.ID)), "-sites", formatSites(siteList), "-default-sites", formatSiteIDs(allSites))
			}
			name := "master"
			if *masters > 1 {
				name = fmt.Sprintf("m%d", i+1)
				a = append(a, "-masters", strings.Join(ds.masterAddrs, ","))
			}
			ds.procs = append(ds.procs, &devProcess{name: ds.prefix + name, addr: addr, role: security.RoleMaster, args: append(a, wanArgs...)})
		}
		for i, addr := range ds.addrs {
			a := []string{"server", "-listen", addr, "-master", strings.Join(ds.masterAddrs, ",")}
			if *noSync {
				a = append(a, "-no-sync")
			}
			if *sites > 1 {
				a = append(a, "-site", strconv.Itoa(int(ds.site.ID)))
			}
			ds.procs = append(ds.procs, &devProcess{name: fmt.Sprintf("%ss%d", ds.prefix, i+1), addr: addr, role: security.RoleServer, args: append(a, wanArgs...)})
		}
		if ds.redisAddr != "" {
			// The proxy is a client of its own site only: no WAN.
			p := &devProcess{name: ds.prefix + "proxy", addr: ds.redisAddr, role: security.RoleProxy, stateless: true,
				args: []string{"proxy", "-listen", ds.redisAddr, "-master", strings.Join(ds.masterAddrs, ",")}}
			if ds.redisTLSAddr != "" {
				p.args = append(p.args, "-tls-listen", ds.redisTLSAddr)
				p.extra = ds.redisTLSAddr
			}
			ds.procs = append(ds.procs, p)
		}
		procs = append(procs, ds.procs...)
	}
	for _, p := range procs {
		p.args = append(p.args, logs.args()...)
		if *httpOffset > 0 {
			p.http = offsetPort(p.addr, *httpOffset)
			p.args = append(p.args, "-http", p.http)
		}
	}
	// A port in use would let a process fail while clients reach whatever
	// holds the port (often another catena dev): refuse to start.
	for _, p := range procs {
		for _, addr := range []string{p.addr, p.http, p.extra} {
			if addr == "" {
				continue
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s's address %s is in use (another catena dev? -base-port moves every port): %w", p.name, addr, err)
			}
			ln.Close()
		}
	}

	created := *dir == ""
	if created {
		d, err := os.MkdirTemp("", "catena-dev-")
		if err != nil {
			return err
		}
		*dir = d
		defer os.RemoveAll(d) // after the processes stopped: deferred before stopAll
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if abs, err := filepath.Abs(*dir); err == nil {
		*dir = abs
	}
	for _, p := range procs {
		if !p.stateless {
			p.args = append(p.args, "-data", filepath.Join(*dir, p.name))
		}
	}
	var clientFiles client.TLSFiles
	if !*insecure {
		if clientFiles, err = devCertificates(filepath.Join(*dir, "tls"), procs); err != nil {
			return err
		}
	}

	// Every process gets the read end of this pipe; only dev holds the
	// write end (see devPipeEnv).
	pipeRead, pipeWrite, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pipeRead.Close()
	defer pipeWrite.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exited := make(chan *devProcess, len(procs))
	defer stopAll(procs)
	for _, p := range procs {
		if err := p.start(exe, *dir, pipeRead, exited); err != nil {
			return err
		}
	}
	for _, ds := range devSites {
		if err := awaitDevReady(ctx, procs, exited, ds.masters(), ds.addrs, ds.redisAddr, clientFiles, *readyTimeout); err != nil {
			return fmt.Errorf("%s%w", ds.label(), err)
		}
	}
	if len(keyspaces) > 0 {
		for _, ds := range devSites {
			var here []client.Keyspace
			for _, k := range keyspaces {
				if len(k.Sites) == 0 || slices.Contains(k.Sites, uint32(ds.site.ID)) {
					here = append(here, k)
				}
			}
			fmt.Fprint(stdout, ds.label())
			if err := createDevKeyspaces(ctx, ds.masters(), here, clientFiles, stdout); err != nil {
				return fmt.Errorf("%s%w", ds.label(), err)
			}
		}
		for _, ds := range devSites {
			if err := awaitDevReady(ctx, procs, exited, ds.masters(), ds.addrs, ds.redisAddr, clientFiles, *readyTimeout); err != nil {
				return fmt.Errorf("%s%w", ds.label(), err)
			}
		}
	}

	if *sites > 1 {
		fmt.Fprintf(stdout, "catena dev: %d sites ready, the default keyspace causal (k=%d) and replicated by all", *sites, k)
		if *wanRTT > 0 {
			fmt.Fprintf(stdout, ", %s ± %s round trip between sites", *wanRTT, *wanJitter)
		}
		fmt.Fprintf(stdout, "; data, logs and pid files in %s", *dir)
	} else {
		fmt.Fprintf(stdout, "catena dev: cluster ready; data, logs and pid files in %s", *dir)
	}
	if created {
		fmt.Fprint(stdout, " (removed when dev stops; -dir DIR keeps them)")
	}
	fmt.Fprintln(stdout)
	scheme := "https"
	if *insecure {
		scheme = "http"
	}
	for _, ds := range devSites {
		if *sites > 1 {
			fmt.Fprintf(stdout, "site %d (%s): clients attach to its masters, -master %s\n", ds.site.ID, ds.site.Name, ds.masters())
		}
		for _, p := range ds.procs {
			web := ""
			if p.http != "" {
				web = "  " + scheme + "://" + p.http + "/"
			}
			fmt.Fprintf(stdout, "  %-13s %s%s  pid %-7d log %s\n", p.name, p.addr, web, p.pid(), filepath.Join(*dir, p.name+".log"))
		}
	}
	if procs[0].http != "" {
		fmt.Fprintf(stdout, "status page: %s://%s/ (JSON at /status.json; every site's master has one); Prometheus metrics at /metrics of every %s address above\n", scheme, procs[0].http, scheme)
	}
	if clientFiles.IsZero() {
		fmt.Fprintln(stdout, "TLS: off (-insecure): every link is plaintext")
	} else {
		what := "every link"
		if *sites > 1 {
			what = "every link, within a site and between sites,"
		}
		fmt.Fprintf(stdout, "TLS: %s is mutual TLS 1.3; the CA and certificates are in %s (CA %s). The catena commands need:\n", what, filepath.Dir(clientFiles.CA), clientFiles.CA)
		fmt.Fprintf(stdout, "  export %s=%s %s=%s %s=%s\n", envTLSCA, shellQuote(clientFiles.CA), envTLSCert, shellQuote(clientFiles.Cert), envTLSKey, shellQuote(clientFiles.Key))
	}
	fmt.Fprintln(stdout, "try:")
	for _, ds := range devSites {
		flags := ""
		if ds.masterAddrs[0] != defaultMasterAddr {
			flags = " -master " + ds.masterAddrs[0]
		}
		if *sites == 1 {
			fmt.Fprintf(stdout, "  catena put greeting hello%s\n  catena get greeting%s\n  catena status%s\n", flags, flags, flags)
		} else {
			fmt.Fprintf(stdout, "  catena put greeting hello-from-%s%s; catena get greeting%s; catena status%s\n", ds.site.Name, flags, flags, flags)
		}
		if ds.redisAddr != "" {
			fmt.Fprintf(stdout, "  redis-cli %s get greeting     (any Redis client: the proxy at %s)\n", redisCLIFlags(ds.redisAddr), ds.redisAddr)
		}
		if ds.redisTLSAddr != "" {
			fmt.Fprintf(stdout, "  redis-cli --tls --cacert %s %s get greeting     (over TLS)\n", shellQuote(clientFiles.CA), redisCLIFlags(ds.redisTLSAddr))
		}
	}
	fmt.Fprintf(stdout, "kill a server and watch catena status: the chain drops it, and it rejoins at the tail when dev restarts it")
	if *restartDelay > 0 {
		fmt.Fprintf(stdout, " (after %s)", *restartDelay)
	}
	fmt.Fprintf(stdout, ":\n  kill -9 $(cat %s)\n", shellQuote(filepath.Join(*dir, devSites[0].prefix+"s1.pid")))
	fmt.Fprintln(stdout, "Ctrl-C stops the cluster.")

	restart := make(chan *devProcess, len(procs))
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping the cluster")
			return nil
		case p := <-exited:
			if p.failed() {
				log.Warn("process exited", "process", p.name, "state", p.state(), "log", p.logPath)
				fmt.Fprintf(stdout, "the end of %s's log:\n%s", p.name, p.logTail(devLogTailLines))
			} else {
				log.Info("process exited", "process", p.name, "state", p.state())
			}
			if *restartDelay > 0 {
				log.Info("restarting", "process", p.name, "after", *restartDelay)
				time.AfterFunc(*restartDelay, func() { restart <- p })
			}
		case p := <-restart:
			if err := p.start(exe, *dir, pipeRead, exited); err != nil {
				log.Error("restart failed", "process", p.name, "err", err)
				continue
			}
			log.Info("process restarted", "process", p.name, "pid", p.pid())
		}
	}
}

// devRedisPortOffset places the proxy's default port relative to
// -base-port: 7379 for the default 7100.
const devRedisPortOffset = 279

// devSitePortStep separates the ports of two sites: site i's are those
// of a one-site dev with base port base-port+devSitePortStep·(i−1).
const devSitePortStep = 1000

// devSitesMax bounds -sites.
const devSitesMax = 5

// devSite is one site catena dev runs: a whole cluster.
type devSite struct {
	site wire.Site
	// prefix starts the names of the site's processes ("" with one
	// site, "site2-" with several).
	prefix      string
	masterAddrs []string
	addrs       []string
	redisAddr   string
	// redisTLSAddr is the proxy's Redis TLS port ("" for none).
	redisTLSAddr string
	procs        []*devProcess
}

// newDevSite lays out site i (from 1) of n at base: masters at base+10·j,
// servers at base+1.., the proxy at base+devRedisPortOffset unless
// redisGiven (then redis, with one site; "" for none), and, if redisTLS,
// the proxy's TLS port at redisTLSAddr (with one site; "" for
// base+devRedisPortOffset+1).
func newDevSite(i, n, base, masters, servers int, redis string, redisGiven, redisTLS bool, redisTLSAddr string) *devSite {
	ds := &devSite{site: wire.Site{ID: wire.SiteID(i), Name: fmt.Sprintf("site%d", i)}}
	if n > 1 {
		ds.prefix = ds.site.Name + "-"
	}
	for j := range masters {
		addr := fmt.Sprintf("127.0.0.1:%d", base+10*j)
		ds.masterAddrs = append(ds.masterAddrs, addr)
		ds.site.Masters = append(ds.site.Masters, wire.NodeID(addr))
	}
	for j := 1; j <= servers; j++ {
		ds.addrs = append(ds.addrs, fmt.Sprintf("127.0.0.1:%d", base+j))
	}
	switch {
	case redis == "":
	case redisGiven:
		ds.redisAddr = redis
	default:
		ds.redisAddr = fmt.Sprintf("127.0.0.1:%d", base+devRedisPortOffset)
	}
	switch {
	case !redisTLS || ds.redisAddr == "":
	case redisTLSAddr != "":
		ds.redisTLSAddr = redisTLSAddr
	default:
		ds.redisTLSAddr = fmt.Sprintf("127.0.0.1:%d", base+devRedisPortOffset+1)
	}
	return ds
}

// masters returns the site's master addresses as clients take them.
func (ds *devSite) masters() string { return strings.Join(ds.masterAddrs, ",") }

// label names the site in messages ("" with one site).
func (ds *devSite) label() string {
	if ds.prefix == "" {
		return ""
	}
	return fmt.Sprintf("site %d (%s): ", ds.site.ID, ds.site.Name)
}

// redisCLIFlags returns redis-cli's flags for addr ("-p 7379", or "-h
// HOST -p PORT" for a host other than 127.0.0.1).
func redisCLIFlags(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "-u redis://" + addr
	}
	if host == "127.0.0.1" || host == "localhost" {
		return "-p " + port
	}
	return "-h " + host + " -p " + port
}

// awaitDevReady waits until the cluster is ready: every process runs, the
// master answers with the volumes' configurations, it hears from
// every server, every chain member runs its volume's configuration, and
// the Redis-protocol proxy (if redisAddr is set) answers PING.
// It fails as soon as a process exits, with the end of its log, or after
// timeout, saying what is missing.
func awaitDevReady(ctx context.Context, procs []*devProcess, exited <-chan *devProcess, masterAddrs string, servers []string, redisAddr string, tlsFiles client.TLSFiles, timeout time.Duration) error {
	deadline := time.After(timeout)
	missing := "no answer from the master"
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted before the cluster was ready")
		case p := <-exited:
			return fmt.Errorf("%s exited while the cluster was starting (%s); the end of its log:\n%s", p.name, p.state(), p.logTail(devLogTailLines))
		case <-deadline:
			var tails strings.Builder
			for _, p := range procs {
				fmt.Fprintf(&tails, "%s:\n%s", p.name, p.logTail(3))
			}
			return fmt.Errorf("cluster not ready after %s: %s; the end of each log:\n%s", timeout, missing, tails.String())
		default:
		}
		ready, what := clusterReady(ctx, masterAddrs, servers, tlsFiles)
		if ready && redisAddr != "" {
			if err := pingRedis(redisAddr); err != nil {
				ready, what = false, fmt.Sprintf("the proxy at %s does not answer PING: %v", redisAddr, err)
			}
		}
		if ready {
			// A process that exited while the status was being asked
			// for makes the answer stale.
			select {
			case p := <-exited:
				return fmt.Errorf("%s exited while the cluster was starting (%s); the end of its log:\n%s", p.name, p.state(), p.logTail(devLogTailLines))
			default:
				return nil
			}
		}
		missing = what
		select {
		case <-time.After(devReadyPoll):
		case <-ctx.Done():
		}
	}
}

// clusterReady asks the master for the cluster's status and reports
// whether it is ready, or what is missing.
func clusterReady(ctx context.Context, masterAddrs string, servers []string, tlsFiles client.TLSFiles) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, devStatusTimeout)
	defer cancel()
	c, err := client.Dial(ctx, masterAddrs, client.Options{TLS: tlsFiles})
	if err != nil {
		return false, "no configuration from the master"
	}
	defer c.Close()
	s, err := c.Status(ctx)
	if err != nil {
		return false, "no status from the master"
	}
	return s.Ready(servers)
}

// pingRedis sends PING to the Redis-protocol server at addr and expects
// +PONG.
func pingRedis(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, devStatusTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(devStatusTimeout))
	if _, err := io.WriteString(nc, "PING\r\n"); err != nil {
		return err
	}
	reply := make([]byte, len("+PONG\r\n"))
	if _, err := io.ReadFull(nc, reply); err != nil {
		return err
	}
	if string(reply) != "+PONG\r\n" {
		return fmt.Errorf("answered %q", reply)
	}
	return nil
}

// devProcess is one process catena dev runs, and restarts when it exits.
type devProcess struct {
	name string
	addr string
	// http is the address of its HTTP listener ("" for none).
	http string
	// extra is another address it listens on (the proxy's TLS port; "").
	extra string
	// role is what its certificate lets it be (master, server, proxy).
	role security.Role
	args []string
	// stateless: the process keeps no data (the proxy) and gets no -data.
	stateless bool
	cmd       *exec.Cmd
	// logPath is the process's log; set by start.
	logPath string
	// done is closed once cmd has been waited for.
	done chan struct{}
}

// start launches the process with its output appended to <dir>/<name>.log
// and its pid in <dir>/<name>.pid, and sends p on exited when it exits.
// pipe is the read end of dev's pipe (see devPipeEnv).
func (p *devProcess) start(exe, dir string, pipe *os.File, exited chan<- *devProcess) error {
	p.logPath = filepath.Join(dir, p.name+".log")
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(exe, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{pipe} // descriptor 3 in the child
	cmd.Env = append(os.Environ(), devPipeEnv+"=3")
	// Ctrl-C reaches dev only; dev stops the processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	go func() {
		cmd.Wait()
		close(done)
		exited <- p
	}()
	return os.WriteFile(filepath.Join(dir, p.name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
}

func (p *devProcess) pid() int { return p.cmd.Process.Pid }

// state describes how the process exited ("exit status 1", "signal:
// killed").
func (p *devProcess) state() string { return p.cmd.ProcessState.String() }

// failed reports whether the process exited by itself with an error
// status, rather than being killed by a signal.
func (p *devProcess) failed() bool {
	s := p.cmd.ProcessState
	return s != nil && s.Exited() && s.ExitCode() != 0
}

// logLineStart matches the start of a log line written by slog's text
// handler, which the tail leaves out: the message is what matters.
var logLineStart = regexp.MustCompile(`^time=\S+ `)

// logTail returns the last n lines of the process's log, indented.
func (p *devProcess) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "    (no log: " + err.Error() + ")\n"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var b strings.Builder
	for _, l := range lines[max(0, len(lines)-n):] {
		fmt.Fprintf(&b, "    %s\n", logLineStart.ReplaceAllString(l, ""))
	}
	return b.String()
}

// stopAll sends SIGTERM to every running process and SIGKILL to those
// still running after devStopWait, and waits for them.
func stopAll(procs []*devProcess) {
	for _, p := range procs {
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(devStopWait)
	for _, p := range procs {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9/._:-]+$`)

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and / . _ - :
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// offsetPort returns addr (host:port) with its port raised by offset.
func offsetPort(addr string, offset int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("offsetPort(%q): %v", addr, err))
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		panic(fmt.Sprintf("offsetPort(%q): %v", addr, err))
	}
	return net.JoinHostPort(host, strconv.Itoa(n+offset))
}

// devCertificates creates dev's CA in dir (or reuses the one a kept -dir
// holds), issues every process a certificate for its role and address
// (a proxy for its name: "proxy", "site2-proxy"), adds the TLS flags to
// their arguments, and returns the files of a client certificate ("dev")
// for dev itself and the catena commands. One CA serves every site, so
// the links between sites are mutually authenticated like those within
// one: a site's servers and masters present their own certificates to
// the other sites' processes.
func devCertificates(dir string, procs []*devProcess) (client.TLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return client.TLSFiles{}, err
	}
	ca, err := security.LoadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = security.NewCA("catena dev CA", security.CAValidityDefault); err == nil {
			err = ca.Save(dir)
		}
	}
	if err != nil {
		return client.TLSFiles{}, fmt.Errorf("catena dev's CA in %s: %w", dir, err)
	}
	for _, p := range procs {
		name := p.addr
		if p.role == security.RoleProxy {
			name = p.name
		}
		files, err := issueCerts(ca, dir, p.role, []string{name}, []string{"127.0.0.1", "localhost"}, 0, nil)
		if err != nil {
			return client.TLSFiles{}, err
		}
		p.args = append(p.args, "-tls-ca", files[0].CA, "-tls-cert", files[0].Cert, "-tls-key", files[0].Key)
	}
	files, err := issueCerts(ca, dir, security.RoleClient, []string{"dev"}, nil, 0, nil)
	if err != nil {
		return client.TLSFiles{}, err
	}
	return client.TLSFiles(files[0]), nil
}
