package main

import (
	"context"
	"errors"
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
	"github.com/catena-kv/catena/internal/cli"
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

// devDescription is catena dev -h's description.
const devDescription = `Starts a local cluster: a master (or a replicated master's members),
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
in plaintext without a password. -insecure turns TLS off everywhere.`

// devOptions are catena dev's flags, checked and completed.
type devOptions struct {
	// dir is -dir ("": a new temporary directory, removed when dev stops).
	dir                       string
	servers, masters, volumes int
	replicas                  int
	placement                 string
	basePort                  int
	noSync, insecure          bool
	// checkInvariants runs the servers and masters with
	// -check-invariants.
	checkInvariants            bool
	restartDelay, readyTimeout time.Duration
	keyspaces                  []client.Keyspace
	httpOffset                 int
	// redisAddr is the one-site proxy's address ("" for no proxy), given
	// by -redis when redisGiven; redisTLS says whether the proxies serve
	// a TLS port, at redisTLSAddr when given (one site only), else each
	// site's default.
	redisAddr    string
	redisGiven   bool
	redisTLS     bool
	redisTLSAddr string
	sites        int
	// defaultK is the default keyspace's k (0: strong): -default-k, or a
	// majority of its replicas with several sites.
	defaultK          int
	wanRTT, wanJitter time.Duration
	logs              *logFlags
	// keyspacesFile is -keyspaces ("": none), read by check.
	keyspacesFile string
}

// runDev starts a master and servers as separate processes on loopback,
// waits until the cluster answers, so a user can kill one and watch the
// chain repair, and stops them on Ctrl-C.
func runDev(args []string, stdout io.Writer) error {
	o, err := parseDevFlags(args)
	if err != nil {
		return err
	}
	logHandler, err := o.logs.handler(stdout)
	if err != nil {
		return err
	}
	log := slog.New(logHandler)
	if err := o.check(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	devSites, procs := o.layout()
	if err := checkPortsFree(procs); err != nil {
		return err
	}
	dir, created, err := o.workDir()
	if err != nil {
		return err
	}
	if created {
		defer os.RemoveAll(dir) // after the processes stopped: deferred before stopAll
	}
	clientFiles, err := o.placeFiles(dir, procs)
	if err != nil {
		return err
	}

	// Every process gets the read end of this pipe; only dev holds the
	// write end (see cli.DevPipeEnv).
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
		if err := p.start(exe, dir, pipeRead, exited); err != nil {
			return err
		}
	}
	ready := func() error {
		for _, ds := range devSites {
			if err := awaitDevReady(ctx, procs, exited, ds.masters(), ds.addrs, ds.redisAddr, clientFiles, o.readyTimeout); err != nil {
				return fmt.Errorf("%s%w", ds.label(), err)
			}
		}
		return nil
	}
	if err := ready(); err != nil {
		return err
	}
	if len(o.keyspaces) > 0 {
		if err := o.createKeyspaces(ctx, devSites, clientFiles, stdout); err != nil {
			return err
		}
		if err := ready(); err != nil {
			return err
		}
	}
	o.printBanner(stdout, devSites, dir, created, clientFiles)
	return supervise(ctx, log, stdout, exited, o.restartDelay, func(p *devProcess) error { return p.start(exe, dir, pipeRead, exited) })
}

// workDir returns the absolute path of dev's directory: -dir, created
// if missing, or a new temporary one (created).
func (o *devOptions) workDir() (dir string, created bool, err error) {
	dir, created = o.dir, o.dir == ""
	if created {
		if dir, err = os.MkdirTemp("", "catena-dev-"); err != nil {
			return "", false, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return dir, created, nil
}

// placeFiles gives each process that keeps data its directory in dir
// and, unless -insecure, its certificate in dir/tls, and returns the
// client certificate's files (zero with -insecure).
func (o *devOptions) placeFiles(dir string, procs []*devProcess) (client.TLSFiles, error) {
	for _, p := range procs {
		if !p.stateless {
			p.args = append(p.args, "-data", filepath.Join(dir, p.name))
		}
	}
	if o.insecure {
		return client.TLSFiles{}, nil
	}
	return devCertificates(filepath.Join(dir, "tls"), procs)
}

// parseDevFlags parses catena dev's flags and checks those that must
// agree with one another.
func parseDevFlags(args []string) (*devOptions, error) {
	fs := cli.NewFlagSet("dev", "catena dev [flags]", devDescription)
	o := &devOptions{}
	fs.StringVar(&o.dir, "dir", "", "directory for data, logs and pid files, kept when dev stops (default: a new temporary directory, removed when dev stops)")
	fs.IntVar(&o.servers, "servers", 3, "number of servers; all form the chain")
	fs.IntVar(&o.masters, "masters", 1, "master members: 1, or 3 or 5 for a Raft-replicated master")
	fs.IntVar(&o.volumes, "volumes", 1, "volumes (chains) keys hash to")
	fs.IntVar(&o.replicas, "replicas", 0, "replicas per volume (0: every server with one volume, else 3)")
	fs.StringVar(&o.placement, "placement", "random", "placement: ring, random, random-seq, bidirectional, rotated")
	fs.IntVar(&o.basePort, "base-port", 7100, "master member i (from 0) listens on base-port+10·i, server i (from 1) on base-port+i")
	fs.BoolVar(&o.noSync, "no-sync", false, "run servers without fsync (see catena server -h)")
	fs.BoolVar(&o.checkInvariants, "check-invariants", true, "run servers and masters with -check-invariants: a violation of the protocol's invariants stops the process (see catena server -h)")
	fs.DurationVar(&o.restartDelay, "restart-delay", 5*time.Second, "restart a process that exited after this long (0: leave it stopped)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 30*time.Second, "fail when the cluster is not ready after this long")
	keyspacesFile := fs.String("keyspaces", "", "create the keyspaces this JSON file lists once the cluster runs (see docs/operations.md, \"Keyspaces\")")
	fs.IntVar(&o.httpOffset, "http-offset", 80, "every process serves HTTP on its port plus this (the master its status page at /, every process its metrics at /metrics); 0: none")
	fs.StringVar(&o.redisAddr, "redis", defaultRedisAddr, "address of the Redis-protocol proxy (catena proxy) dev starts, plaintext without a password (a loopback address); moves with -base-port (base-port+279) unless given; 'off': no proxy. With -sites, site i's proxy is at base-port+1000·(i−1)+279 (-redis off: none)")
	fs.StringVar(&o.redisTLSAddr, "redis-tls", "", "address where the proxy serves the Redis protocol over TLS (redis-cli --tls); default base-port+280; 'off': none. With -sites, site i's at base-port+1000·(i−1)+280 (-redis-tls off: none)")
	fs.BoolVar(&o.insecure, "insecure", false, "plaintext on every link and HTTP, for every site: no certificates, anyone who reaches a port may join the cluster")
	fs.IntVar(&o.sites, "sites", 1, "sites (datacenters) to start, each a whole cluster with -masters masters and -servers servers, site i's ports at base-port+1000·(i−1); with more than one the default keyspace is causal and replicated by every site (docs/adr/0013-sites-and-geo-causal.md)")
	fs.IntVar(&o.defaultK, "default-k", 0, "make the default keyspace causal with this k (0: strong with one site; with -sites, a majority of its replicas)")
	fs.DurationVar(&o.wanRTT, "wan-rtt", 0, "with -sites: the round trip between processes of different sites, emulated by delaying messages (the paper uses 120ms; 0: none)")
	fs.DurationVar(&o.wanJitter, "wan-jitter", 10*time.Millisecond, "with -wan-rtt: the round trip varies by up to ± this")
	o.logs = registerLogFlags(fs)
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	given := cli.Given(fs)
	o.redisGiven = given["redis"]
	if !o.redisGiven {
		o.redisAddr = fmt.Sprintf("127.0.0.1:%d", o.basePort+devRedisPortOffset)
	}
	if o.redisAddr == "off" {
		o.redisAddr = ""
	}
	switch {
	case o.sites < 1 || o.sites > devSitesMax:
		return nil, cli.UsageErrorf("-sites %d: want 1 to %d", o.sites, devSitesMax)
	case o.sites > 1 && o.redisGiven && o.redisAddr != "":
		return nil, cli.UsageErrorf("-redis with -sites: only off (each site's proxy port follows its base port)")
	case o.sites > 1 && given["redis-tls"] && o.redisTLSAddr != "off":
		return nil, cli.UsageErrorf("-redis-tls with -sites: only off (each site's proxy TLS port follows its base port)")
	case o.wanRTT < 0 || o.wanJitter < 0 || o.wanJitter > o.wanRTT && o.wanRTT > 0:
		return nil, cli.UsageErrorf("-wan-rtt and -wan-jitter must not be negative, and the jitter not above the round trip")
	case o.wanRTT > 0 && o.sites == 1:
		return nil, cli.UsageErrorf("-wan-rtt needs -sites 2 or more: it delays messages between sites")
	case o.defaultK < 0:
		return nil, cli.UsageErrorf("-default-k must not be negative")
	}
	o.redisTLS = !o.insecure && o.redisAddr != "" && o.redisTLSAddr != "off"
	if !o.redisTLS || !given["redis-tls"] {
		o.redisTLSAddr = ""
	}
	if o.redisAddr != "" {
		if _, port, err := net.SplitHostPort(o.redisAddr); err != nil || port == "" {
			return nil, cli.UsageErrorf("-redis %q: want host:port or off", o.redisAddr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, cli.UsageErrorf("-redis %q: the port must be a number from 1 to 65535", o.redisAddr)
		}
	}
	if err := cli.NoArguments(args); err != nil {
		return nil, err
	}
	o.keyspacesFile = *keyspacesFile
	return o, nil
}

// check checks the sizes and ports, reads the keyspaces file, and
// completes the default keyspace's k.
func (o *devOptions) check() error {
	if o.servers < 1 || o.servers > 9 || o.basePort < 1 || o.httpOffset < 0 || o.basePort+devSitePortStep*(o.sites-1)+max(10*o.masters, devRedisPortOffset+1)+o.httpOffset > 65535 {
		return errors.New("-servers must be 1 to 9, -http-offset at least 0, and ports must fit below 65536")
	}
	if o.masters != 1 && o.masters != 3 && o.masters != 5 {
		return errors.New("-masters must be 1, 3 or 5")
	}
	if o.keyspacesFile != "" {
		var err error
		if o.keyspaces, err = readKeyspaces(o.keyspacesFile); err != nil {
			return err
		}
	}
	if o.readyTimeout <= 0 {
		return errors.New("-ready-timeout must be positive")
	}
	if o.sites > 1 && o.defaultK == 0 {
		t := o.replicas
		if t == 0 {
			t = o.servers
			if o.volumes > 1 {
				t = min(t, 3)
			}
		}
		o.defaultK = t/2 + 1
	}
	return nil
}

// layout lays out the sites and the processes of each, with their
// arguments but -data and the TLS flags.
func (o *devOptions) layout() ([]*devSite, []*devProcess) {
	var devSites []*devSite
	for i := 1; i <= o.sites; i++ {
		devSites = append(devSites, newDevSite(i, o.sites, o.basePort+devSitePortStep*(i-1), o.masters, o.servers, o.redisAddr, o.redisGiven, o.redisTLS, o.redisTLSAddr))
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
		for _, other := range devSites {
			if other != ds {
				remote = append(remote, other.masterAddrs...)
				remote = append(remote, other.addrs...)
			}
		}
		var wanArgs []string
		if o.wanRTT > 0 {
			wanArgs = []string{"-wan-rtt", o.wanRTT.String(), "-wan-jitter", o.wanJitter.String(), "-wan-peers", strings.Join(remote, ",")}
		}
		for i, addr := range ds.masterAddrs {
			a := []string{"master", "-listen", addr, "-servers", strings.Join(ds.addrs, ","),
				"-volumes", strconv.Itoa(o.volumes), "-replicas", strconv.Itoa(o.replicas), "-placement", o.placement}
			if o.defaultK > 0 {
				a = append(a, "-default-k", strconv.Itoa(o.defaultK))
			}
			if o.sites > 1 {
				a = append(a, "-site", strconv.Itoa(int(ds.site.ID)), "-sites", formatSites(siteList), "-default-sites", formatSiteIDs(allSites))
			}
			if o.checkInvariants {
				a = append(a, "-check-invariants")
			}
			name := "master"
			if o.masters > 1 {
				name = fmt.Sprintf("m%d", i+1)
				a = append(a, "-masters", strings.Join(ds.masterAddrs, ","))
			}
			ds.procs = append(ds.procs, &devProcess{name: ds.prefix + name, addr: addr, role: security.RoleMaster, args: append(a, wanArgs...)})
		}
		for i, addr := range ds.addrs {
			a := []string{"server", "-listen", addr, "-master", strings.Join(ds.masterAddrs, ",")}
			if o.noSync {
				a = append(a, "-no-sync")
			}
			if o.checkInvariants {
				a = append(a, "-check-invariants")
			}
			if o.sites > 1 {
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
		p.args = append(p.args, o.logs.args()...)
		if o.httpOffset > 0 {
			p.http = offsetPort(p.addr, o.httpOffset)
			p.args = append(p.args, "-http", p.http)
		}
	}
	return devSites, procs
}

// checkPortsFree refuses to start when a port is in use: a process would
// fail while clients reach whatever holds the port (often another
// catena dev).
func checkPortsFree(procs []*devProcess) error {
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
	return nil
}

// createKeyspaces creates at each site the keyspaces of -keyspaces that
// it replicates.
func (o *devOptions) createKeyspaces(ctx context.Context, devSites []*devSite, clientFiles client.TLSFiles, stdout io.Writer) error {
	for _, ds := range devSites {
		var here []client.Keyspace
		for _, k := range o.keyspaces {
			if len(k.Sites) == 0 || slices.Contains(k.Sites, uint32(ds.site.ID)) {
				here = append(here, k)
			}
		}
		fmt.Fprint(stdout, ds.label())
		if err := createDevKeyspaces(ctx, ds.masters(), here, clientFiles, stdout); err != nil {
			return fmt.Errorf("%s%w", ds.label(), err)
		}
	}
	return nil
}

// printBanner prints the cluster dev runs in dir (a temporary one dev
// created, when created) and what to try with it.
func (o *devOptions) printBanner(stdout io.Writer, devSites []*devSite, dir string, created bool, clientFiles client.TLSFiles) {
	if o.sites > 1 {
		fmt.Fprintf(stdout, "catena dev: %d sites ready, the default keyspace causal (k=%d) and replicated by all", o.sites, o.defaultK)
		if o.wanRTT > 0 {
			fmt.Fprintf(stdout, ", %s ± %s round trip between sites", o.wanRTT, o.wanJitter)
		}
		fmt.Fprintf(stdout, "; data, logs and pid files in %s", dir)
	} else {
		fmt.Fprintf(stdout, "catena dev: cluster ready; data, logs and pid files in %s", dir)
	}
	if created {
		fmt.Fprint(stdout, " (removed when dev stops; -dir DIR keeps them)")
	}
	fmt.Fprintln(stdout)
	scheme := "https"
	if o.insecure {
		scheme = "http"
	}
	for _, ds := range devSites {
		if o.sites > 1 {
			fmt.Fprintf(stdout, "site %d (%s): clients attach to its masters, -master %s\n", ds.site.ID, ds.site.Name, ds.masters())
		}
		for _, p := range ds.procs {
			web := ""
			if p.http != "" {
				web = "  " + scheme + "://" + p.http + "/"
			}
			fmt.Fprintf(stdout, "  %-13s %s%s  pid %-7d log %s\n", p.name, p.addr, web, p.pid(), filepath.Join(dir, p.name+".log"))
		}
	}
	if first := devSites[0].procs[0]; first.http != "" {
		fmt.Fprintf(stdout, "status page: %s://%s/ (JSON at /status.json; every site's master has one); Prometheus metrics at /metrics of every %s address above\n", scheme, first.http, scheme)
	}
	if clientFiles.IsZero() {
		fmt.Fprintln(stdout, "TLS: off (-insecure): every link is plaintext")
	} else {
		what := "every link"
		if o.sites > 1 {
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
		if o.sites == 1 {
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
	if o.restartDelay > 0 {
		fmt.Fprintf(stdout, " (after %s)", o.restartDelay)
	}
	fmt.Fprintf(stdout, ":\n  kill -9 $(cat %s)\n", shellQuote(filepath.Join(dir, devSites[0].prefix+"s1.pid")))
	fmt.Fprintln(stdout, "Ctrl-C stops the cluster.")
}

// supervise restarts (with start) each process that exits, after
// restartDelay (0: never), until ctx ends; a process that failed has the
// end of its log printed.
func supervise(ctx context.Context, log *slog.Logger, stdout io.Writer, exited <-chan *devProcess, restartDelay time.Duration, start func(*devProcess) error) error {
	restart := make(chan *devProcess, cap(exited))
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
			if restartDelay > 0 {
				log.Info("restarting", "process", p.name, "after", restartDelay)
				time.AfterFunc(restartDelay, func() { restart <- p })
			}
		case p := <-restart:
			if err := start(p); err != nil {
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
// pipe is the read end of dev's pipe (see cli.DevPipeEnv).
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
	cmd.Env = append(os.Environ(), cli.DevPipeEnv+"=3")
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
