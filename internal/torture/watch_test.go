package torture

import (
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// puts returns key's events: a put of each value, at revisions 10, 20, ...
func puts(key string, values ...string) []client.Event {
	var out []client.Event
	for i, v := range values {
		out = append(out, client.Event{Kind: client.EventPut, Key: key, Value: []byte(v), Revision: uint64(10 * (i + 1))})
	}
	return out
}

// The watch checker on small histories: each case gives the history,
// the events of its key, whether the key is exempt (a gap), and the
// finding expected ("": none).
func TestCheckWatch(t *testing.T) {
	register := []Record{
		rec(1, 10, put("r0.0", "a"), OK, acked),
		rec(2, 20, put("r0.0", "b"), Unknown, wire.Result{}),
		rec(1, 30, put("r0.0", "c"), OK, acked),
		rec(2, 40, cas("r0.0", "c", "d"), OK, acked),
		rec(1, 50, cas("r0.0", "x", "e"), OK, wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("d")}),
		rec(2, 60, put("r0.0", "f"), Failed, wire.Result{}),
		rec(finalClient, 70, get("r0.0"), OK, found("d")),
	}
	counter := []Record{
		rec(1, 10, incr("n0.0"), OK, found("1")),
		rec(2, 20, incr("n0.0"), Unknown, wire.Result{}),
		rec(1, 30, incr("n0.0"), OK, found("3")),
		rec(2, 40, incr("n0.0"), Failed, wire.Result{}),
	}
	set := []Record{
		rec(5, 10, appendOp("a0.0", "5.1"), OK, found("5.1 ")),
		rec(6, 20, appendOp("a0.0", "6.1"), Unknown, wire.Result{}),
		rec(5, 30, appendOp("a0.0", "5.2"), OK, found("5.1 6.1 5.2 ")),
		rec(6, 40, appendOp("a0.0", "6.2"), Failed, wire.Result{}),
	}
	reorder := func(events []client.Event, i, j int) []client.Event {
		out := slices.Clone(events)
		out[i].Value, out[j].Value = out[j].Value, out[i].Value
		return out
	}
	for _, tc := range []struct {
		name    string
		history []Record
		events  []client.Event
		exempt  bool
		want    string
	}{
		{"every acknowledged write, the unknown one too", register, puts("r0.0", "a", "b", "c", "d"), false, ""},
		{"every acknowledged write, not the unknown one", register, puts("r0.0", "a", "c", "d"), false, ""},
		{"an acknowledged write missing", register, puts("r0.0", "a", "d"), false, `r0.0: the put of "c" (client 1), acknowledged, between 30ms and 31ms was never delivered`},
		{"an acknowledged write missing, after a gap", register, puts("r0.0", "a", "d"), true, ""},
		{"a write delivered twice", register, puts("r0.0", "a", "c", "c", "d"), false, `r0.0: events 1 and 2 (revisions 20 and 30) both deliver the put of "c" (client 1), acknowledged, between 30ms and 31ms`},
		{"out of the order of the history", register, reorder(puts("r0.0", "a", "c", "d"), 0, 1), false,
			`r0.0: event 1 (revision 20) delivers the put of "a" (client 1), acknowledged, between 10ms and 11ms after the put of "c" (client 1), acknowledged, between 30ms and 31ms, called after it returned`},
		{"an unknown write after a later one: it may take effect at any time after its call", register, puts("r0.0", "a", "c", "b", "d"), false, ""},
		{"an unknown write before an earlier one", register, puts("r0.0", "b", "a", "c", "d"), false,
			`r0.0: event 1 (revision 20) delivers the put of "a" (client 1), acknowledged, between 10ms and 11ms after the put of "b" (client 2) called at 20ms, outcome unknown, called after it returned`},
		{"a value nobody wrote", register, puts("r0.0", "a", "z"), false, `r0.0: event 1 (revision 20) delivers "z", which no client wrote there`},
		{"a write reported unapplied", register, puts("r0.0", "a", "c", "d", "f"), false, `r0.0: event 3 (revision 40) delivers the put of "f" (client 2) called at 60ms was reported not applied`},
		{"a compare-and-set that failed", register, puts("r0.0", "a", "c", "d", "e"), false, `r0.0: event 3 (revision 40) delivers the value of the cas of "e" (client 1) between 50ms and 51ms, which failed its compare, finding "d"`},
		{"a revision twice", register, append(puts("r0.0", "a", "c"), client.Event{Kind: client.EventPut, Key: "r0.0", Value: []byte("d"), Revision: 20}), false, `r0.0: events 1 and 2 are both revision 20: delivered twice`},
		{"a revision going back", register, append(puts("r0.0", "a", "c"), client.Event{Kind: client.EventPut, Key: "r0.0", Value: []byte("d"), Revision: 15}), false, `r0.0: event 2 at revision 15 after revision 20`},
		{"a deletion", register, append(puts("r0.0", "a"), client.Event{Kind: client.EventDelete, Key: "r0.0", Revision: 90}), false, `r0.0: event 1 (revision 90) is a delete; the workloads only write`},
		{"a key nobody wrote", nil, puts("r9.0", "a"), false, `r9.0: event 0 (revision 10) delivers "a", which no client wrote there`},

		{"each increment once", counter, puts("n0.0", "1", "2", "3"), false, ""},
		{"the unknown increment not applied", counter[:1], puts("n0.0", "1"), false, ""},
		{"an increment missing", counter, puts("n0.0", "1", "3"), false, `n0.0: event 1 (revision 20) delivers the count 3 after 1: each increment by 1 once, in order, wants 2`},
		{"an increment missing, after a gap", counter, puts("n0.0", "1", "3"), true, ""},
		{"an increment twice", counter, puts("n0.0", "1", "2", "2"), false, `n0.0: event 2 (revision 30) delivers the count 2 after 2: each increment by 1 once, in order, wants 3`},
		{"an acknowledged increment not delivered", counter, puts("n0.0", "1", "2"), false, `n0.0: 2 events, counting to 2, for 2 acknowledged increments (the highest answered 3)`},
		{"more increments than made", counter, puts("n0.0", "1", "2", "3", "4"), false, `n0.0: the events count to 4, but only 2 increments were acknowledged and 1 of unknown outcome`},

		{"each append once", set, puts("a0.0", "5.1 ", "5.1 6.1 ", "5.1 6.1 5.2 "), false, ""},
		{"an acknowledged append missing", set, puts("a0.0", "5.1 ", "5.1 6.1 "), false, `a0.0: the append of "5.2 " (client 5), acknowledged, between 30ms and 31ms was never delivered`},
		{"two appends in one event", set, puts("a0.0", "5.1 ", "5.1 6.1 5.2 "), false, `a0.0: event 1 (revision 20) adds "6.1 5.2 " to event 0's set: 2 elements, want one`},
		{"two appends in one event, after a gap", set, puts("a0.0", "5.1 ", "5.1 6.1 5.2 "), true, ""},
		{"an event that drops an element", set, puts("a0.0", "5.1 ", "6.1 "), false, `a0.0: event 1 (revision 20) does not extend event 0's set of 1 elements: it lacks the element "5.1"`},
		{"an append reported unapplied", set, puts("a0.0", "5.1 ", "5.1 5.2 ", "5.1 5.2 6.2 "), false, `a0.0: event 2 (revision 30) delivers the append of "6.2 " (client 6) called at 40ms was reported not applied`},
		{"an element twice", set, puts("a0.0", "5.1 ", "5.1 5.1 ", "5.1 5.1 5.2 "), false, `a0.0: events 0 and 1 (revisions 10 and 20) both deliver the append of "5.1 " (client 5), acknowledged, between 10ms and 11ms`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := map[string][]client.Event{}
			if len(tc.events) > 0 {
				events[tc.events[0].Key] = tc.events
			}
			exempt := map[string]bool{}
			if tc.exempt {
				exempt[tc.events[0].Key] = true
			}
			problems, _ := checkWatch(tc.history, events, exempt)
			got := strings.Join(problems, "; ")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

// The counts of a run the checker passes.
func TestCheckWatchCounts(t *testing.T) {
	history := []Record{
		rec(1, 10, put("r0.0", "a"), OK, acked),
		rec(2, 20, put("r0.0", "b"), Unknown, wire.Result{}),
		rec(1, 30, put("r0.0", "c"), Unknown, wire.Result{}),
		rec(1, 40, incr("n0.0"), OK, found("1")),
	}
	events := map[string][]client.Event{"r0.0": puts("r0.0", "a", "c"), "n0.0": puts("n0.0", "1")}
	problems, c := checkWatch(history, events, nil)
	if len(problems) > 0 || c != (watchCounts{acked: 2, unknown: 2, unknownDelivered: 1}) {
		t.Fatalf("findings %q, counts %+v", problems, c)
	}
}

// A key is behind while its last event is not its final read's value.
func TestWatchBehind(t *testing.T) {
	finals := map[string]finalValue{
		"r0.0": {found: true, value: []byte("b")},
		"r1.0": {found: true, value: []byte("x")},
		"r2.0": {},
		"r3.0": {found: true, value: []byte("y")},
		"c/k0": {found: true, value: []byte("z")},
	}
	events := map[string][]client.Event{"r0.0": puts("r0.0", "a", "b"), "r1.0": puts("r1.0", "x", "w"), "r2.0": puts("r2.0", "q")}
	if got, want := watchBehind(events, finals, map[string]bool{"r3.0": true}), []string{"r1.0", "r2.0"}; !slices.Equal(got, want) {
		t.Fatalf("behind %v, want %v", got, want)
	}
}

// A key's volumes across a keyspace's splits: one per split level, the
// first volumes of the list the older ones.
func TestVolumesOfKey(t *testing.T) {
	k := client.Keyspace{Name: wire.DefaultKeyspace, Mode: "strong", Volumes: 8, Splits: 2}
	for v := range 8 {
		k.VolumeIDs = append(k.VolumeIDs, uint32(v))
	}
	for _, key := range []string{"r0.0", "n1.2", "a3.4"} {
		h := wire.KeyHash(key)
		want := []uint32{h % 2, h % 4, h % 8}
		if got := volumesOfKey(k, key); !slices.Equal(got, want) {
			t.Errorf("%s: volumes %v, want %v", key, got, want)
		}
	}
}
