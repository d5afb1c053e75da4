package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/ycsb"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/security"
)

const (
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
)

// System is a running system under test: its processes and how to open a
// YCSB binding on it.
type System struct {
	// Name labels the system in tables ("catena", "etcd", "redis").
	Name string
	// Setup describes how it runs (members, durability), for the report.
	Setup   string
	Version string
	// Addr is where clients connect: Redis's address, Catena's proxy.
	Addr  string
	procs []*Process
	// masterAddr is Catena's master.
	masterAddr string
	open       func(ctx context.Context) (ycsb.DB, error)
	// state, if set, returns a short description of the system's state
	// (Catena: the chains' epochs), compared before and after each run.
	state func(ctx context.Context) string
	// causal: the benchmark's keys are in a causal keyspace; each phase
	// reports the size of the clients' causal metadata.
	causal bool
	// scans: the binding reads ranges of keys (YCSB's scans, workload
	// E); workloads with scans skip a system without.
	scans bool
}

// Pids returns the pids of the system's processes.
func (s *System) Pids() []int {
	var out []int
	for _, p := range s.procs {
		out = append(out, p.Pid())
	}
	return out
}

// Stop stops every process of the system by its pid.
func (s *System) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop(stopGrace)
	}
}

// CPUTime returns the CPU time used so far by the system's processes.
func (s *System) CPUTime() time.Duration {
	var total time.Duration
	for _, p := range s.procs {
		total += p.cpuTime()
	}
	return total
}

// PeakRSS returns each process's peak resident memory so far, in bytes,
// by process name.
func (s *System) PeakRSS() []ProcessMemory {
	var out []ProcessMemory
	for _, p := range s.procs {
		out = append(out, ProcessMemory{Process: p.Name, PeakRSS: p.peakRSS()})
	}
	return out
}

// ProcessMemory is one process's peak resident memory.
type ProcessMemory struct {
	Process string
	PeakRSS int64 // bytes; 0 if unknown
}

// Open returns a new YCSB binding on the system.
func (s *System) Open(ctx context.Context) (ycsb.DB, error) { return s.open(ctx) }

// CatenaOptions configure StartCatena.
type CatenaOptions struct {
	Binary   string // the catena binary
	Dir      string // data and logs go under it
	Replicas int    // chain length t
	// PerThreadClients gives each YCSB thread its own client.Client
	// instead of one shared client.
	PerThreadClients bool
	FieldCount       int
	// ServerArgs are extra flags for every `catena server`.
	ServerArgs []string
	// ProfileDir, if set, gets each server's CPU profile (NAME-sN.pprof),
	// and the proxy's (NAME-proxy.pprof).
	ProfileDir string
	Name       string // default "catena"
	// Proxy runs a `catena proxy` too, and the YCSB binding is go-redis
	// through it (RedisDB on strings) with a pool of Threads connections,
	// instead of the Go client.
	Proxy bool
	// ServerRedis gives every server its own Redis front end
	// (-redis-listen), and the YCSB binding is go-redis over them, the
	// threads spread over the servers.
	ServerRedis bool
	Threads     int
	// TLS runs every link over mutual TLS 1.3 (a CA and certificates
	// made under Dir), the clients' too.
	TLS bool
	// CausalK, when set, puts the benchmark's records (YCSB's table,
	// prefix "usertable/") in a causal keyspace with this k (ChainReaction:
	// updates answered by the first k of the t=Replicas members, reads
	// from any member the client may use), created once the cluster runs.
	CausalK int
	// AnyMemberReads makes the Go client's reads go to any member of the
	// key's chain (client.AnyMember, CRAQ) instead of the tail.
	AnyMemberReads bool
}

// benchKeyspace is the causal keyspace of a CausalK cluster: YCSB's
// records, whose keys are recordKey(table, key).
func benchKeyspace(k, replicas int) client.Keyspace {
	return client.Keyspace{Name: "ycsb", Prefix: recordKey(prop.TableNameDefault, ""), Mode: "causal", K: k, Replicas: replicas, Volumes: 1}
}

// StartCatena starts a master and Replicas servers, as `catena master` and
// `catena server` processes with data directories under Dir, and waits
// until the chain has every server and accepts writes.
func StartCatena(ctx context.Context, o CatenaOptions) (sys *System, err error) {
	ports, err := freePorts(2*o.Replicas + 2)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	masterAddr, proxyAddr := addr(ports[0]), addr(ports[1])
	var servers, redisAddrs []string
	for i, p := range ports[2 : 2+o.Replicas] {
		servers = append(servers, addr(p))
		redisAddrs = append(redisAddrs, addr(ports[2+o.Replicas+i]))
	}
	if o.Name == "" {
		o.Name = "catena"
	}
	sys = &System{Name: o.Name, Version: catenaVersion()}
	defer func() {
		if err != nil {
			sys.Stop()
		}
	}()
	var clientOpts client.Options
	tlsArgs := map[string][]string{}
	if o.TLS {
		if clientOpts.TLS, err = benchCertificates(filepath.Join(o.Dir, "tls"), masterAddr, servers, tlsArgs); err != nil {
			return sys, err
		}
	}
	m, err := startProcess(o.Dir, "master", o.Binary, append([]string{"master", "-listen", masterAddr,
		"-data", filepath.Join(o.Dir, "master"), "-servers", strings.Join(servers, ",")}, tlsArgs[masterAddr]...)...)
	if err != nil {
		return sys, err
	}
	sys.procs = append(sys.procs, m)
	for i, s := range servers {
		name := fmt.Sprintf("s%d", i+1)
		args := append([]string{"server", "-listen", s, "-master", masterAddr, "-data", filepath.Join(o.Dir, name)}, o.ServerArgs...)
		args = append(args, tlsArgs[s]...)
		if o.ServerRedis {
			args = append(args, "-redis-listen", redisAddrs[i])
		}
		if o.ProfileDir != "" {
			args = append(args, "-cpuprofile", filepath.Join(o.ProfileDir, sys.Name+"-"+name+".pprof"))
		}
		p, err := startProcess(o.Dir, name, o.Binary, args...)
		if err != nil {
			return sys, err
		}
		sys.procs = append(sys.procs, p)
	}
	sync := "fsync on every group commit (default)"
	for _, a := range o.ServerArgs {
		if a == "-no-sync" {
			sync = "no fsync (-no-sync)"
		}
	}
	clients := "one client.Client shared by all threads"
	if o.PerThreadClients {
		clients = "one client.Client per thread"
	}
	sys.Setup = fmt.Sprintf("master + %d server(s), chain length t=%d, Pebble with %s; %s", o.Replicas, o.Replicas, sync, clients)
	if o.TLS {
		sys.Setup += "; every link mutual TLS 1.3 (ECDSA P-256 certificates), the client's too"
	}
	if o.AnyMemberReads {
		clientOpts.Consistency = client.AnyMember
		sys.Setup += "; reads at any member of the chain (client.AnyMember: CRAQ, a dirty key's at the tail)"
	}
	volumes := 1
	if o.CausalK > 0 {
		ks := benchKeyspace(o.CausalK, o.Replicas)
		sys.causal, volumes = true, 2
		sys.Setup = fmt.Sprintf("master + %d server(s), the records in a causal+ keyspace (prefix %q, ChainReaction): chain length t=%d, writes answered by the first k=%d; Pebble with %s; %s",
			o.Replicas, ks.Prefix, o.Replicas, o.CausalK, sync, clients)
	}
	ready := catenaReady(o, masterAddr, clientOpts, volumes)
	if err := waitFor(ctx, "catena cluster", startTimeout, sys.procs, ready); err != nil {
		return sys, err
	}
	sys.masterAddr = masterAddr
	sys.open = func(ctx context.Context) (ycsb.DB, error) {
		return NewCatenaDB(ctx, masterAddr, o.FieldCount, o.PerThreadClients, clientOpts)
	}
	sys.scans = true
	if o.ServerRedis {
		ready := func(ctx context.Context) error {
			for _, a := range redisAddrs {
				c := redis.NewClient(&redis.Options{Addr: a})
				err := c.Ping(ctx).Err()
				c.Close()
				if err != nil {
					return err
				}
			}
			return nil
		}
		if err := waitFor(ctx, "the servers' Redis front ends", startTimeout, sys.procs, ready); err != nil {
			return sys, err
		}
		sys.Addr = strings.Join(redisAddrs, ",")
		sys.Setup = fmt.Sprintf("master + %d server(s), chain length t=%d, Pebble with %s, each server serving the Redis protocol itself (-redis-listen: reads at any clean member answered from its replica); "+
			"go-redis with %d connections spread over the servers, each record a hash (HSET, HMGET, HGETALL), as the redis row", o.Replicas, o.Replicas, sync, o.Threads)
		sys.open = func(ctx context.Context) (ycsb.DB, error) {
			return NewRedisSpreadDB(ctx, redisAddrs, o.Threads)
		}
		sys.scans = false
	}
	if o.Proxy {
		args := []string{"proxy", "-listen", proxyAddr, "-master", masterAddr}
		if o.ProfileDir != "" {
			args = append(args, "-cpuprofile", filepath.Join(o.ProfileDir, sys.Name+"-proxy.pprof"))
		}
		p, err := startProcess(o.Dir, "proxy", o.Binary, args...)
		if err != nil {
			return sys, err
		}
		sys.procs = append(sys.procs, p)
		ready := func(ctx context.Context) error {
			c := redis.NewClient(&redis.Options{Addr: proxyAddr})
			defer c.Close()
			return c.Ping(ctx).Err()
		}
		if err := waitFor(ctx, "catena proxy", startTimeout, sys.procs, ready); err != nil {
			return sys, err
		}
		sys.Addr = proxyAddr
		sys.Setup = fmt.Sprintf("master + %d server(s), chain length t=%d, Pebble with %s, and one `catena proxy`; "+
			"go-redis with a pool of %d connections, each record a hash (HSET, HMGET, HGETALL), as the redis row", o.Replicas, o.Replicas, sync, o.Threads)
		sys.open = func(ctx context.Context) (ycsb.DB, error) {
			return NewRedisDB(ctx, proxyAddr, o.Threads)
		}
		sys.scans = false // the Redis binding has no range read
	}
	sys.state = catenaState(masterAddr, clientOpts)
	return sys, nil
}

// catenaReady reports, for waitFor, whether the cluster of master
// masterAddr is ready for the benchmark: every one of its volumes
// (volumes in all) has a chain of o.Replicas servers, each alive and
// current, and it accepts writes. With CausalK it creates the causal
// keyspace first.
func catenaReady(o CatenaOptions, masterAddr string, clientOpts client.Options, volumes int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		c, err := client.Dial(ctx, masterAddr, clientOpts)
		if err != nil {
			return err
		}
		defer c.Close()
		if o.CausalK > 0 {
			// Creating it again with the same settings succeeds: a retry.
			if _, err := c.CreateKeyspace(ctx, benchKeyspace(o.CausalK, o.Replicas)); err != nil {
				return err
			}
		}
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if len(st.Volumes) != volumes {
			return fmt.Errorf("%d configurations, want %d", len(st.Volumes), volumes)
		}
		for _, cfg := range st.Volumes {
			if len(cfg.Chain) != o.Replicas || cfg.Joining != "" {
				return fmt.Errorf("volume %d: chain %v joining %q", cfg.Volume, cfg.Chain, cfg.Joining)
			}
			for _, srv := range st.Servers {
				if slices.Contains(cfg.Chain, srv.Addr) && (!srv.Alive || replicaEpoch(srv, cfg.Volume) != cfg.Epoch) {
					return fmt.Errorf("server %s not current in volume %d", srv.Addr, cfg.Volume)
				}
			}
		}
		if o.CausalK > 0 {
			if err := c.Put(ctx, recordKey(prop.TableNameDefault, "bench-ready"), []byte("ok")); err != nil {
				return err
			}
		}
		return c.Put(ctx, "bench/ready", []byte("ok"))
	}
}

// catenaState returns the system's state line: the epochs of the
// volumes of the cluster of master masterAddr.
func catenaState(masterAddr string, clientOpts client.Options) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		c, err := client.Dial(ctx, masterAddr, clientOpts)
		if err != nil {
			return "unknown: " + err.Error()
		}
		defer c.Close()
		st, err := c.Status(ctx)
		if err != nil || len(st.Volumes) == 0 {
			return "unknown"
		}
		var epochs []string
		for _, v := range st.Volumes {
			epochs = append(epochs, fmt.Sprint(v.Epoch))
		}
		if len(epochs) == 1 {
			return "epoch " + epochs[0]
		}
		return "epochs " + strings.Join(epochs, ", ")
	}
}

// benchCertificates makes a CA in dir, a certificate for the master and
// every server, whose TLS flags it puts in args by address, and a client
// certificate, whose files it returns.
func benchCertificates(dir, master string, servers []string, args map[string][]string) (client.TLSFiles, error) {
	ca, err := security.NewCA("bench CA", security.CAValidityDefault)
	if err != nil {
		return client.TLSFiles{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return client.TLSFiles{}, err
	}
	if err := ca.Save(dir); err != nil {
		return client.TLSFiles{}, err
	}
	issue := func(id security.Identity) (security.Files, error) {
		is, err := ca.Issue(id, security.IssueOptions{})
		if err != nil {
			return security.Files{}, err
		}
		return is.Save(dir, id)
	}
	ids := []security.Identity{{Role: security.RoleMaster, Name: master}}
	for _, s := range servers {
		ids = append(ids, security.Identity{Role: security.RoleServer, Name: s})
	}
	for _, id := range ids {
		f, err := issue(id)
		if err != nil {
			return client.TLSFiles{}, err
		}
		args[id.Name] = []string{"-tls-ca", f.CA, "-tls-cert", f.Cert, "-tls-key", f.Key}
	}
	f, err := issue(security.Identity{Role: security.RoleClient, Name: "bench"})
	return client.TLSFiles(f), err
}

// replicaEpoch is the epoch a server last reported for a volume (0: none).
func replicaEpoch(srv client.ServerStatus, v uint32) uint64 {
	for _, r := range srv.Volumes {
		if r.Volume == v {
			return r.Epoch
		}
	}
	return 0
}

// catenaVersion names the source the benchmark was built from.
func catenaVersion() string {
	out, err := runQuiet("git", "rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown commit"
	}
	v := "commit " + out
	if status, err := runQuiet("git", "status", "--porcelain", "--untracked-files=no"); err == nil && status != "" {
		v += " with uncommitted changes"
	}
	return v
}

// EtcdOptions configure StartEtcd.
type EtcdOptions struct {
	Binary  string // default "etcd" from PATH
	Dir     string
	Members int
	// FieldCount is the fields per record, for the binding.
	FieldCount int
	// ExtraArgs are added to every member's command line.
	ExtraArgs []string
}

// StartEtcd starts a cluster of Members etcd processes on loopback ports
// and waits until it accepts writes.
func StartEtcd(ctx context.Context, o EtcdOptions) (sys *System, err error) {
	if o.Binary == "" {
		o.Binary = "etcd"
	}
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		return nil, err
	}
	var initial, endpoints []string
	for i := range o.Members {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
		endpoints = append(endpoints, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	sys = &System{Name: "etcd", Version: programVersion(o.Binary, "--version"),
		Setup: fmt.Sprintf("%d members (Raft), default durability (fsync of the WAL before each commit); linearizable reads", o.Members)}
	defer func() {
		if err != nil {
			sys.Stop()
		}
	}()
	token := fmt.Sprintf("catena-bench-%d", time.Now().UnixNano())
	for i := range o.Members {
		name := fmt.Sprintf("e%d", i+1)
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		args := append([]string{
			"--name", name, "--data-dir", filepath.Join(o.Dir, name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--logger", "zap", "--log-level", "warn",
		}, o.ExtraArgs...)
		p, err := startProcess(o.Dir, name, o.Binary, args...)
		if err != nil {
			return sys, err
		}
		sys.procs = append(sys.procs, p)
	}
	ready := func(ctx context.Context) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Context: ctx, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		for _, ep := range endpoints {
			if _, err := c.Status(ctx, ep); err != nil {
				return err
			}
		}
		_, err = c.Put(ctx, "bench/ready", "ok")
		return err
	}
	if err := waitFor(ctx, "etcd cluster", startTimeout, sys.procs, ready); err != nil {
		return sys, err
	}
	sys.open = func(ctx context.Context) (ycsb.DB, error) {
		return NewEtcdDB(ctx, endpoints, o.FieldCount)
	}
	sys.scans = true
	return sys, nil
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	Binary  string // default "redis-server" from PATH
	Dir     string
	Threads int // the binding's connection pool size
	// FsyncAlways syncs the append-only file before every answer
	// (appendfsync always) instead of every second.
	FsyncAlways bool
}

// StartRedis starts a standalone redis-server on a loopback port with an
// append-only file synced every second (or before every answer, with
// FsyncAlways) and no RDB snapshots.
func StartRedis(ctx context.Context, o RedisOptions) (sys *System, err error) {
	if o.Binary == "" {
		o.Binary = "redis-server"
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	dir := filepath.Join(o.Dir, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name, fsync := SystemRedis, "everysec"
	if o.FsyncAlways {
		name, fsync = SystemRedisAlways, "always"
	}
	sys = &System{Name: name, Version: programVersion(o.Binary, "--version"),
		Setup: "standalone, appendonly yes, appendfsync " + fsync + ", no RDB snapshots"}
	defer func() {
		if err != nil {
			sys.Stop()
		}
	}()
	p, err := startProcess(o.Dir, "redis", o.Binary, "--bind", "127.0.0.1", "--port", fmt.Sprint(ports[0]),
		"--dir", dir, "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
		"--protected-mode", "no", "--daemonize", "no")
	if err != nil {
		return sys, err
	}
	sys.procs = append(sys.procs, p)
	ready := func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		return c.Set(ctx, "bench/ready", "ok", 0).Err()
	}
	if err := waitFor(ctx, "redis", startTimeout, sys.procs, ready); err != nil {
		return sys, err
	}
	sys.Addr = addr
	sys.open = func(ctx context.Context) (ycsb.DB, error) { return NewRedisDB(ctx, addr, o.Threads) }
	return sys, nil
}

func runQuiet(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return strings.TrimSpace(string(out)), err
}
