package torture

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// A run's splits are drawn from its seed, one per splitSpacing of the
// phase at most (and splitsMax), in order, between a tenth and three
// quarters of the phase; some follow the last one at once.
func TestSplitPlan(t *testing.T) {
	for _, d := range []time.Duration{10 * time.Second, time.Minute, 2 * time.Minute, 30 * time.Minute} {
		most := min(splitsMax, 1+int(d/splitSpacing))
		counts := map[int]bool{}
		atOnce := false
		for seed := uint64(1); seed <= 200; seed++ {
			plan := splitPlan(seed, d)
			if !slices.Equal(plan, splitPlan(seed, d)) {
				t.Fatalf("seed %d, %s: two plans differ", seed, d)
			}
			if len(plan) < 1 || len(plan) > most {
				t.Fatalf("seed %d, %s: %d splits, want 1 to %d", seed, d, len(plan), most)
			}
			counts[len(plan)] = true
			atOnce = atOnce || len(slices.Compact(slices.Clone(plan))) < len(plan)
			for i, at := range plan {
				if at < d/10 || at > 3*d/4 || i > 0 && at < plan[i-1] {
					t.Fatalf("seed %d, %s: plan %v out of order or out of [%s, %s]", seed, d, plan, d/10, 3*d/4)
				}
			}
		}
		if len(counts) != most {
			t.Errorf("%s: split counts drawn %v, want each of 1 to %d", d, counts, most)
		}
		if atOnce != (most > 1) {
			t.Errorf("%s: a split right after the last drawn: %v, want %v", d, atOnce, most > 1)
		}
	}
}

// keysIn returns n keys that keyspace k routes to volume v.
func keysIn(k client.Keyspace, v uint32, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if key := fmt.Sprintf("r%d.0", i); routeIn(k, key) == v {
			out = append(out, key)
		}
	}
	return out
}

// The placement check finds a key left in the volume it moved from, a
// key in two volumes, a key the final read found that no volume holds,
// and a value other than the final read's.
func TestCheckSplitPlacement(t *testing.T) {
	k := client.Keyspace{Name: wire.DefaultKeyspace, Volumes: 2}.VolumeList()
	ks := client.Keyspace{Name: wire.DefaultKeyspace, Volumes: 4, Splits: 1, VolumeIDs: append(k, 7, 8)}
	obj := func(key, value string) client.ExportedObject {
		return client.ExportedObject{Key: key, Value: []byte(value)}
	}
	in7, in8, in0 := keysIn(ks, 7, 3), keysIn(ks, 8, 1), keysIn(ks, 0, 1)
	good := map[uint32][]client.ExportedObject{0: {obj(in0[0], "a")}, 1: nil, 7: {obj(in7[0], "b"), obj(in7[1], "c")}, 8: {obj(in8[0], "d")}}
	final := map[string]finalValue{in0[0]: {true, []byte("a")}, in7[0]: {true, []byte("b")}, in7[1]: {true, []byte("c")}, in8[0]: {true, []byte("d")}, in7[2]: {}}
	if problems, keys := checkSplitPlacement(ks, good, final); len(problems) > 0 || keys != 5 {
		t.Fatalf("good contents: %d keys, problems %v", keys, problems)
	}
	for _, c := range []struct {
		name string
		vol  uint32
		obj  client.ExportedObject
		want string
	}{
		// in7[2] hashes to index 2 of 4 (volume 7): index 0 of 2 before.
		{"left behind", 0, obj(in7[2], "e"), fmt.Sprintf("%s is in volume 0, the final map routes it to volume 7", in7[2])},
		{"in two volumes", 0, obj(in7[0], "b"), fmt.Sprintf("%s is in volumes 0 and 7", in7[0])},
	} {
		bad := map[uint32][]client.ExportedObject{}
		for v, objs := range good {
			bad[v] = slices.Clone(objs)
		}
		bad[c.vol] = append(bad[c.vol], c.obj)
		problems, _ := checkSplitPlacement(ks, bad, final)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("%s: problems %v, want one saying %q", c.name, problems, c.want)
		}
	}
	lost := map[uint32][]client.ExportedObject{0: good[0], 7: good[7][:1], 8: good[8]}
	if problems, _ := checkSplitPlacement(ks, lost, final); len(problems) != 1 || !strings.Contains(problems[0], "no volume holds it (volume 7 should)") {
		t.Errorf("a key missing: problems %v", problems)
	}
	changed := map[uint32][]client.ExportedObject{0: good[0], 7: {obj(in7[0], "b"), obj(in7[1], "x")}, 8: good[8]}
	if problems, _ := checkSplitPlacement(ks, changed, final); len(problems) != 1 || !strings.Contains(problems[0], `the final read found "c", volume 7 holds "x"`) {
		t.Errorf("another value: problems %v", problems)
	}
}

// A key counts as moved across a split when the split moved it and its
// operations began before the split applied and ended after it finished.
func TestMovedAcross(t *testing.T) {
	ks := client.Keyspace{Name: wire.DefaultKeyspace, Volumes: 2}
	split := ks
	split.Volumes = 4
	moves := keysIn(split, 2, 2)
	stays := keysIn(split, 0, 1)
	rec := splitRecord{n: 1, from: 2, to: 4, applied: 100, finished: 200}
	op := func(key string, call, ret int64) Record {
		return Record{Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: call, Return: ret}
	}
	history := []Record{
		op(moves[0], 50, 60), op(moves[0], 250, 260), // across
		op(moves[1], 150, 160), op(moves[1], 250, 260), // only after
		op(stays[0], 50, 60), op(stays[0], 250, 260), // stays
		{Client: finalClient, Op: wire.Op{Kind: wire.OpGet, Key: moves[1]}, Call: 10, Return: 300},
	}
	if n := movedAcross(history, []splitRecord{rec}); n != 1 {
		t.Errorf("movedAcross = %d, want 1", n)
	}
}

// Splits hold the operator turn from the first request until the last
// of them finished; a backup waits for it, and a split waits for a
// backup.
func TestSplitsHoldTheOperatorTurn(t *testing.T) {
	turn := newOperatorTurn()
	s := &splitter{turn: turn, log: &eventLog{file: io.Discard, out: io.Discard}}
	held := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if turn.take(ctx) {
			turn.give()
			return false
		}
		return true
	}
	ctx := context.Background()
	if !s.acquire(ctx, 1) || !s.acquire(ctx, 2) || !held() {
		t.Fatal("two splits asked for: the turn is not held")
	}
	s.release()
	if !held() {
		t.Fatal("one of two splits finished: the turn was given up")
	}
	s.release()
	if held() {
		t.Fatal("both splits finished: the turn is still held")
	}
	// A backup holds it: a split waits until its context ends.
	turn.take(ctx)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if s.acquire(short, 3) {
		t.Fatal("a split took the turn a backup held")
	}
	turn.give()
	if !s.acquire(ctx, 3) || !held() {
		t.Fatal("a split did not take the turn once the backup gave it up")
	}
}
