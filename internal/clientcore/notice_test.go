package clientcore

import (
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// A causal writer learns its update is stable from the member that
// answers dependency waits, unasked (docs/adr/0025): in one site the
// head, across sites the tail. Once a volume has sent a notice, the
// writer's next update waits for the notice instead of asking; a notice
// that does not come within the attempt timeout is asked for as before;
// a tail's stable answer in one site is no notice (every member must
// know).
func TestStableNotices(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sites    []wire.SiteID
		notifier wire.NodeID // the member whose notice counts
		position int
		asked    wire.NodeID // where a wait goes
	}{
		{name: "one site", notifier: "a", position: 0, asked: "a"},
		{name: "across sites", sites: []wire.SiteID{1, 2}, notifier: "c", position: 2, asked: "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := chainABC.Clone()
			cfg.Mode, cfg.K, cfg.Sites = wire.ModeCausal, 2, tc.sites
			h := newHarness(t, Options{Configs: []wire.Config{cfg}})
			// write starts a put of key and returns the request sent.
			write := func(key string) *wire.ClientRequest {
				t.Helper()
				h.start(put(key), CallOptions{})
				_, req := h.onlyRequest()
				return req
			}
			// answer answers req unstable, from the member at index 1.
			answer := func(req *wire.ClientRequest, sn wire.SN) {
				t.Helper()
				r := reply(req, wire.ErrNone, wire.Result{SN: sn})
				r.Epoch, r.Position = 1, 1
				h.step("b", r)
				if d := h.takeDone(); len(d) != 1 || d[0].Outcome != OK {
					t.Fatalf("answer to %s: %+v", req.Op.Key, d)
				}
			}
			// notice sends the stable notice of req from the member at
			// position.
			notice := func(req *wire.ClientRequest, sn wire.SN, from wire.NodeID, position int) {
				t.Helper()
				r := reply(req, wire.ErrNone, wire.Result{SN: sn})
				r.Epoch, r.Position, r.Stable = 1, position, true
				h.step(from, r)
			}

			x := write("x")
			answer(x, 3)
			if req := write("y"); req.Op.Kind != wire.OpWaitStable || req.Op.Key != "x" {
				t.Fatalf("before any notice, the write of y sent %v of %s; want a wait for x", req.Op.Kind, req.Op.Key)
			} else {
				r := reply(req, wire.ErrNone, wire.Result{SN: 3})
				r.Epoch, r.Stable = 1, true
				h.step(tc.asked, r)
			}
			_, y := h.onlyRequest()
			answer(y, 4)
			var zReq *wire.ClientRequest
			if tc.sites == nil {
				notice(y, 4, "c", 2) // the tail's: every member may not know
				if f := h.core.floors[0]; f.committed != 4 || f.everywhere >= 4 {
					t.Fatalf("after the tail's stable answer the floor is %+v; want committed 4, not everywhere", f)
				}
			}
			notice(y, 4, tc.notifier, tc.position)
			if f := h.core.floors[0]; tc.sites == nil && f.everywhere != 4 {
				t.Fatalf("after the head's notice the floor is %+v; want 4 everywhere", f)
			}
			if zReq = write("z"); zReq.Op.Kind != wire.OpPut {
				t.Fatalf("after y's notice, the write of z sent %v of %s; want the put", zReq.Op.Kind, zReq.Op.Key)
			}

			// z answered, unstable: the next write holds its wait back
			// until z's notice comes.
			answer(zReq, 5)
			h.start(put("w"), CallOptions{})
			if sent := h.takeSent(); len(sent) != 0 {
				t.Fatalf("the write of w sent %v; want its wait for z held for the notice", sent)
			}
			notice(zReq, 5, tc.notifier, tc.position)
			_, w := h.onlyRequest()
			if w.Op.Kind != wire.OpPut || w.Op.Key != "w" {
				t.Fatalf("after z's notice sent %v of %s; want the put of w", w.Op.Kind, w.Op.Key)
			}

			// No notice: the held wait is asked for after the attempt
			// timeout.
			answer(w, 6)
			h.start(put("v"), CallOptions{})
			if sent := h.takeSent(); len(sent) != 0 {
				t.Fatalf("the write of v sent %v; want its wait held", sent)
			}
			h.tickAt(h.now + h.core.opts.AttemptTimeout)
			var to wire.NodeID
			req := &wire.ClientRequest{}
			for _, e := range h.takeSent() {
				if r, ok := e.Msg.(*wire.ClientRequest); ok {
					to, req = e.To, r
				}
			}
			if req.Op.Kind != wire.OpWaitStable || req.Op.Key != "w" || req.MinVersion != 6 || to != tc.asked {
				t.Fatalf("after the attempt timeout sent %v of %s@%d to %s; want a wait for w@6 at %s", req.Op.Kind, req.Op.Key, req.MinVersion, to, tc.asked)
			}
		})
	}
}
