package clientcore

import (
	"errors"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// A GET-TRANSACTION whose rounds of reads never agree gives up after
// TxnRoundsMax rounds with ErrContention (not a deadline): the servers
// answered every read; the key kept changing.
func TestTransactionGivesUpWithContention(t *testing.T) {
	h := newHarness(t, Options{Configs: []wire.Config{geoChain}, TxnRoundsMax: 3})
	id := h.core.StartTransaction(h.now, []string{"k"}, CallOptions{Deadline: 10 * wire.Second})
	h.collect()
	for round := uint64(1); round <= 3; round++ {
		_, req := h.onlyRequest()
		// Each round reads a newer version: no two agree.
		h.step("a", reply(req, wire.ErrNone, wire.Result{Status: wire.StatusOK, Found: true, Stamp: wire.Stamp{Origin: 1, N: round, TS: round}}))
	}
	d := h.takeDone()
	if len(d) != 1 || d[0].ID != id || !errors.Is(d[0].Err, ErrContention) || d[0].Attempts != 3 || d[0].Txn != nil {
		t.Fatalf("done %+v; want the transaction ended by ErrContention after 3 rounds", d)
	}
	if len(h.takeSent()) != 0 || h.core.Pending() != 0 {
		t.Fatalf("the transaction left work behind")
	}
}

// Cancel ends a GET-TRANSACTION under way, as it does an operation: the
// caller's context ended, so it finishes Unavailable with the cause, and
// its round's reads go with it.
func TestCancelEndsATransaction(t *testing.T) {
	h := newHarness(t, Options{Configs: []wire.Config{geoChain}})
	id := h.core.StartTransaction(h.now, []string{"k"}, CallOptions{Deadline: 10 * wire.Second})
	h.collect()
	h.onlyRequest()
	cause := errors.New("context canceled")
	h.core.Cancel(h.now, id, cause)
	h.collect()
	d := h.takeDone()
	if len(d) != 1 || d[0].ID != id || d[0].Outcome != Unavailable || !errors.Is(d[0].Err, cause) {
		t.Fatalf("done %+v; want the transaction ended Unavailable by the cause", d)
	}
	if h.core.Pending() != 0 {
		t.Fatalf("%d operations left after the transaction was cancelled", h.core.Pending())
	}
}
