package chain

import (
	"maps"
	"slices"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// sessionTable records the outcome of every update per client, so that a
// retried update is answered from the record instead of applied twice.
//
// It is part of the replicated state: every replica updates it when it
// applies an update, in SN order, so every replica holds the same table
// and a new head answers retries of updates its predecessor sequenced.
//
// Memory is bounded two ways. Per client, outcomes are kept only for
// requests at or above the client's AckedBelow (the client has seen the
// replies below it), and the head refuses an update numbered
// outcomesPerClientMax or more above it. Across clients, at most
// sessionsMax sessions are kept; adding one more evicts the session that
// applied nothing for longest (smallest LastSN, then smallest ClientID), a
// deterministic choice so every replica evicts the same one. A request from
// an evicted client that expects its session gets ErrSessionExpired.
//
// Every change is written through to the store, so the table survives a
// restart; the map is the in-memory copy the head consults.
type sessionTable struct {
	sessions             map[wire.ClientID]*session
	sessionsMax          int
	outcomesPerClientMax int
	store                storage.Store
}

type session struct {
	ackedBelow uint64
	lastSN     wire.SN
	outcomes   map[uint64]wire.Result
}

func newSessionTable(sessionsMax, outcomesPerClientMax int, store storage.Store) sessionTable {
	return sessionTable{
		sessions:             map[wire.ClientID]*session{},
		sessionsMax:          sessionsMax,
		outcomesPerClientMax: outcomesPerClientMax,
		store:                store,
	}
}

// admission says what the head does with an update request.
type admission int

const (
	admitNew      admission = iota // sequence it
	admitRecorded                  // already executed: answer from the record
	admitExpired                   // outcome forgotten: ErrSessionExpired
	admitTooMany                   // ErrTooManyInFlight
)

// admit decides how the head treats an update request. On admitRecorded it
// also returns the recorded result.
func (t *sessionTable) admit(req *wire.ClientRequest) (admission, wire.Result) {
	s := t.sessions[req.Client]
	if s == nil {
		if req.ExpectSession {
			return admitExpired, wire.Result{}
		}
		if req.ReqNo >= req.AckedBelow+uint64(t.outcomesPerClientMax) {
			return admitTooMany, wire.Result{}
		}
		return admitNew, wire.Result{}
	}
	if result, ok := s.outcomes[req.ReqNo]; ok {
		return admitRecorded, result
	}
	if req.ReqNo < s.ackedBelow {
		return admitExpired, wire.Result{}
	}
	if req.ReqNo >= max(s.ackedBelow, req.AckedBelow)+uint64(t.outcomesPerClientMax) {
		return admitTooMany, wire.Result{}
	}
	return admitNew, wire.Result{}
}

// record stores the outcome of an applied update. Every replica calls it
// for every update, in SN order.
func (t *sessionTable) record(u *wire.Update) {
	s := t.sessions[u.Client]
	if s == nil {
		if len(t.sessions) >= t.sessionsMax {
			t.evictOldest()
		}
		s = &session{outcomes: map[uint64]wire.Result{}}
		t.sessions[u.Client] = s
	}
	s.lastSN = u.SN
	if u.AckedBelow > s.ackedBelow {
		s.ackedBelow = u.AckedBelow
		// The table knows which outcomes exist: delete just those, with
		// blind deletes (a range scan per update costs more than the rest
		// of the update in Pebble).
		for reqNo := range s.outcomes {
			if reqNo < s.ackedBelow {
				delete(s.outcomes, reqNo)
				t.store.DeleteOutcome(u.Client, reqNo)
			}
		}
	}
	t.store.SetSession(u.Client, s.ackedBelow, s.lastSN)
	if u.ReqNo >= s.ackedBelow {
		s.outcomes[u.ReqNo] = u.Result
		t.store.SetOutcome(u.Client, u.ReqNo, u.Result)
	}
	// INVARIANT: outcomes per client stay bounded (the head admits no
	// request beyond the window, and the window only moves up).
	if len(s.outcomes) > t.outcomesPerClientMax {
		panic("INVARIANT session outcomes: more outcomes than outcomesPerClientMax")
	}
}

// forget drops the outcome of client's request reqNo if it is the one
// stamped s (an update the other sites gave up: internal/chain/hierarchical/rejoin.go).
func (t *sessionTable) forget(client wire.ClientID, reqNo uint64, s wire.Stamp) {
	if sess := t.sessions[client]; sess != nil {
		if result, ok := sess.outcomes[reqNo]; ok && result.Stamp == s {
			delete(sess.outcomes, reqNo)
			t.store.DeleteOutcome(client, reqNo)
		}
	}
}

func (t *sessionTable) evictOldest() {
	var victim wire.ClientID
	var victimSN wire.SN
	found := false
	for id, s := range t.sessions {
		if !found || s.lastSN < victimSN || (s.lastSN == victimSN && id < victim) {
			victim, victimSN, found = id, s.lastSN, true
		}
	}
	delete(t.sessions, victim)
	t.store.DeleteSession(victim)
}

// export returns the table as snapshot records, ordered by client.
func (t *sessionTable) export() []wire.SessionRecord {
	ids := slices.Sorted(maps.Keys(t.sessions))
	out := make([]wire.SessionRecord, 0, len(ids))
	for _, id := range ids {
		s := t.sessions[id]
		rec := wire.SessionRecord{Client: id, AckedBelow: s.ackedBelow, LastSN: s.lastSN}
		for _, reqNo := range slices.Sorted(maps.Keys(s.outcomes)) {
			rec.Outcomes = append(rec.Outcomes, wire.Outcome{ReqNo: reqNo, Result: s.outcomes[reqNo]})
		}
		out = append(out, rec)
	}
	return out
}

// install adds snapshot records to the table and the store.
func (t *sessionTable) install(records []wire.SessionRecord) {
	t.load(records)
	for _, rec := range records {
		t.store.SetSession(rec.Client, rec.AckedBelow, rec.LastSN)
		for _, o := range rec.Outcomes {
			t.store.SetOutcome(rec.Client, o.ReqNo, o.Result)
		}
	}
}

// load fills the in-memory table from records (as stored on disk).
func (t *sessionTable) load(records []wire.SessionRecord) {
	for _, rec := range records {
		s := &session{ackedBelow: rec.AckedBelow, lastSN: rec.LastSN, outcomes: map[uint64]wire.Result{}}
		for _, o := range rec.Outcomes {
			s.outcomes[o.ReqNo] = o.Result
		}
		t.sessions[rec.Client] = s
	}
}

// reset empties the in-memory table; the caller resets the store.
func (t *sessionTable) reset() { clear(t.sessions) }
