package chain

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

func sentUpdate(sn wire.SN, key string) wire.Update {
	return wire.Update{SN: sn, Key: key, Changed: true, Value: []byte(fmt.Sprint(sn)), ReplyTo: "c", Result: wire.Result{SN: sn}}
}

// sentModel is Sent as a plain slice, scanned as the replica did before
// sentList: the reference the ring buffer and its index must agree with.
type sentModel []wire.Update

func (m sentModel) updatesAfter(key string, sn wire.SN) bool {
	for i := len(m) - 1; i >= 0 && m[i].SN > sn; i-- {
		if m[i].Key == key {
			return true
		}
	}
	return false
}

func (m sentModel) trimThrough(sn wire.SN) sentModel {
	i := 0
	for i < len(m) && m[i].SN <= sn {
		i++
	}
	return m[i:]
}

// The list agrees with the slice model under random appends, trims,
// lookups, copies and dirty checks, through many wrap-arounds, growths and
// shrinks of the ring.
func TestSentListMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSentList()
	var model sentModel
	next := wire.SN(1)
	longest := 0
	keys := []string{"a", "b", "c", "d", "e", "f", "g"}
	for step := range 10_000 {
		// Regimes of 1000 steps alternate: in one the list grows to a few
		// thousand updates, in the next trims empty it again.
		trimMax := 20
		if step/1000%2 == 1 {
			trimMax = 150
		}
		switch op := rng.IntN(10); {
		case op < 5: // append a burst
			for range rng.IntN(40) {
				u := sentUpdate(next, keys[rng.IntN(len(keys))])
				s.append(&u, nil)
				model = append(model, u)
				next++
			}
		case op < 8: // trim a prefix, sometimes past the end
			upTo := model.firstOr(next) + wire.SN(rng.IntN(trimMax)) - 1
			s.trimThrough(upTo)
			model = model.trimThrough(upTo)
		case op < 9 && len(model) > 0: // copy a range
			from := model[rng.IntN(len(model))].SN
			n := 1 + rng.IntN(50)
			got := s.copyFrom(from, n)
			i := int(from - model[0].SN)
			if want := model[i:min(len(model), i+n)]; !reflect.DeepEqual([]wire.Update(want), got) {
				t.Fatalf("step %d: copyFrom(%d, %d) = %d updates, want %d", step, from, n, len(got), len(want))
			}
		default: // the whole list, and the dirty check on every key
			if s.len() != len(model) {
				t.Fatalf("step %d: len %d, want %d", step, s.len(), len(model))
			}
			for _, u := range model {
				if got := s.at(u.SN); got.SN != u.SN || got.Key != u.Key || string(got.Value) != string(u.Value) {
					t.Fatalf("step %d: at(%d) = %+v, want %+v", step, u.SN, *got, u)
				}
			}
			if len(s.newest) != distinctKeys(model) {
				t.Fatalf("step %d: index holds %d keys, list %d", step, len(s.newest), distinctKeys(model))
			}
			for _, k := range keys {
				for _, after := range []wire.SN{0, model.firstOr(next) + wire.SN(len(model)/2), next} {
					if got, want := s.updatesAfter(k, after), model.updatesAfter(k, after); got != want {
						t.Fatalf("step %d: updatesAfter(%q, %d) = %v, want %v", step, k, after, got, want)
					}
				}
			}
		}
		if err := s.check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		longest = max(longest, len(model))
		wantFirst, wantLast := wire.SN(0), wire.SN(0)
		if len(model) > 0 {
			wantFirst, wantLast = model[0].SN, model[len(model)-1].SN
		}
		if s.firstSN() != wantFirst || s.lastSN() != wantLast {
			t.Fatalf("step %d: list [%d, %d], want [%d, %d]", step, s.firstSN(), s.lastSN(), wantFirst, wantLast)
		}
	}
	if longest < 1000 {
		t.Fatalf("the list grew to %d updates only; the test exercises too little", longest)
	}
}

func (m sentModel) firstOr(next wire.SN) wire.SN {
	if len(m) == 0 {
		return next
	}
	return m[0].SN
}

func distinctKeys(m sentModel) int {
	keys := map[string]bool{}
	for _, u := range m {
		keys[u.Key] = true
	}
	return len(keys)
}

// Memory follows the list: after 100 000 updates are trimmed down to a
// few, it keeps only the chunks they are in, and trimmed slots hold no
// values.
func TestSentListShrinks(t *testing.T) {
	s := newSentList()
	for sn := wire.SN(1); sn <= 100_000; sn++ {
		u := sentUpdate(sn, fmt.Sprint("k", sn%1000))
		s.append(&u, nil)
	}
	if len(s.chunks)*sentChunk < 100_000 {
		t.Fatalf("%d chunks for 100000 updates", len(s.chunks))
	}
	s.trimThrough(99_990)
	if s.len() != 10 || len(s.chunks) > 2 {
		t.Fatalf("after trimming to 10 updates: %d updates in %d chunks", s.len(), len(s.chunks))
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if len(s.newest) != 10 {
		t.Fatalf("index holds %d keys for 10 updates", len(s.newest))
	}
	for sn := wire.SN(99_991); sn <= 100_000; sn++ {
		if s.at(sn).SN != sn {
			t.Fatalf("at(%d) = SN %d after shrinking", sn, s.at(sn).SN)
		}
	}
	s.trimThrough(99_995)
	for _, chunk := range append(s.chunks, s.spare...) {
		for _, slot := range chunk {
			if u := slot.u; u.SN != 0 && u.SN <= 99_995 {
				t.Fatalf("trimmed update %d still in a chunk", u.SN)
			}
		}
	}
}

// Appending out of SN order breaks INVARIANT Sent: it panics rather than
// leave a gap.
func TestSentListAppendOutOfOrderPanics(t *testing.T) {
	s := newSentList()
	u := sentUpdate(5, "k")
	s.append(&u, nil)
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "INVARIANT Sent contiguous") {
			t.Fatalf("append after a gap: recovered %q, want an INVARIANT panic", msg)
		}
	}()
	gap := sentUpdate(7, "k")
	s.append(&gap, nil)
}

// A list that keeps versions knows every key's object as of any SN from
// the one before its first: checked against the whole history, over
// random updates (some failed compare-and-sets, some deletes), trims and
// the ring's growing and shrinking.
func TestSentListAsOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "d"}
	// history[key] lists the key's objects, each with the SN from which
	// it held; the store holds the newest.
	type version struct {
		from wire.SN
		obj  kv.Object
	}
	history := map[string][]version{}
	store := map[string]kv.Object{}
	objectAt := func(key string, sn wire.SN) kv.Object {
		var o kv.Object
		for _, v := range history[key] {
			if v.from <= sn {
				o = v.obj
			}
		}
		return o
	}
	s := newSentList()
	s.keepVersions(true)
	var sn, trimmed wire.SN
	for step := range 20_000 {
		if rng.IntN(3) > 0 || s.len() == 0 {
			sn++
			u := sentUpdate(sn, keys[rng.IntN(len(keys))])
			u.Changed = rng.IntN(5) > 0
			u.Deleted = rng.IntN(7) == 0
			var prior *kv.Object
			if !s.pending(u.Key) {
				o := store[u.Key]
				prior = &o
			}
			s.append(&u, prior)
			if u.Changed {
				store[u.Key] = updatedObject(&u)
				history[u.Key] = append(history[u.Key], version{sn, store[u.Key]})
			}
		} else {
			trimmed = min(sn, trimmed+wire.SN(rng.IntN(8)))
			s.trimThrough(trimmed)
		}
		for _, k := range keys {
			at := trimmed + wire.SN(rng.IntN(int(sn-trimmed)+1))
			got, found := s.asOf(k, at, store[k])
			if want := objectAt(k, at); !found || !bytes.Equal(got.Value, want.Value) || got.Exists != want.Exists {
				t.Fatalf("step %d: asOf(%s, %d) = %v (found %v), want %v (list [%d, %d])", step, k, at, got, found, want, s.firstSN(), s.lastSN())
			}
		}
	}
}

// A list refilled without the objects before its updates (the catch-up
// log's) says it does not know a key's object before them.
func TestSentListAsOfUnknownPrior(t *testing.T) {
	s := newSentList()
	s.keepVersions(true)
	for sn := wire.SN(1); sn <= 3; sn++ {
		u := sentUpdate(sn, "k")
		s.append(&u, nil)
	}
	if _, found := s.asOf("k", 0, kv.Object{}); found {
		t.Fatal("asOf before the list's first update to k, prior never given: found")
	}
	if o, found := s.asOf("k", 2, kv.Object{}); !found || string(o.Value) != string(s.at(2).Value) {
		t.Fatalf("asOf(k, 2) = %v, %v; want update 2's object", o, found)
	}
}
