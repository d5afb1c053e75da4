package chain

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

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
				s.append(&u)
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
// few, the ring is small again and trimmed slots hold no values.
func TestSentListShrinks(t *testing.T) {
	s := newSentList()
	for sn := wire.SN(1); sn <= 100_000; sn++ {
		u := sentUpdate(sn, fmt.Sprint("k", sn%1000))
		s.append(&u)
	}
	if len(s.ring) < 100_000 {
		t.Fatalf("ring of %d slots for 100000 updates", len(s.ring))
	}
	s.trimThrough(99_990)
	if s.len() != 10 || len(s.ring) > 4*sentRingMin {
		t.Fatalf("after trimming to 10 updates: %d updates in a ring of %d", s.len(), len(s.ring))
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
	for i := range s.ring {
		if u := s.ring[i]; u.SN != 0 && u.SN <= 99_995 {
			t.Fatalf("trimmed update %d still in the ring", u.SN)
		}
	}
}

// Appending out of SN order breaks INVARIANT Sent: it panics rather than
// leave a gap.
func TestSentListAppendOutOfOrderPanics(t *testing.T) {
	s := newSentList()
	u := sentUpdate(5, "k")
	s.append(&u)
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "INVARIANT Sent contiguous") {
			t.Fatalf("append after a gap: recovered %q, want an INVARIANT panic", msg)
		}
	}()
	gap := sentUpdate(7, "k")
	s.append(&gap)
}
