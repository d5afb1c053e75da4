package clientcore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

const ms = wire.Millisecond

var chainABC = wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"a", "b", "c"}}

// harness drives one core with the test as its network and clock.
type harness struct {
	t    *testing.T
	core *Core
	now  wire.Time
	// sent and done accumulate the core's output.
	sent []wire.Envelope
	done []Done
	// timer is the last Ready's Timer.
	timer wire.Time
}

func newHarness(t *testing.T, o Options) *harness {
	t.Helper()
	if o.Client == 0 {
		o.Client = 7
	}
	if o.Masters == nil {
		o.Masters = []wire.NodeID{"m"}
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = 100 * ms
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = 10 * ms
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, core: c}
}

// configured returns a harness whose core knows chainABC.
func configured(t *testing.T, o Options) *harness {
	o.Configs = []wire.Config{chainABC}
	return newHarness(t, o)
}

func (h *harness) collect() {
	rd := h.core.Ready()
	h.timer = rd.Timer
	h.sent = append(h.sent, rd.Messages...)
	h.done = append(h.done, rd.Done...)
}

func (h *harness) start(op wire.Op, call CallOptions) OpID {
	id := h.core.Start(h.now, op, call)
	h.collect()
	return id
}

func (h *harness) step(from wire.NodeID, m wire.Message) {
	h.core.Step(h.now, from, m)
	h.collect()
}

func (h *harness) tickAt(t wire.Time) {
	h.now = t
	h.core.Tick(t)
	h.collect()
}

// takeSent returns and clears the messages sent so far.
func (h *harness) takeSent() []wire.Envelope {
	s := h.sent
	h.sent = nil
	return s
}

// onlyRequest returns the one ClientRequest sent since the last call,
// failing if anything else was sent.
func (h *harness) onlyRequest() (wire.NodeID, *wire.ClientRequest) {
	h.t.Helper()
	sent := h.takeSent()
	if len(sent) != 1 {
		h.t.Fatalf("sent %v; want one request", sent)
	}
	req, ok := sent[0].Msg.(*wire.ClientRequest)
	if !ok {
		h.t.Fatalf("sent %v; want a ClientRequest", sent[0])
	}
	return sent[0].To, req
}

func (h *harness) takeDone() []Done {
	d := h.done
	h.done = nil
	return d
}

func reply(req *wire.ClientRequest, code wire.ErrCode, r wire.Result) *wire.ClientReply {
	return &wire.ClientReply{Volume: req.Volume, Client: req.Client, ReqNo: req.ReqNo, Err: code, Result: r}
}

func put(key string) wire.Op { return wire.Op{Kind: wire.OpPut, Key: key, Value: []byte("v")} }
func get(key string) wire.Op { return wire.Op{Kind: wire.OpGet, Key: key} }

func TestRoutesUpdatesToTheHeadAndReadsByConsistency(t *testing.T) {
	h := configured(t, Options{})
	h.start(put("k"), CallOptions{})
	if to, req := h.onlyRequest(); to != "a" || req.Epoch != 1 || req.ReqNo != 1 || req.Op.Kind != wire.OpPut {
		t.Fatalf("update went to %s as %+v; want the head a, epoch 1, request 1", to, req)
	}
	h.start(get("k"), CallOptions{Consistency: Strong})
	if to, _ := h.onlyRequest(); to != "c" {
		t.Fatalf("strong read went to %s; want the tail c", to)
	}
	seen := map[wire.NodeID]bool{}
	for range 50 {
		h.start(get("k"), CallOptions{Consistency: AnyMember})
		to, _ := h.onlyRequest()
		seen[to] = true
	}
	if len(seen) != 3 {
		t.Fatalf("any-member reads went to %v; want every member of %v", seen, chainABC.Chain)
	}
}

// A retry reuses the request number, so the chain applies the update
// once (CR §2; docs/adr/0003).
func TestRetryReusesTheRequestNumber(t *testing.T) {
	h := configured(t, Options{})
	h.start(put("k"), CallOptions{})
	_, first := h.onlyRequest()
	h.tickAt(99 * ms)
	if sent := h.takeSent(); len(sent) != 0 {
		t.Fatalf("sent %v before the attempt timeout", sent)
	}
	h.tickAt(100 * ms)
	sent := h.takeSent()
	var retry *wire.ClientRequest
	asked := false
	for _, env := range sent {
		switch m := env.Msg.(type) {
		case *wire.ClientRequest:
			retry = m
		case *wire.ConfigRequest:
			asked = env.To == "m"
		}
	}
	if retry == nil || retry.ReqNo != first.ReqNo || !asked {
		t.Fatalf("after the attempt timeout sent %v; want the same request number %d again and a configuration request", sent, first.ReqNo)
	}
	h.step("c", reply(retry, wire.ErrNone, wire.Result{Found: true, SN: 4}))
	if done := h.takeDone(); len(done) != 1 || done[0].Outcome != OK || done[0].Attempts != 2 || done[0].Result.SN != 4 {
		t.Fatalf("done %+v; want OK after 2 attempts", done)
	}
}

// A server in a newer epoch sends its configuration: the core adopts it,
// retries at once at the new head, and refreshes the other volumes'
// configurations from the master. A wrong-epoch reply that teaches
// nothing new backs off like any error.
func TestWrongEpochAdoptsTheServersConfiguration(t *testing.T) {
	h := configured(t, Options{})
	h.start(put("k"), CallOptions{})
	_, req := h.onlyRequest()
	newer := wire.Config{Volume: 0, Epoch: 2, Chain: []wire.NodeID{"b", "c"}}
	rep := reply(req, wire.ErrWrongEpoch, wire.Result{})
	rep.Config = &newer
	h.now = 5 * ms
	h.step("a", rep)
	var to []wire.NodeID
	var retry *wire.ClientRequest
	for _, env := range h.takeSent() {
		to = append(to, env.To)
		if r, ok := env.Msg.(*wire.ClientRequest); ok {
			retry = r
		}
	}
	if !slices.Equal(to, []wire.NodeID{"m", "b"}) || retry.Epoch != 2 || retry.ReqNo != req.ReqNo {
		t.Fatalf("after a newer configuration sent to %v, retry %+v; want the master asked and request %d at b in epoch 2", to, retry, req.ReqNo)
	}
	// b has not adopted epoch 2 yet: its reply carries nothing newer.
	stale := reply(retry, wire.ErrWrongEpoch, wire.Result{})
	stale.Config = &chainABC
	h.step("b", stale)
	if sent := h.takeSent(); len(sent) != 0 {
		t.Fatalf("after a stale configuration sent %v at once; want to wait for the backoff", sent)
	}
	h.tickAt(14 * ms)
	if sent := h.takeSent(); len(sent) != 0 {
		t.Fatalf("sent %v before the backoff ended", sent)
	}
	h.tickAt(15 * ms)
	var again *wire.ClientRequest
	for _, env := range h.takeSent() {
		if r, ok := env.Msg.(*wire.ClientRequest); ok && env.To == "b" {
			again = r
		}
	}
	if again == nil || again.Epoch != 2 {
		t.Fatalf("after the backoff: %+v; want the request again at b in epoch 2", again)
	}
}

// Error replies without a configuration send the core to the master, and
// the backoff doubles per error up to its maximum.
func TestErrorsAskTheMasterAndBackOffExponentially(t *testing.T) {
	h := configured(t, Options{RetryBackoff: 10 * ms, RetryBackoffMax: 40 * ms})
	h.start(put("k"), CallOptions{})
	_, req := h.onlyRequest()
	var waits []wire.Time
	for range 4 {
		h.step("a", reply(req, wire.ErrUnavailable, wire.Result{}))
		sent := h.takeSent()
		if len(sent) != 1 || sent[0].To != "m" {
			t.Fatalf("after an error sent %v; want a configuration request to the master", sent)
		}
		at, ok := h.core.NextTimer()
		if !ok {
			t.Fatal("no timer while backing off")
		}
		waits = append(waits, at-h.now)
		h.tickAt(at)
		_, req = h.onlyRequest()
	}
	if want := []wire.Time{10 * ms, 20 * ms, 40 * ms, 40 * ms}; !slices.Equal(waits, want) {
		t.Fatalf("backoffs %v; want %v", waits, want)
	}
}

// CRAQ: a member that finds the key dirty sends the read to the tail at
// once, under the same request number.
func TestDirtyReadGoesToTheTail(t *testing.T) {
	h := configured(t, Options{Rand: rand.New(rand.NewPCG(3, 3))})
	for {
		h.start(get("k"), CallOptions{Consistency: AnyMember})
		to, req := h.onlyRequest()
		if to == "c" {
			h.step("c", reply(req, wire.ErrNone, wire.Result{}))
			h.takeDone()
			continue // the tail itself answers; find a read at another member
		}
		h.step(to, reply(req, wire.ErrDirty, wire.Result{}))
		to2, retry := h.onlyRequest()
		if to2 != "c" || retry.ReqNo != req.ReqNo {
			t.Fatalf("dirty read resent to %s as request %d; want the tail c, request %d", to2, retry.ReqNo, req.ReqNo)
		}
		return
	}
}

// A read that reached a server that is not the tail goes to the tail
// from then on, even at AnyMember.
func TestNotTailSendsReadsToTheTail(t *testing.T) {
	h := configured(t, Options{Rand: rand.New(rand.NewPCG(5, 5))})
	h.start(get("k"), CallOptions{Consistency: AnyMember})
	to, req := h.onlyRequest()
	h.step(to, reply(req, wire.ErrNotTail, wire.Result{}))
	h.takeSent() // the configuration request
	for i := range 10 {
		at, _ := h.core.NextTimer()
		h.tickAt(at)
		to, req = h.onlyRequest()
		if to != "c" {
			t.Fatalf("retry %d went to %s; want the tail c", i, to)
		}
		h.step(to, reply(req, wire.ErrUnavailable, wire.Result{}))
		h.takeSent()
	}
}

func TestDeadlinesEndOperationsByWhatLeft(t *testing.T) {
	h := configured(t, Options{AttemptTimeout: -1})
	update := h.start(put("k"), CallOptions{Deadline: 50 * ms})
	read := h.start(get("k"), CallOptions{Deadline: 50 * ms})
	h.takeSent()
	h.tickAt(49 * ms)
	if d := h.takeDone(); len(d) != 0 {
		t.Fatalf("finished %+v before the deadline", d)
	}
	h.tickAt(50 * ms)
	done := h.takeDone()
	if len(done) != 2 || done[0].ID != update || done[0].Outcome != Ambiguous || !errors.Is(done[0].Err, ErrDeadline) ||
		done[1].ID != read || done[1].Outcome != Unavailable {
		t.Fatalf("at the deadline finished %+v; want the update ambiguous and the read unavailable", done)
	}
	// An update that never left (no configuration yet) changed nothing.
	h2 := newHarness(t, Options{})
	h2.start(put("k"), CallOptions{Deadline: 50 * ms})
	h2.tickAt(50 * ms)
	if done := h2.takeDone(); len(done) != 1 || done[0].Outcome != Unavailable {
		t.Fatalf("unsent update at its deadline: %+v; want unavailable", done)
	}
	// A deadline already past finishes the operation at once.
	h.start(put("k"), CallOptions{Deadline: h.now})
	if done := h.takeDone(); len(done) != 1 || done[0].Outcome != Unavailable || len(h.takeSent()) != 0 {
		t.Fatalf("operation started after its deadline: %+v; want unavailable, nothing sent", done)
	}
}

// Cancel gives up like a deadline and lets AckedBelow move past the
// update: the chain need not keep an outcome nobody will ask for.
func TestCancelledUpdateNoLongerHoldsTheWindow(t *testing.T) {
	h := configured(t, Options{})
	first := h.start(put("a"), CallOptions{})
	h.takeSent()
	cause := errors.New("caller went away")
	h.core.Cancel(h.now, first, cause)
	h.collect()
	if done := h.takeDone(); len(done) != 1 || done[0].Outcome != Ambiguous || !errors.Is(done[0].Err, cause) {
		t.Fatalf("cancelled update: %+v; want ambiguous with the cause", done)
	}
	h.start(put("b"), CallOptions{})
	if _, req := h.onlyRequest(); req.AckedBelow != 2 || req.ReqNo != 2 {
		t.Fatalf("next update %+v; want request 2 acknowledging below 2", req)
	}
}

// Updates beyond the chain's exactly-once window wait until the lowest
// unanswered update finishes; AckedBelow is always that lowest one.
func TestExactlyOnceWindow(t *testing.T) {
	h := configured(t, Options{WindowMax: 4})
	for i := range 6 {
		h.start(put(string(rune('a'+i))), CallOptions{})
	}
	reqs := map[uint64]*wire.ClientRequest{}
	for _, env := range h.takeSent() {
		req := env.Msg.(*wire.ClientRequest)
		reqs[req.ReqNo] = req
		if req.AckedBelow != 1 {
			t.Fatalf("request %d acknowledges below %d; want 1", req.ReqNo, req.AckedBelow)
		}
	}
	if len(reqs) != 4 || reqs[5] != nil {
		t.Fatalf("sent requests %v; want 1-4 only", slices.Sorted(mapsKeys(reqs)))
	}
	h.step("c", reply(reqs[3], wire.ErrNone, wire.Result{}))
	if sent := h.takeSent(); len(sent) != 0 {
		t.Fatalf("answering 3 sent %v; the window starts at 1 still", sent)
	}
	h.step("c", reply(reqs[1], wire.ErrNone, wire.Result{}))
	if _, req := h.onlyRequest(); req.ReqNo != 5 || req.AckedBelow != 2 {
		t.Fatalf("answering 1 sent %+v; want request 5 acknowledging below 2", req)
	}
	h.step("c", reply(reqs[2], wire.ErrNone, wire.Result{}))
	if _, req := h.onlyRequest(); req.ReqNo != 6 || req.AckedBelow != 4 {
		t.Fatalf("answering 2 sent %+v; want request 6 acknowledging below 4", req)
	}
	// Reads are not held by the window.
	h.start(get("k"), CallOptions{})
	if _, req := h.onlyRequest(); req.ReqNo != 7 {
		t.Fatalf("read %+v; want request 7 sent at once", req)
	}
}

func mapsKeys(m map[uint64]*wire.ClientRequest) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A volume's chain learns of the client's session with its first
// answered update; only then do requests say they expect it.
func TestExpectSessionPerVolume(t *testing.T) {
	two := []wire.Config{chainABC, {Volume: 1, Epoch: 1, Chain: []wire.NodeID{"b", "c", "a"}}}
	h := newHarness(t, Options{Configs: two, VolumeOf: func(key string) wire.VolumeID { return wire.VolumeID(key[0] - '0') }})
	h.start(put("0k"), CallOptions{})
	_, req := h.onlyRequest()
	if req.ExpectSession {
		t.Fatal("first update expects a session")
	}
	h.step("c", reply(req, wire.ErrNone, wire.Result{}))
	h.start(put("0k"), CallOptions{})
	if _, req := h.onlyRequest(); !req.ExpectSession {
		t.Fatal("second update to volume 0 does not expect its session")
	}
	h.start(put("1k"), CallOptions{})
	if to, req := h.onlyRequest(); to != "b" || req.Volume != 1 || req.ExpectSession {
		t.Fatalf("first update to volume 1: to %s, %+v; want b, volume 1, no session expected", to, req)
	}
}

func TestRepliesEndingOperations(t *testing.T) {
	for _, tc := range []struct {
		code    wire.ErrCode
		outcome Outcome
		err     error
	}{
		{wire.ErrNone, OK, nil},
		{wire.ErrSessionExpired, Ambiguous, ErrSessionLost},
		{wire.ErrBadRequest, Invalid, ErrRefused},
	} {
		h := configured(t, Options{})
		h.start(put("k"), CallOptions{})
		_, req := h.onlyRequest()
		h.step("c", reply(req, tc.code, wire.Result{SN: 9}))
		done := h.takeDone()
		if len(done) != 1 || done[0].Outcome != tc.outcome || !errors.Is(done[0].Err, tc.err) || done[0].From != map[Outcome]wire.NodeID{OK: "c"}[tc.outcome] {
			t.Fatalf("reply %v: done %+v; want %v (%v)", tc.code, done, tc.outcome, tc.err)
		}
		// A duplicate reply finds nothing to finish.
		h.step("c", reply(req, tc.code, wire.Result{SN: 9}))
		if done := h.takeDone(); len(done) != 0 || h.core.Pending() != 0 {
			t.Fatalf("duplicate reply %v finished %+v", tc.code, done)
		}
	}
	// A reply for another client is not ours.
	h := configured(t, Options{})
	h.start(put("k"), CallOptions{})
	_, req := h.onlyRequest()
	other := reply(req, wire.ErrNone, wire.Result{})
	other.Client++
	h.step("c", other)
	if done := h.takeDone(); len(done) != 0 {
		t.Fatalf("another client's reply finished %+v", done)
	}
}

func TestInvalidOperationsFinishAtOnce(t *testing.T) {
	h := configured(t, Options{})
	for _, tc := range []struct {
		op   wire.Op
		call CallOptions
	}{
		{wire.Op{Kind: wire.OpPut}, CallOptions{}},                                  // empty key
		{wire.Op{Kind: 99, Key: "k"}, CallOptions{}},                                // unknown kind
		{get("k"), CallOptions{Consistency: Consistency(200)}},                      // unknown consistency
		{wire.Op{Kind: wire.OpPut, Key: string(make([]byte, 2000))}, CallOptions{}}, // key over the limit
	} {
		h.start(tc.op, tc.call)
		if done := h.takeDone(); len(done) != 1 || done[0].Outcome != Invalid || done[0].Err == nil {
			t.Errorf("%v %+v: done %+v; want invalid with a cause", tc.op, tc.call, done)
		}
		if sent := h.takeSent(); len(sent) != 0 {
			t.Errorf("%v: sent %v", tc.op, sent)
		}
	}
}

// Before the first configuration, operations wait, the master is asked,
// and they leave as soon as the configuration arrives.
func TestWaitsForTheConfiguration(t *testing.T) {
	h := newHarness(t, Options{Masters: []wire.NodeID{"m1"}})
	h.start(put("k"), CallOptions{})
	h.start(get("k"), CallOptions{})
	sent := h.takeSent()
	if len(sent) != 1 || sent[0].To != "m1" {
		t.Fatalf("without a configuration sent %v; want one request to the master", sent)
	}
	h.step("m1", &wire.ConfigReply{Configs: []wire.Config{chainABC}, Masters: []wire.NodeID{"m1", "m2"}})
	var to []wire.NodeID
	for _, env := range h.takeSent() {
		to = append(to, env.To)
	}
	if !slices.Equal(to, []wire.NodeID{"a", "c"}) {
		t.Fatalf("after the configuration sent to %v; want the head and the tail", to)
	}
	if got := h.core.Masters(); !slices.Equal(got, []wire.NodeID{"m1", "m2"}) {
		t.Fatalf("masters %v; want both members named", got)
	}
}

// A server asked for configurations names its masters; the core records
// it as not a master and learns nothing else from it.
func TestAServerIsNotAMaster(t *testing.T) {
	h := newHarness(t, Options{Masters: []wire.NodeID{"s1"}})
	h.core.RequestConfig(0)
	h.collect()
	h.step("s1", &wire.ConfigReply{Masters: []wire.NodeID{"m"}})
	if nm := h.core.NotMaster(); !slices.Equal(nm["s1"], []wire.NodeID{"m"}) {
		t.Fatalf("NotMaster %v; want s1 naming m", nm)
	}
	if got := h.core.Masters(); !slices.Equal(got, []wire.NodeID{"s1"}) || h.core.Volumes() != 0 {
		t.Fatalf("masters %v, volumes %d; want nothing learned", got, h.core.Volumes())
	}
}

// Configuration requests are spaced by ConfigRefreshMin however many
// operations want one.
func TestConfigurationRequestsAreSpaced(t *testing.T) {
	h := newHarness(t, Options{ConfigRefreshMin: 30 * ms})
	for range 5 {
		h.core.Start(0, put("k"), CallOptions{})
	}
	var at []wire.Time
	for now := wire.Time(0); now <= 60*ms; now += ms {
		h.tickAt(now)
		for _, env := range h.takeSent() {
			if _, ok := env.Msg.(*wire.ConfigRequest); ok {
				at = append(at, now)
			}
		}
	}
	if want := []wire.Time{0, 30 * ms, 60 * ms}; !slices.Equal(at, want) {
		t.Fatalf("five waiting operations asked for the configuration at %v; want %v", at, want)
	}
}

// In strong and CRAQ modes every answer is of a version the tail has:
// the client keeps no per-key metadata.
func TestNoKeyMetadataInStrongModes(t *testing.T) {
	h := configured(t, Options{})
	for i, c := range []Consistency{Strong, AnyMember} {
		h.start(put("k"), CallOptions{})
		_, req := h.onlyRequest()
		h.step("c", reply(req, wire.ErrNone, wire.Result{SN: wire.SN(2*i + 1)}))
		h.start(get("k"), CallOptions{Consistency: c})
		to, req := h.onlyRequest()
		h.step(to, reply(req, wire.ErrNone, wire.Result{SN: wire.SN(2*i + 1)}))
	}
	if n := h.core.UnstableKeys(); n != 0 {
		t.Fatalf("%d keys with metadata; want none", n)
	}
}

// MetadataSize counts the keys with an unstable version and the most held
// at once; ResetMetadataPeak starts the peak again from the current size.
func TestMetadataSize(t *testing.T) {
	causal := chainABC.Clone()
	causal.Mode, causal.K = wire.ModeCausal, 2
	h := newHarness(t, Options{Configs: []wire.Config{causal}})
	read := func(key string, sn wire.SN, stable bool) {
		t.Helper()
		h.start(get(key), CallOptions{})
		to, req := h.onlyRequest()
		r := reply(req, wire.ErrNone, wire.Result{SN: sn, Found: true})
		r.Epoch, r.Position, r.Stable = 1, 1, stable
		h.step(to, r)
		if d := h.takeDone(); len(d) != 1 || d[0].Outcome != OK {
			t.Fatalf("read of %s: %+v", key, d)
		}
	}
	want := func(entries, peak int) {
		t.Helper()
		if got := h.core.MetadataSize(); got != (MetadataSize{Entries: entries, Peak: peak}) {
			t.Fatalf("metadata size %+v; want %d entries, peak %d", got, entries, peak)
		}
	}
	want(0, 0)
	read("x", 3, false)
	read("y", 4, false)
	want(2, 2)
	read("x", 5, true) // x's newest version is stable: its entry goes
	want(1, 2)
	h.core.ResetMetadataPeak()
	want(1, 1)
	read("z", 6, false)
	want(2, 2)
}

func TestKeyMetadataRules(t *testing.T) {
	m := newKeyMetadata()
	v := func(version wire.SN, epoch wire.Epoch, pos int) KeyVersion {
		return KeyVersion{Version: version, Epoch: epoch, Position: pos}
	}
	m.observe("k", v(5, 1, 0), false)
	m.observe("k", v(4, 1, 2), false) // older: ignored
	if got, _ := m.lookup("k"); got != v(5, 1, 0) {
		t.Fatalf("after an older version: %+v", got)
	}
	m.observe("k", v(5, 1, 1), false) // same version further down
	if got, _ := m.lookup("k"); got != v(5, 1, 1) {
		t.Fatalf("same version further down: %+v", got)
	}
	m.observe("k", v(5, 2, 0), false) // same version, newer configuration
	if got, _ := m.lookup("k"); got != v(5, 2, 0) {
		t.Fatalf("newer configuration: %+v", got)
	}
	m.observe("k", v(4, 2, 2), true) // an older stable version does not cover it
	if _, ok := m.lookup("k"); !ok {
		t.Fatal("an older stable version dropped a newer unstable one")
	}
	m.observe("k", v(6, 2, 2), true)
	if _, ok := m.lookup("k"); ok || m.len() != 0 {
		t.Fatal("a newer stable version kept the entry")
	}
}

// NextTimer is the earliest of deadlines, attempt timeouts and retries;
// with nothing pending there is none.
func TestNextTimer(t *testing.T) {
	h := configured(t, Options{AttemptTimeout: 100 * ms})
	if _, ok := h.core.NextTimer(); ok {
		t.Fatal("a timer with nothing pending")
	}
	h.start(put("k"), CallOptions{Deadline: 300 * ms})
	if at, _ := h.core.NextTimer(); at != 100*ms || h.timer != 100*ms {
		t.Fatalf("timer at %v (Ready says %v); want the attempt timeout at 100ms", at, h.timer)
	}
	h.now = 10 * ms
	h.start(get("k"), CallOptions{Deadline: 50 * ms})
	if at, _ := h.core.NextTimer(); at != 50*ms || h.timer != 50*ms {
		t.Fatalf("timer at %v (Ready says %v); want the read's deadline at 50ms", at, h.timer)
	}
	h.step("c", &wire.ClientReply{Client: 7, ReqNo: 2, Err: wire.ErrUnavailable})
	if h.timer != 20*ms {
		t.Fatalf("after an error Ready's timer is %v; want the retry at 20ms", h.timer)
	}
}

// A causal write waits for the unstable versions of other keys the client
// holds (dependency stabilisation), but not for the version of the key it
// overwrites: that one is ordered before it by SN, and goes with the
// request for the head to check (MinVersion).
func TestCausalWriteWaitsForOtherKeysOnly(t *testing.T) {
	causal := chainABC.Clone()
	causal.Mode, causal.K = wire.ModeCausal, 2
	h := newHarness(t, Options{Configs: []wire.Config{causal}})
	write := func(key string) (wire.NodeID, *wire.ClientRequest) {
		t.Helper()
		h.start(put(key), CallOptions{})
		return h.onlyRequest()
	}
	answer := func(to wire.NodeID, req *wire.ClientRequest, sn wire.SN) {
		t.Helper()
		r := reply(req, wire.ErrNone, wire.Result{SN: sn})
		r.Epoch, r.Position = 1, 1
		h.step(to, r)
		if d := h.takeDone(); len(d) != 1 || d[0].Outcome != OK {
			t.Fatalf("write answered: %+v", d)
		}
	}

	to, req := write("x")
	answer(to, req, 3)
	to, req = write("x") // x@3 is unstable: overwritten without a wait
	if req.Op.Kind != wire.OpPut || to != causal.Head() || req.MinVersion != 3 {
		t.Fatalf("second write of x sent %v to %s with MinVersion %d; want the put at the head with 3", req.Op.Kind, to, req.MinVersion)
	}
	answer(to, req, 4)
	to, req = write("y") // x@4 is unstable: y waits for it at the head, which knows last
	if req.Op.Kind != wire.OpWaitStable || to != causal.Head() || req.Op.Key != "x" || req.MinVersion != 4 {
		t.Fatalf("write of y sent %v of %s@%d to %s; want a wait for x@4 at the head", req.Op.Kind, req.Op.Key, req.MinVersion, to)
	}
}

// A server's refusal by authorization or by its in-flight limit ends the
// operation at once with the reason: nothing was applied, unless an
// earlier attempt of an update may have been (Ambiguous). The user a
// proxy names goes with every attempt.
func TestRefusalsEndOperations(t *testing.T) {
	for _, tc := range []struct {
		code    wire.ErrCode
		op      wire.Op
		retried bool
		outcome Outcome
		err     error
	}{
		{wire.ErrDenied, get("k"), false, Refused, ErrDenied},
		{wire.ErrDenied, put("k"), false, Refused, ErrDenied},
		{wire.ErrUnauthenticated, put("k"), false, Refused, ErrUnauthenticated},
		{wire.ErrDenied, put("k"), true, Ambiguous, ErrDenied},
		{wire.ErrDenied, get("k"), true, Refused, ErrDenied},
		{wire.ErrInFlightLimit, get("k"), false, Unavailable, ErrInFlightLimit},
		{wire.ErrInFlightLimit, put("k"), false, Unavailable, ErrInFlightLimit},
		{wire.ErrInFlightLimit, put("k"), true, Ambiguous, ErrInFlightLimit},
	} {
		h := configured(t, Options{})
		h.start(tc.op, CallOptions{User: "bob"})
		_, req := h.onlyRequest()
		if req.User != "bob" {
			t.Fatalf("request for user %q, want bob", req.User)
		}
		if tc.retried {
			h.tickAt(h.now + 100*ms) // attempt timeout: sent again, and the configuration asked for
			for _, env := range h.takeSent() {
				if r, ok := env.Msg.(*wire.ClientRequest); ok {
					req = r
				}
			}
			if req.User != "bob" {
				t.Fatalf("retry for user %q, want bob", req.User)
			}
		}
		h.step("c", reply(req, tc.code, wire.Result{}))
		done := h.takeDone()
		if len(done) != 1 || done[0].Outcome != tc.outcome || !errors.Is(done[0].Err, tc.err) {
			t.Fatalf("%v (retried %v) answered %s: done %+v; want %v (%v)", tc.op, tc.retried, tc.code, done, tc.outcome, tc.err)
		}
		if sent := h.takeSent(); len(sent) != 0 || h.core.Pending() != 0 {
			t.Fatalf("%s: sent %v after the refusal, %d pending", tc.code, sent, h.core.Pending())
		}
	}
}

// The ambiguity rule (Ambiguous) on both sides: an update whose every
// attempt a head refused as retryable (ErrUnavailable) is still
// Ambiguous at its deadline, since such a refusal does not prove the
// write was not admitted (a hierarchical head answers so for a write it
// forwarded); one that never left, held for the versions it depends on,
// is Unavailable.
func TestAmbiguityRuleAtTheDeadline(t *testing.T) {
	h := configured(t, Options{})
	h.start(put("k"), CallOptions{Deadline: 100 * ms})
	_, req := h.onlyRequest()
	h.step("a", reply(req, wire.ErrUnavailable, wire.Result{}))
	h.tickAt(100 * ms)
	if d := h.takeDone(); len(d) != 1 || d[0].Outcome != Ambiguous || !errors.Is(d[0].Err, ErrDeadline) {
		t.Fatalf("an update refused as retryable, at its deadline: %+v; want Ambiguous", d)
	}

	causal := wire.Config{Volume: 0, Epoch: 1, Chain: []wire.NodeID{"a", "b", "c"}, Mode: wire.ModeCausal, K: 1}
	h = newHarness(t, Options{Configs: []wire.Config{causal}, VolumeOf: func(string) wire.VolumeID { return 0 }})
	h.start(put("x"), CallOptions{})
	_, w := h.onlyRequest()
	h.step("a", &wire.ClientReply{Volume: 0, Client: 7, ReqNo: w.ReqNo, Result: wire.Result{Status: wire.StatusOK, SN: 1}, Position: 0})
	h.takeDone()
	h.start(put("y"), CallOptions{Deadline: 100 * ms}) // waits for x's version to be stable
	for _, env := range h.takeSent() {
		if r, ok := env.Msg.(*wire.ClientRequest); ok && r.Op.Kind == wire.OpPut {
			t.Fatalf("the write of y left before x was stable: %+v", r)
		}
	}
	h.tickAt(100 * ms)
	if d := h.takeDone(); len(d) != 1 || d[0].Outcome != Unavailable || d[0].Attempts != 0 {
		t.Fatalf("an update never sent, at its deadline: %+v; want Unavailable", d)
	}
}

// In a causal volume of one site a read carries the client's floor (the
// highest SN a stable answer was as of), a stable answer raises it and
// drops the key's metadata, and an answer as of an SN at or below the
// floor counts as stable whoever gave it.
func TestCausalReadsCarryTheFloor(t *testing.T) {
	causal := chainABC.Clone()
	causal.Mode, causal.K = wire.ModeCausal, 2
	h := newHarness(t, Options{Configs: []wire.Config{causal}})
	read := func(key string, sn wire.SN, stable bool) *wire.ClientRequest {
		t.Helper()
		h.start(get(key), CallOptions{})
		to, req := h.onlyRequest()
		r := reply(req, wire.ErrNone, wire.Result{SN: sn})
		r.Epoch, r.Position, r.Stable = 1, causal.Index(to), stable
		h.step(to, r)
		if d := h.takeDone(); len(d) != 1 || d[0].Outcome != OK {
			t.Fatalf("read answered: %+v", d)
		}
		return req
	}
	if req := read("x", 5, true); req.MinVersion != 0 {
		t.Fatalf("first read carried MinVersion %d, want 0", req.MinVersion)
	}
	if req := read("y", 4, false); req.MinVersion != 5 {
		t.Fatalf("read after a stable answer as of 5 carried %d, want the floor 5", req.MinVersion)
	}
	if _, ok := h.core.metadata.lookup("y"); ok {
		t.Fatal("an answer as of 4, below the floor 5, left metadata: want it stable")
	}
	read("z", 9, false)
	if v, ok := h.core.metadata.lookup("z"); !ok || v.Version != 9 {
		t.Fatalf("an unstable answer as of 9 above the floor: metadata %+v, %v; want version 9", v, ok)
	}
	if req := read("z", 9, true); req.MinVersion != 9 {
		t.Fatalf("read of z carried %d, want its unstable version 9", req.MinVersion)
	}
	if req := read("w", 9, true); req.MinVersion != 9 {
		t.Fatalf("read after a stable answer as of 9 carried %d, want the floor 9", req.MinVersion)
	}
}

// An update to one volume waits, at the other volume's head, for the
// floor the client read there until that head says every member knows it
// committed; in its own volume it does not wait for the floor.
func TestCausalUpdateWaitsForFloorsElsewhere(t *testing.T) {
	v0, v1 := chainABC.Clone(), chainABC.Clone()
	v0.Mode, v0.K = wire.ModeCausal, 2
	v1.Mode, v1.K, v1.Volume, v1.Chain = wire.ModeCausal, 2, 1, []wire.NodeID{"d", "e", "f"}
	h := newHarness(t, Options{Configs: []wire.Config{v0, v1}})
	volumeOf := func(key string) wire.VolumeID {
		v, ok := h.core.volumeOf(key)
		if !ok {
			t.Fatalf("no volume for %s", key)
		}
		return v
	}
	// Keys in each volume.
	var in0, in1 string
	for i := 0; in0 == "" || in1 == ""; i++ {
		k := fmt.Sprint("k", i)
		if volumeOf(k) == 0 && in0 == "" {
			in0 = k
		} else if volumeOf(k) == 1 && in1 == "" {
			in1 = k
		}
	}
	h.start(get(in0), CallOptions{})
	to, req := h.onlyRequest()
	r := reply(req, wire.ErrNone, wire.Result{SN: 7})
	r.Epoch, r.Stable = 1, true
	h.step(to, r)
	h.takeDone()

	h.start(put(in0), CallOptions{}) // same volume: no wait
	if to, req := h.onlyRequest(); req.Op.Kind != wire.OpPut || to != v0.Head() {
		t.Fatalf("write in the floor's volume sent %v to %s; want the put at the head", req.Op.Kind, to)
	}
	h.start(put(in1), CallOptions{}) // another volume: waits at v0's head
	to, req = h.onlyRequest()
	if req.Op.Kind != wire.OpWaitStable || to != v0.Head() || req.MinVersion != 7 || req.Op.Key != in0 {
		t.Fatalf("write in another volume sent %v of %s@%d to %s; want a wait for %s@7 at %s", req.Op.Kind, req.Op.Key, req.MinVersion, to, in0, v0.Head())
	}
	r = reply(req, wire.ErrNone, wire.Result{SN: 7})
	r.Epoch, r.Stable = 1, true
	h.step(to, r)
	if to, req := h.onlyRequest(); req.Op.Kind != wire.OpPut || to != v1.Head() {
		t.Fatalf("after the wait: sent %v to %s; want the put at %s", req.Op.Kind, to, v1.Head())
	}
	h.start(put(in1), CallOptions{}) // the head said so: no second wait
	if _, req := h.onlyRequest(); req.Op.Kind != wire.OpPut {
		t.Fatalf("second write sent %v; want the put, the floor known everywhere", req.Op.Kind)
	}
}

// A causal read whose attempt went unanswered at a member goes to the
// others for a while.
func TestCausalReadsAvoidAnUnansweringMember(t *testing.T) {
	causal := chainABC.Clone()
	causal.Mode, causal.K = wire.ModeCausal, 2
	h := newHarness(t, Options{Configs: []wire.Config{causal}})
	h.start(get("x"), CallOptions{})
	silent, _ := h.onlyRequest()
	h.tickAt(h.now + 100*ms) // the attempt times out
	for range 30 {
		sent := h.takeSent()
		var to wire.NodeID
		for _, e := range sent {
			if req, ok := e.Msg.(*wire.ClientRequest); ok && req.Op.Kind == wire.OpGet {
				to = e.To
				r := reply(req, wire.ErrNone, wire.Result{SN: 1})
				r.Epoch, r.Stable = 1, true // no metadata: any member may answer next
				h.step(to, r)
			}
		}
		if to == silent {
			t.Fatalf("a read went to %s, which left an attempt unanswered %v ago", silent, h.now)
		}
		h.takeDone()
		h.start(get("x"), CallOptions{})
	}
}

// A deadline or a hash's operation waits for the masters to say the
// cluster runs at the protocol version that brings it (a new cluster's
// leader raises it once elected), asking them again, and is refused,
// saying why, if they do not within versionWait; other operations go as
// ever.
func TestNewFeaturesWaitForTheClusterVersion(t *testing.T) {
	h := newHarness(t, Options{Masters: []wire.NodeID{"m1"}})
	h.step("m1", &wire.ConfigReply{Configs: []wire.Config{chainABC}, Masters: []wire.NodeID{"m1"}, ClusterVersion: 1})
	h.takeSent()
	h.start(wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second}, CallOptions{})
	h.start(wire.Op{Kind: wire.OpPut, Key: "plain", Value: []byte("v")}, CallOptions{})
	sent := h.takeSent()
	if len(sent) != 2 || sent[0].To != "m1" || sent[1].To != "a" {
		t.Fatalf("at version 1 sent %v; want the master asked, and the plain put to the head", sent)
	}
	h.tickAt(versionWait + wire.Second)
	done := h.takeDone()
	if len(done) != 1 || done[0].Outcome != Invalid || !errors.Is(done[0].Err, ErrExpiryUnsupported) || !strings.Contains(done[0].Err.Error(), "runs at protocol version 1") {
		t.Fatalf("after the wait: %+v; want the TTL put refused for the version", done)
	}
	h.step("m1", &wire.ConfigReply{Configs: []wire.Config{chainABC}, Masters: []wire.NodeID{"m1"}, ClusterVersion: 2})
	h.takeSent()
	h.start(wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v"), TTL: wire.Second}, CallOptions{})
	if to, req := h.onlyRequest(); to != "a" || req.Op.TTL != wire.Second {
		t.Fatalf("at version 2 sent %v to %s; want the TTL put to the head", req, to)
	}
}
