package sim

import (
	"regexp"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/chain"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/control"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/mutation/mutationtest"
	"github.com/catena-kv/catena/internal/wire"
)

// cutTailFromMaster is a fault script: the tail stays reachable by clients
// and its predecessor but not by the master, so it is removed while alive.
func cutTailFromMaster(c *Cluster) {
	c.At(c.Now()+300*wire.Millisecond, func() {
		c.Partition(c.Config().Tail(), c.Master(), "false suspicion of the tail", 2*wire.Second)
	})
}

// isolateMasterLeaderWithTail is a fault script: the master's leader and
// the chain's tail keep talking to each other and to clients, but neither
// reaches the other master members. A new leader is elected and removes
// the tail; the old leader must stop renewing the tail's lease first.
func isolateMasterLeaderWithTail(c *Cluster) {
	c.At(c.Now()+500*wire.Millisecond, func() {
		leader, tail := c.Leader(), c.Config().Tail()
		for _, m := range c.masters {
			if m != leader {
				c.Partition(leader, m, "isolate the master leader", 2*wire.Second)
				c.Partition(tail, m, "isolate the tail with it", 2*wire.Second)
			}
		}
	})
}

// deafMiddle is a fault script: the middle server hears nothing, neither
// the masters nor its chain neighbours, for 3 s, while they all hear it
// (a one-way fault, as catena torture injects). The scenario tests
// (TestMiddleServerThatHearsNothingIsRemoved) show the master removing
// it; this runs the fault under the random clients and every check.
func deafMiddle(c *Cluster) {
	c.At(c.Now()+300*wire.Millisecond, func() {
		cfg := c.Config()
		deaf := cfg.Chain[1]
		for _, from := range append([]wire.NodeID{cfg.Head(), cfg.Tail()}, c.masters...) {
			c.LoseMessages(from, deaf, "the middle server hears nothing", 3*wire.Second)
		}
	})
}

// headReachesNoServer is a fault script: for 3 s the head's messages
// reach no other server, while it hears them and the masters hear it (a
// one-way fault between chain neighbours). The master cuts its
// successor and then the head (master/links.go), or with k = 1, where
// the head answers alone, its successors only. The scenario tests
// (TestHeadThatReachesNoServerIsCut) show the cuts; this runs the fault
// under the random clients and every check.
func headReachesNoServer(c *Cluster) {
	c.At(c.Now()+300*wire.Millisecond, func() {
		head := c.Config().Head()
		for _, s := range c.servers {
			if s != head {
				c.loseChainLink(head, s, "the head reaches no server", 3*wire.Second)
			}
		}
	})
}

// cutClientFromServers is a fault script: a client loses every link to
// the servers for longer than it waits for an answer, so the updates it
// had in flight end with unknown outcomes (some applied, some not).
func cutClientFromServers(c *Cluster) {
	c.At(c.Now()+300*wire.Millisecond, func() {
		for _, s := range c.servers {
			c.Partition(c.clients[1].id, s, "cut a client off", 3*wire.Second)
		}
	})
}

// instantCommits is the default network with commits that take no time
// (ADR 17's disk model): the seeds of the client core's and the control
// protocol's mutations were found without a disk model, and a commit's
// delay on every server's messages changes which races a seed meets.
func instantCommits() NetworkModel {
	n := DefaultOptions.Network
	n.CommitTimeMin, n.CommitTimeMax = 0, 0
	return n
}

// The checkers must catch deliberately broken protocols: each mutation
// makes some run of its scenario fail, with the kind of failure expected.
func TestCheckersCatchMutations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutation chain.Mutations
		master   master.Mutations
		client   clientcore.Mutations
		// skipWait is the client core's ablation that writes without
		// waiting for dependencies: no mutation, so it runs in every
		// build.
		skipWait bool
		masters  int
		script   func(*Cluster)
		seeds    int
		craq     bool
		scans    bool
		backups  bool
		splits   bool
		watches  bool
		// expiry runs keys that expire with the first server's clock
		// skewed this far (Options.Expiry, ClockSkewed).
		expiry wire.Time
		causal bool
		k      int
		sites  int
		hier   bool
		from   uint64 // the seeds run are from+1 … from+seeds
		want   string // a regular expression the failure matches
	}{
		{
			name:     "head answers before the tail processed the update",
			mutation: chain.Mutations{HeadRepliesEarly: true},
			seeds:    3, want: "linearizable",
		},
		{
			name:     "pipelined tail answers before every member has the update on disk",
			mutation: chain.Mutations{TailAnswersBeforeDurable: true},
			seeds:    2, want: "INVARIANT durable answer",
		},
		{
			name:     "predecessor does not resend Sent to a new successor",
			mutation: chain.Mutations{SkipResendOnSync: true},
			// The successor then stalls its predecessor for good, which
			// the master cuts (master/links.go): in many runs that
			// repairs the chain; since a removed replica keeps its data
			// for a catch-up, few seeds fail, so it gets 40.
			seeds: 40, want: "liveness",
		},
		{
			name:     "a scan page leaves out the last key it examined",
			mutation: chain.Mutations{ScanSkipsLastKey: true},
			scans:    true,
			seeds:    2, want: "scan by .* missed",
		},
		{
			name:     "a server decides expiry by a clock beyond the bound",
			mutation: chain.Mutations{ExpiryTrustsClock: true},
			expiry:   250 * wire.Millisecond, craq: true,
			seeds: 6, want: "expiry: .*(before its deadline|outside)",
		},
		{
			name:     "removed tail keeps serving without a lease",
			mutation: chain.Mutations{IgnoreLease: true},
			script:   cutTailFromMaster,
			seeds:    3, want: "not linearizable",
		},
		{
			name:    "deposed master leader keeps granting leases",
			master:  master.Mutations{GrantWithoutQuorum: true},
			masters: 3,
			script:  isolateMasterLeaderWithTail,
			seeds:   4, want: "not linearizable",
		},
		{
			name:     "joiner made tail while the old tail keeps applying",
			mutation: chain.Mutations{NoHandoffPause: true},
			seeds:    8, want: "INVARIANT inprocess requests|not linearizable|lost update",
		},
		{
			// A head that failed with updates it never forwarded comes
			// back; the tail lets it catch up on top of them. (Rarer
			// since heads forward before their commit, ADR 17: of seeds
			// 1–99, 3, 79 and 99 catch it.)
			name:     "tail lets a server with a diverged history catch up",
			mutation: chain.Mutations{CatchUpAnyHistory: true},
			from:     2, seeds: 1, want: "caught up .* not a prefix",
		},
		{
			name:     "a member answers reads of dirty keys (CRAQ without the tail)",
			mutation: chain.Mutations{AnswerDirtyReads: true},
			craq:     true,
			seeds:    5, want: "not linearizable",
		},
		{
			name:   "client core retries an update under a fresh request number",
			client: clientcore.Mutations{FreshRequestNumberOnRetry: true},
			seeds:  5, want: "not linearizable",
		},
		{
			name:     "causal: the member before the k-th answers updates",
			mutation: chain.Mutations{CausalRepliesEarly: true},
			causal:   true, k: 3,
			seeds: 2, want: "INVARIANT I5",
		},
		{
			name:     "causal: the k-th member calls updates stable",
			mutation: chain.Mutations{CausalStableEarly: true},
			causal:   true, k: 2,
			seeds: 2, want: "INVARIANT I4",
		},
		{
			name:     "causal: the k-th member sends the writer its update's stable notice at once (one site, k = 1: the head's)",
			mutation: chain.Mutations{CausalNoticeEarly: true},
			causal:   true, k: 1,
			seeds: 2, want: "INVARIANT I4",
		},
		{
			name:     "geo: the k-th member sends the writer its update's stable notice at once",
			mutation: chain.Mutations{CausalNoticeEarly: true},
			sites:    2,
			seeds:    2, want: "INVARIANT I4",
		},
		{
			name:     "causal: client core writes without waiting for its dependencies",
			skipWait: true,
			causal:   true, k: 1,
			seeds: 3, want: "INVARIANT I2",
		},
		{
			name:   "causal: client core reads beyond its allowed positions without its version",
			client: clientcore.Mutations{CausalReadsAnywhere: true},
			causal: true, k: 1,
			seeds: 6, want: "not causal\\+",
		},
		{
			// (A reader must meet a member the head's acknowledgement has
			// not reached yet: of seeds 1–23, 12, 17 and 23 catch it.)
			name:     "causal: the tail answers dependency waits before every member knows the version committed",
			mutation: chain.Mutations{CausalStableAtTail: true},
			client:   clientcore.Mutations{CausalStableAtTail: true},
			causal:   true, k: 3,
			from: 11, seeds: 1, want: "not causal\\+",
		},
		{
			name:   "causal: client core reads without its floor",
			client: clientcore.Mutations{CausalNoFloor: true},
			causal: true, k: 3,
			seeds: 6, want: "not causal\\+",
		},
		{
			name:     "causal: members answer reads as of their committed SN only",
			mutation: chain.Mutations{CausalReadsOwnCommitted: true},
			causal:   true, k: 3,
			seeds: 6, want: "not causal\\+",
		},
		{
			name:     "geo: a head applies other sites' updates before their dependencies are stable",
			mutation: chain.Mutations{GeoSkipDependencies: true},
			sites:    2,
			seeds:    4, want: "INVARIANT G1|not causal\\+",
		},
		{
			name:     "geo: a head takes any earlier update of its own volume and origin as a met dependency, not only its own key's",
			mutation: chain.Mutations{GeoVolumeOrderOnly: true},
			sites:    2,
			seeds:    4, want: "INVARIANT G1|not causal\\+",
		},
		{
			name:     "geo: other sites' updates overwrite whatever their stamps (no last writer wins)",
			mutation: chain.Mutations{GeoOverwrite: true},
			sites:    2,
			seeds:    4, want: "convergence across sites",
		},
		{
			name:     "geo: a head discards another site's update that loses, without counting it",
			mutation: chain.Mutations{GeoDropLosers: true},
			sites:    2,
			seeds:    4, want: "INVARIANT origin order|convergence across sites|liveness",
		},
		{
			name:     "geo: last writer wins by the heads' clocks alone, under skew between sites",
			mutation: chain.Mutations{GeoPhysicalTime: true},
			sites:    2,
			seeds:    4, want: "convergence across sites|not causal\\+",
		},
		{
			name:     "geo: a tail answers a write's wait for other sites before they hold it",
			mutation: chain.Mutations{GeoShippedEarly: true},
			sites:    2,
			seeds:    4, want: "INVARIANT G2",
		},
		{
			name:     "hierarchical: a site votes for two primaries of one key",
			mutation: chain.Mutations{Control: control.Mutations{VoteForTwo: true}},
			sites:    3, hier: true,
			seeds: 8, want: "INVARIANT (control|election)|not linearizable",
		},
		{
			// (A late abort must meet a newer ballot's vote: of seeds
			// 1–200, 17 and 199 catch it since a predecessor resends
			// after a reset its successor may not have seen, ADR 3; 4
			// and 72 of 1–120 did before.)
			name:     "hierarchical: an abort or release drops a newer ballot's vote",
			mutation: chain.Mutations{Control: control.Mutations{AbortIgnoresBallot: true}},
			sites:    3, hier: true,
			from: 16, seeds: 1, want: "INVARIANT election|not linearizable",
		},
		{
			name:     "hierarchical: deep control granted over a descendant another site controls",
			mutation: chain.Mutations{Control: control.Mutations{DeepOverControlledDescendant: true}},
			sites:    3, hier: true,
			seeds: 8, want: "INVARIANT (control|election)|not linearizable",
		},
		{
			name:     "an export's pages read the volume as it is, not the state its first page froze",
			mutation: chain.Mutations{ExportUnfrozen: true},
			backups:  true,
			seeds:    3, want: "pages of one export of volume .* hold the states after SN",
		},
		{
			name:     "a volume split goes on answering for the keys that moved to its sibling",
			mutation: chain.Mutations{SplitKeepsServing: true},
			splits:   true,
			seeds:    8, want: "not linearizable",
		},
		{
			name:     "a member answers a watch with updates it applied, before the chain committed them",
			mutation: chain.Mutations{WatchDeliversUncommitted: true},
			watches:  true,
			seeds:    20, want: "watch: watcher",
		},
		{
			name:     "a member answers a watch from one revision after the one asked for",
			mutation: chain.Mutations{WatchResumesLate: true},
			watches:  true,
			seeds:    3, want: "watch: watcher",
		},
		{
			name:   "client core sends strong reads to the head",
			client: clientcore.Mutations{StrongReadsAtHead: true},
			seeds:  3, want: "liveness",
		},
		{
			name:   "client core reports an ambiguous update as not applied",
			client: clientcore.Mutations{AmbiguousAsUnavailable: true},
			script: cutClientFromServers,
			seeds:  8, want: "not linearizable",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.skipWait {
				mutationtest.Require(t)
			}
			var errs []string
			for seed := tc.from + 1; seed <= tc.from+uint64(tc.seeds); seed++ {
				r := Run(Options{Seed: seed, Faults: tc.script == nil, Script: tc.script, Mutations: tc.mutation, MasterMutations: tc.master, ClientMutations: tc.client, SkipDependencyWait: tc.skipWait, Masters: tc.masters, CRAQReads: tc.craq, Scans: tc.scans, Backups: tc.backups, Splits: tc.splits, Watches: tc.watches,
					Expiry: tc.expiry != 0, ClockSkewed: tc.expiry,
					Causal: tc.causal, K: tc.k, Sites: tc.sites, Hierarchical: tc.hier})
				if r.Err != nil {
					errs = append(errs, r.Err.Error())
					if regexp.MustCompile(tc.want).MatchString(r.Err.Error()) {
						return
					}
				}
			}
			t.Fatalf("no run of seeds %d–%d failed with %q; failures: %q", tc.from+1, tc.from+uint64(tc.seeds), tc.want, errs)
		})
	}
}

// The same fault scripts pass with the real protocol and client core.
func TestFaultScriptsPass(t *testing.T) {
	unknown := 0
	for seed := uint64(1); seed <= 3; seed++ {
		r := Run(Options{Seed: seed, Script: cutClientFromServers})
		if r.Err != nil {
			t.Fatalf("cut a client from the servers, seed %d: %v", seed, r.Err)
		}
		unknown += r.Unknown
		if r := Run(Options{Seed: seed, Script: cutTailFromMaster}); r.Err != nil {
			t.Fatalf("cut tail from master, seed %d: %v", seed, r.Err)
		}
		if r := Run(Options{Seed: seed, Script: isolateMasterLeaderWithTail, Masters: 3}); r.Err != nil {
			t.Fatalf("isolate master leader with tail, seed %d: %v", seed, r.Err)
		}
		for _, masters := range []int{1, 3} {
			if r := Run(Options{Seed: seed, Script: deafMiddle, Masters: masters}); r.Err != nil {
				t.Fatalf("deaf middle server, %d masters, seed %d: %v", masters, seed, r.Err)
			}
			if r := Run(Options{Seed: seed, Script: headReachesNoServer, Masters: masters}); r.Err != nil {
				t.Fatalf("head reaches no server, %d masters, seed %d: %v", masters, seed, r.Err)
			}
		}
		for _, k := range []int{1, 2} {
			if r := Run(Options{Seed: seed, Script: headReachesNoServer, Causal: true, K: k}); r.Err != nil {
				t.Fatalf("head reaches no server, causal k = %d, seed %d: %v", k, seed, r.Err)
			}
		}
	}
	if unknown == 0 {
		t.Fatal("cutting a client from the servers left no outcome unknown: the script tests nothing")
	}
}

// Same seed, same run; another seed, another run. With a replicated
// master too: its elections are driven by the simulator's seeded timers.
func TestDeterminism(t *testing.T) {
	for _, masters := range []int{1, 3} {
		a := Run(Options{Seed: 7, Faults: true, Masters: masters})
		b := Run(Options{Seed: 7, Faults: true, Masters: masters})
		if a.Err != nil || b.Err != nil {
			t.Fatalf("masters=%d: seed 7 failed: %v / %v", masters, a.Err, b.Err)
		}
		if a.Trace != b.Trace || a.Operations != b.Operations || strings.Join(a.Faults, ";") != strings.Join(b.Faults, ";") {
			t.Fatalf("masters=%d: two runs of seed 7 differ: trace %x/%x, %d/%d operations, faults %q / %q",
				masters, a.Trace, b.Trace, a.Operations, b.Operations, a.Faults, b.Faults)
		}
		if c := Run(Options{Seed: 8, Faults: true, Masters: masters}); c.Trace == a.Trace {
			t.Fatalf("masters=%d: seeds 7 and 8 produced the same trace %x", masters, a.Trace)
		}
	}
}

// A short many-seed run with faults, as `catena sim --faults` does; the
// 300-seed run is part of .ci/run.
func TestRandomFaults(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for _, masters := range []int{1, 3} {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			if r := Run(Options{Seed: seed, Faults: true, Masters: masters}); r.Err != nil {
				t.Errorf("seed %d: %v\nfaults: %q\nreplay: go run ./cmd/catena sim -seed %d -faults -masters %d", seed, r.Err, r.Faults, seed, masters)
			}
		}
	}
	// CRAQ reads: queries at random members, dirty keys at the tail.
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		if r := Run(Options{Seed: seed, Faults: true, CRAQReads: true}); r.Err != nil {
			t.Errorf("seed %d: %v\nfaults: %q\nreplay: go run ./cmd/catena sim -seed %d -faults -craq-reads", seed, r.Err, r.Faults, seed)
		}
	}
}

// Seeds that once found bugs, each replayed with the options it failed
// with (the fixing commit names the seed).
func TestRegressionSeeds(t *testing.T) {
	for _, tc := range []struct {
		seed             uint64
		masters          int
		bug              string
		servers, volumes int
		loops            int
		scans            bool
	}{
		{2359, 1, "checker counted a joiner that had not adopted its joining configuration", 0, 0, 0, false},
		{283, 1, "restored replica left its wedged state on a configuration that still counted it", 0, 0, 0, false},
		{237, 3, "server restarted before the master registered it took the epoch-1 chain empty", 0, 0, 0, false},
		{14, 3, "survivor chosen after a total outage held no data", 0, 0, 0, false},
		{34, 3, "joiner promoted while down did not know it held a whole snapshot", 0, 0, 0, false},
		{1063, 3, "every server crashed before adopting the volume; its last member restarted empty and could never rejoin", 0, 0, 0, false},
		{518, 3, "a server removed by a rebalancing shrink took a deposed leader's stale epoch-1 configuration empty and answered reads", 8, 64, 0, false},
		{288, 1, "the fault injector cut a chain's last live member from the master while the other had crashed without durable storage: a data loss beyond the fault model", 0, 0, 0, false},
		{93, 1, "a predecessor redialed its restarted successor and waited for a SyncRequest the successor, seeing no break, never sent; with a joiner present no stall cut ended it", 0, 8, 3, true},
	} {
		if r := Run(Options{Seed: tc.seed, Faults: true, Masters: tc.masters, Servers: tc.servers, Volumes: tc.volumes, Loops: tc.loops, Scans: tc.scans}); r.Err != nil {
			t.Errorf("seed %d (masters %d; was: %s): %v", tc.seed, tc.masters, tc.bug, r.Err)
		}
	}
}

// A few runs of several sites without faults, as `catena sim -sites N`
// does; the many-seed runs with faults are part of .ci/run.
func TestSites(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		sites int
	}{{1, 2}, {2, 3}, {3, 2}} {
		r := Run(Options{Seed: tc.seed, Sites: tc.sites})
		if r.Err != nil {
			t.Errorf("seed %d, %d sites: %v\nreplay: go run ./cmd/catena sim -seed %d -sites %d", tc.seed, tc.sites, r.Err, tc.seed, tc.sites)
		}
		if r.Operations == 0 {
			t.Errorf("seed %d, %d sites: no operation checked", tc.seed, tc.sites)
		}
	}
}

// GET-TRANSACTION returning its first round of reads unchecked is caught
// by the causal+ checker over the transactions' values (the snapshot
// property), with several sites or one. In one site, where members
// answer as of their committed SN and a dependency is committed at every
// member before the write that depends on it (ADR 23), the first round
// goes wrong only if one read is answered before a commit and another
// long after it: without faults none of 300 seeds does, with faults 3 of
// the first 39. With two sites the first seed that catches it moved from
// 21 to 74 when clients began to keep a second nearest dependency per
// volume and origin (clientcore/geo.go): remote versions became visible
// later relative to each other.
func TestTransactionWithoutSecondRoundCaught(t *testing.T) {
	mutationtest.Require(t)
	for _, tc := range []struct {
		sites  int
		first  uint64
		faults bool
	}{{1, 5, true}, {2, 74, false}} {
		sites, first, faults := tc.sites, tc.first, tc.faults
		caught := false
		var errs []string
		// The first seed caught it when this was written; the loop
		// searches on if the simulator's choices change.
		for seed := first; seed <= first+30 && !caught; seed++ {
			// Writes durable at several sites wait a WAN round trip,
			// and the seeds that once caught it no longer race so.
			o := Options{Seed: seed, Causal: true, Sites: sites, Clients: 6, Keys: 4, Volumes: 2, NoWritesForSites: true,
				Network: instantCommits(), ClientMutations: clientcore.Mutations{TxnOneRound: true}}
			if faults {
				o = Options{Seed: seed, Causal: true, Sites: sites, Clients: 6, Keys: 4, Volumes: 2, Faults: true,
					ClientMutations: clientcore.Mutations{TxnOneRound: true}}
			}
			r := Run(o)
			if r.Err != nil {
				errs = append(errs, r.Err.Error())
				caught = strings.Contains(r.Err.Error(), "not causal+")
			}
		}
		if !caught {
			t.Errorf("%d sites: no run caught a one-round GET-TRANSACTION; failures: %q", sites, errs)
		}
	}
}

// Seeds of several sites that once found bugs, each replayed with the
// options it failed with.
func TestGeoRegressionSeeds(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		sites int
		bug   string
	}{
		{46, 3, "a shipper kept sending to a receiving head that had left its chain"},
		{15, 3, "the fault guard did not protect an update sequenced for another site that a client had read"},
		{162, 3, "the fault guard cut both of a chain's first k = 2 members off from the master"},
		{187, 3, "the fault guard cut the first k members off from the master (the same as 162)"},
		{402, 3, "G2 counted a site whose servers had all crashed, with durable storage, as not holding what they had committed"},
	} {
		if r := Run(Options{Seed: tc.seed, Faults: true, Sites: tc.sites}); r.Err != nil {
			t.Errorf("seed %d, %d sites (was: %s): %v\nreplay: go run ./cmd/catena sim -seed %d -faults -sites %d", tc.seed, tc.sites, tc.bug, r.Err, tc.seed, tc.sites)
		}
	}
}

// A server whose clock is beyond the bound is kept from deciding expiry
// by the heartbeat's check: the runs the mutation above fails pass.
func TestSkewedClockKeepsTheExpiryRule(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		r := Run(Options{Seed: seed, Faults: true, Expiry: true, ClockSkewed: 250 * wire.Millisecond, CRAQReads: true})
		if r.Err != nil {
			t.Fatalf("seed %d with the second server's clock 250 ms ahead: %v", seed, r.Err)
		}
		if r.ExpiryReads == 0 {
			t.Fatalf("seed %d read no key that expires", seed)
		}
	}
}
