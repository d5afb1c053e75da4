package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

func servers(n int) []wire.NodeID {
	out := make([]wire.NodeID, n)
	for i := range out {
		out[i] = wire.NodeID(fmt.Sprintf("s%02d", i))
	}
	return out
}

// Every strategy: t distinct servers per chain, every volume placed.
func TestInitialChainsAreDistinct(t *testing.T) {
	for _, s := range Strategies {
		for _, tc := range []struct{ n, volumes, t int }{{3, 1, 3}, {6, 64, 3}, {8, 100, 2}, {4, 64, 4}, {24, 5000, 3}} {
			chains, err := Initial(s, servers(tc.n), tc.volumes, tc.t, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatalf("%s %+v: %v", s, tc, err)
			}
			if len(chains) != tc.volumes {
				t.Fatalf("%s %+v: %d chains", s, tc, len(chains))
			}
			for v, c := range chains {
				sorted := slices.Clone(c)
				slices.Sort(sorted)
				if len(c) != tc.t || len(slices.Compact(sorted)) != tc.t {
					t.Fatalf("%s %+v: volume %d has chain %v", s, tc, v, c)
				}
			}
		}
	}
}

func load(chains map[wire.VolumeID][]wire.NodeID) (members, heads map[wire.NodeID]int) {
	members, heads = map[wire.NodeID]int{}, map[wire.NodeID]int{}
	for _, c := range chains {
		for _, id := range c {
			members[id]++
		}
		heads[c[0]]++
	}
	return members, heads
}

// random and random-seq: every server holds the same number of replicas,
// within one.
func TestRandomIsBalanced(t *testing.T) {
	for _, s := range []Strategy{Random, RandomSeq} {
		chains, _ := Initial(s, servers(7), 64, 3, rand.New(rand.NewPCG(3, 4)))
		members, _ := load(chains)
		lo, hi := 1<<30, 0
		for _, n := range members {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo > 1 || len(members) != 7 {
			t.Fatalf("%s: replica counts %v, want within 1 of each other", s, members)
		}
	}
}

// ring: a volume's replicas are consecutive servers on the ring.
func TestRingIsConsecutive(t *testing.T) {
	ring := servers(10)
	chains, _ := Initial(Ring, ring, 200, 3, nil)
	for v, c := range chains {
		start := slices.Index(ring, c[0])
		for i, id := range c {
			if ring[(start+i)%len(ring)] != id {
				t.Fatalf("volume %d: chain %v is not consecutive on the ring", v, c)
			}
		}
	}
}

// bidirectional over one group: the two end servers each head half of the
// volumes; rotated: every server heads 1/t of them.
func TestBidirectionalAndRotatedHeads(t *testing.T) {
	chains, _ := Initial(Bidirectional, servers(4), 64, 4, nil)
	_, heads := load(chains)
	if heads["s00"] != 32 || heads["s03"] != 32 {
		t.Fatalf("bidirectional heads %v, want s00 and s03 with 32 each", heads)
	}
	chains, _ = Initial(Rotated, servers(4), 64, 4, nil)
	_, heads = load(chains)
	for _, id := range servers(4) {
		if heads[id] != 16 {
			t.Fatalf("rotated heads %v, want 16 each", heads)
		}
	}
}

func TestVolumeOfSpreadsKeys(t *testing.T) {
	counts := make([]int, 16)
	for i := range 16000 {
		counts[VolumeOf(fmt.Sprintf("key-%d", i), 16)]++
	}
	for v, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("volume %d got %d of 16000 keys", v, n)
		}
	}
}

func TestParseRejectsUnknown(t *testing.T) {
	if _, err := Parse("nope"); err == nil {
		t.Fatal("Parse accepted an unknown strategy")
	}
	for _, s := range Strategies {
		if got, err := Parse(string(s)); err != nil || got != s {
			t.Errorf("Parse(%q) = %q, %v", s, got, err)
		}
	}
}

// initialRandomBySorting is random placement as first written: each
// volume stably sorts the shuffled servers by load and takes the first t.
// Initial computes the same without sorting; random placement must not
// change (the master's chains, the simulator's seeds and every experiment
// depend on it).
func initialRandomBySorting(servers []wire.NodeID, volumes, t int, rng *rand.Rand) map[wire.VolumeID][]wire.NodeID {
	chains := map[wire.VolumeID][]wire.NodeID{}
	load := map[wire.NodeID]int{}
	for v := range volumes {
		order := slices.Clone(servers)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		slices.SortStableFunc(order, func(a, b wire.NodeID) int { return load[a] - load[b] })
		chain := slices.Clone(order[:t])
		rng.Shuffle(t, func(i, j int) { chain[i], chain[j] = chain[j], chain[i] })
		for _, id := range chain {
			load[id]++
		}
		chains[wire.VolumeID(v)] = chain
	}
	return chains
}

func TestInitialRandomIsTheSortingPlacement(t *testing.T) {
	for _, tc := range []struct{ n, volumes, t int }{{3, 1, 3}, {8, 64, 3}, {7, 100, 2}, {24, 5000, 3}, {50, 1250, 4}, {10, 333, 1}} {
		for seed := range uint64(3) {
			sorting, rng := rand.New(rand.NewPCG(seed, 9)), rand.New(rand.NewPCG(seed, 9))
			want := initialRandomBySorting(servers(tc.n), tc.volumes, tc.t, sorting)
			got, err := Initial(Random, servers(tc.n), tc.volumes, tc.t, rng)
			if err != nil {
				t.Fatal(err)
			}
			for v := range tc.volumes {
				if !slices.Equal(got[wire.VolumeID(v)], want[wire.VolumeID(v)]) {
					t.Fatalf("%+v seed %d: volume %d on %v, sorting places it on %v", tc, seed, v, got[wire.VolumeID(v)], want[wire.VolumeID(v)])
				}
			}
			if rng.Uint64() != sorting.Uint64() {
				t.Fatalf("%+v seed %d: Initial drew a different number of random values", tc, seed)
			}
		}
	}
}

// A hierarchical keyspace hashes a key by its path's first d segments:
// every key under a prefix of d or more segments shares a volume.
func TestPartitionDepthKeepsAPrefixInOneVolume(t *testing.T) {
	for _, tc := range []struct {
		path string
		d    int
		want string
	}{
		{"ssh/src/a.c", 1, "ssh/"},
		{"ssh/src/a.c", 2, "ssh/src/"},
		{"ssh/src/a.c", 3, "ssh/src/a.c"},
		{"README", 1, "README"},
		{"ssh/", 1, "ssh/"},
	} {
		if got := PartitionKey(tc.path, tc.d); got != tc.want {
			t.Errorf("PartitionKey(%q, %d) = %q, want %q", tc.path, tc.d, got, tc.want)
		}
	}
	ks := wire.Keyspace{Prefix: "b/", Mode: wire.ModeHierarchical, FirstVolume: 10, Volumes: 64, PartitionDepth: 1}
	v := VolumeIn(ks, "b/ssh/README")
	spread := map[wire.VolumeID]bool{}
	for _, key := range []string{"b/ssh/src/a.c", "b/ssh/src/b/c.h", "b/ssh/x"} {
		if got := VolumeIn(ks, key); got != v {
			t.Errorf("%s in volume %d, b/ssh/README in %d", key, got, v)
		}
	}
	for i := range 64 {
		spread[VolumeIn(ks, fmt.Sprintf("b/tree%d/f", i))] = true
	}
	if len(spread) < 16 {
		t.Errorf("64 subtrees over only %d of 64 volumes", len(spread))
	}
}
