package chain

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/storage"
	"github.com/catena-kv/catena/internal/wire"
)

// recordUpdate records an applied update of client at sn and returns the
// result it recorded.
func recordUpdate(tab *sessionTable, sn wire.SN, client wire.ClientID, reqNo, ackedBelow uint64) wire.Result {
	result := wire.Result{Status: wire.StatusOK, Found: true, Value: []byte{byte(reqNo)}, SN: sn}
	tab.record(&wire.Update{SN: sn, Key: "k", Changed: true, Client: client, ReqNo: reqNo, AckedBelow: ackedBelow, Result: result})
	return result
}

func outcomeReqNos(tab *sessionTable, client wire.ClientID) []uint64 {
	s := tab.sessions[client]
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.outcomes))
}

func TestSessionAdmitNewClient(t *testing.T) {
	tab := newSessionTable(4, 8, storage.NewMemory())
	verdict, result := tab.admit(&wire.ClientRequest{Client: 1, ReqNo: 1, AckedBelow: 1})
	if verdict != admitNew || !reflect.DeepEqual(result, wire.Result{}) {
		t.Errorf("admit = %v, %+v; want admitNew and a zero result", verdict, result)
	}
	// admit only decides: it creates no session.
	if len(tab.sessions) != 0 {
		t.Errorf("admit created %d sessions", len(tab.sessions))
	}
}

func TestSessionRetryAnsweredFromRecord(t *testing.T) {
	tab := newSessionTable(4, 8, storage.NewMemory())
	recorded := recordUpdate(&tab, 1, 7, 1, 1)

	verdict, result := tab.admit(&wire.ClientRequest{Client: 7, ReqNo: 1, AckedBelow: 1, ExpectSession: true})
	if verdict != admitRecorded {
		t.Fatalf("retry: admit = %v, want admitRecorded", verdict)
	}
	if !reflect.DeepEqual(result, recorded) {
		t.Errorf("retry: result = %+v, want %+v", result, recorded)
	}
	// The next request of the same client is new; another client is unaffected.
	if verdict, _ := tab.admit(&wire.ClientRequest{Client: 7, ReqNo: 2, AckedBelow: 1, ExpectSession: true}); verdict != admitNew {
		t.Errorf("next request: admit = %v, want admitNew", verdict)
	}
	if verdict, _ := tab.admit(&wire.ClientRequest{Client: 8, ReqNo: 1, AckedBelow: 1}); verdict != admitNew {
		t.Errorf("other client: admit = %v, want admitNew", verdict)
	}
}

func TestSessionAckedBelowPrunesOutcomes(t *testing.T) {
	tab := newSessionTable(4, 8, storage.NewMemory())
	recordUpdate(&tab, 1, 7, 1, 1)
	recordUpdate(&tab, 2, 7, 2, 1)
	recordUpdate(&tab, 3, 7, 3, 1)
	if got, want := outcomeReqNos(&tab, 7), []uint64{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("outcomes before the ack = %v, want %v", got, want)
	}
	// Request 4 tells the chain the client has seen the replies below 3.
	recordUpdate(&tab, 4, 7, 4, 3)
	if got, want := outcomeReqNos(&tab, 7), []uint64{3, 4}; !slices.Equal(got, want) {
		t.Errorf("outcomes after the ack = %v, want %v", got, want)
	}

	tests := []struct {
		reqNo uint64
		want  admission
	}{
		{1, admitExpired},
		{2, admitExpired},
		{3, admitRecorded},
		{4, admitRecorded},
		{5, admitNew},
	}
	for _, tt := range tests {
		if verdict, _ := tab.admit(&wire.ClientRequest{Client: 7, ReqNo: tt.reqNo, AckedBelow: 3, ExpectSession: true}); verdict != tt.want {
			t.Errorf("ReqNo %d: admit = %v, want %v", tt.reqNo, verdict, tt.want)
		}
	}

	// An update below the session's AckedBelow (a late one) records nothing.
	recordUpdate(&tab, 5, 7, 2, 1)
	if got, want := outcomeReqNos(&tab, 7), []uint64{3, 4}; !slices.Equal(got, want) {
		t.Errorf("outcomes after a stale update = %v, want %v", got, want)
	}
	if got := tab.sessions[7].ackedBelow; got != 3 {
		t.Errorf("ackedBelow = %d after a lower AckedBelow, want it to stay 3", got)
	}
}

func TestSessionAdmitTooMany(t *testing.T) {
	const window = 4
	tab := newSessionTable(4, window, storage.NewMemory())
	recordUpdate(&tab, 1, 7, 3, 3) // session of client 7 with ackedBelow 3

	tests := []struct {
		name   string
		client wire.ClientID
		reqNo  uint64
		acked  uint64
		want   admission
	}{
		{"new client last in window", 9, 1 + window - 1, 1, admitNew},
		{"new client beyond window", 9, 1 + window, 1, admitTooMany},
		{"new client window from its ack", 9, 10 + window - 1, 10, admitNew},
		{"new client beyond window from its ack", 9, 10 + window, 10, admitTooMany},
		{"session last in window", 7, 3 + window - 1, 3, admitNew},
		{"session beyond window", 7, 3 + window, 3, admitTooMany},
		// A stale AckedBelow in the request does not shrink the window...
		{"stale request ack", 7, 3 + window - 1, 1, admitNew},
		// ... and a newer one moves it up before the chain has recorded it.
		{"newer request ack in window", 7, 5 + window - 1, 5, admitNew},
		{"newer request ack beyond window", 7, 5 + window, 5, admitTooMany},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &wire.ClientRequest{Client: tt.client, ReqNo: tt.reqNo, AckedBelow: tt.acked, ExpectSession: tt.client == 7}
			if verdict, _ := tab.admit(req); verdict != tt.want {
				t.Errorf("admit(ReqNo %d, AckedBelow %d) = %v, want %v", tt.reqNo, tt.acked, verdict, tt.want)
			}
		})
	}
}

// The head never admits more than the window, so record treats a session
// over the window as a broken invariant.
func TestSessionRecordPanicsBeyondWindow(t *testing.T) {
	tab := newSessionTable(4, 2, storage.NewMemory())
	recordUpdate(&tab, 1, 7, 1, 1)
	recordUpdate(&tab, 2, 7, 2, 1)
	defer func() {
		if recover() == nil {
			t.Error("record of a third outcome in a window of 2 did not panic")
		}
	}()
	recordUpdate(&tab, 3, 7, 3, 1)
}

func TestSessionEviction(t *testing.T) {
	t.Run("smallest lastSN", func(t *testing.T) {
		tab := newSessionTable(2, 8, storage.NewMemory())
		recordUpdate(&tab, 1, 20, 1, 1)
		recordUpdate(&tab, 2, 10, 1, 1)
		recordUpdate(&tab, 3, 20, 2, 1) // client 20 applied last: client 10 is now oldest
		recordUpdate(&tab, 4, 30, 1, 1)
		if got, want := slices.Sorted(maps.Keys(tab.sessions)), []wire.ClientID{20, 30}; !slices.Equal(got, want) {
			t.Fatalf("sessions = %v, want %v", got, want)
		}
		assertEvicted(t, &tab, 10)
	})
	t.Run("tie broken by ClientID", func(t *testing.T) {
		tab := newSessionTable(2, 8, storage.NewMemory())
		tab.install([]wire.SessionRecord{{Client: 10, AckedBelow: 1, LastSN: 4}, {Client: 5, AckedBelow: 1, LastSN: 4}})
		recordUpdate(&tab, 5, 30, 1, 1)
		if got, want := slices.Sorted(maps.Keys(tab.sessions)), []wire.ClientID{10, 30}; !slices.Equal(got, want) {
			t.Fatalf("sessions = %v, want %v", got, want)
		}
		assertEvicted(t, &tab, 5)
	})
	t.Run("known client evicts nobody", func(t *testing.T) {
		tab := newSessionTable(2, 8, storage.NewMemory())
		recordUpdate(&tab, 1, 10, 1, 1)
		recordUpdate(&tab, 2, 20, 1, 1)
		recordUpdate(&tab, 3, 10, 2, 1)
		if got, want := slices.Sorted(maps.Keys(tab.sessions)), []wire.ClientID{10, 20}; !slices.Equal(got, want) {
			t.Fatalf("sessions = %v, want %v", got, want)
		}
	})
}

// assertEvicted checks how the head treats requests of an evicted client.
func assertEvicted(t *testing.T, tab *sessionTable, client wire.ClientID) {
	t.Helper()
	// Even its recorded request is forgotten: the outcome is unknown.
	if verdict, _ := tab.admit(&wire.ClientRequest{Client: client, ReqNo: 1, AckedBelow: 1, ExpectSession: true}); verdict != admitExpired {
		t.Errorf("evicted client %d expecting its session: admit = %v, want admitExpired", client, verdict)
	}
	if verdict, _ := tab.admit(&wire.ClientRequest{Client: client, ReqNo: 1, AckedBelow: 1, ExpectSession: false}); verdict != admitNew {
		t.Errorf("evicted client %d not expecting a session: admit = %v, want admitNew", client, verdict)
	}
}

func TestSessionExportInstallRoundTrip(t *testing.T) {
	tab := newSessionTable(4, 8, storage.NewMemory())
	recordUpdate(&tab, 1, 30, 1, 1)
	recordUpdate(&tab, 2, 10, 2, 1)
	recordUpdate(&tab, 3, 10, 1, 1)
	recordUpdate(&tab, 4, 20, 5, 5)
	recordUpdate(&tab, 5, 10, 3, 2) // prunes client 10's request 1

	exported := tab.export()
	result := func(sn wire.SN, reqNo uint64) wire.Result {
		return wire.Result{Status: wire.StatusOK, Found: true, Value: []byte{byte(reqNo)}, SN: sn}
	}
	want := []wire.SessionRecord{
		{Client: 10, AckedBelow: 2, LastSN: 5, Outcomes: []wire.Outcome{{ReqNo: 2, Result: result(2, 2)}, {ReqNo: 3, Result: result(5, 3)}}},
		{Client: 20, AckedBelow: 5, LastSN: 4, Outcomes: []wire.Outcome{{ReqNo: 5, Result: result(4, 5)}}},
		{Client: 30, AckedBelow: 1, LastSN: 1, Outcomes: []wire.Outcome{{ReqNo: 1, Result: result(1, 1)}}},
	}
	if !reflect.DeepEqual(exported, want) {
		t.Fatalf("export =\n%+v\nwant\n%+v", exported, want)
	}

	installed := newSessionTable(4, 8, storage.NewMemory())
	installed.install(exported)
	if got := installed.export(); !reflect.DeepEqual(got, exported) {
		t.Errorf("export after install =\n%+v\nwant\n%+v", got, exported)
	}
	// The installed table answers retries like the original.
	verdict, got := installed.admit(&wire.ClientRequest{Client: 10, ReqNo: 3, AckedBelow: 2, ExpectSession: true})
	if verdict != admitRecorded || !reflect.DeepEqual(got, result(5, 3)) {
		t.Errorf("retry on the installed table: admit = %v, %+v; want admitRecorded, %+v", verdict, got, result(5, 3))
	}
	if verdict, _ := installed.admit(&wire.ClientRequest{Client: 10, ReqNo: 1, AckedBelow: 2, ExpectSession: true}); verdict != admitExpired {
		t.Errorf("pruned request on the installed table: admit = %v, want admitExpired", verdict)
	}

	// An empty table exports an empty, non-nil list.
	empty := newSessionTable(4, 8, storage.NewMemory())
	if got := empty.export(); got == nil || len(got) != 0 {
		t.Errorf("export of an empty table = %#v, want an empty list", got)
	}
}

func TestSessionReset(t *testing.T) {
	tab := newSessionTable(4, 8, storage.NewMemory())
	recordUpdate(&tab, 1, 7, 1, 1)
	tab.reset()
	if len(tab.sessions) != 0 {
		t.Fatalf("reset left %d sessions", len(tab.sessions))
	}
	if verdict, _ := tab.admit(&wire.ClientRequest{Client: 7, ReqNo: 1, AckedBelow: 1, ExpectSession: true}); verdict != admitExpired {
		t.Errorf("after reset: admit = %v, want admitExpired", verdict)
	}
	// The table is still usable.
	recordUpdate(&tab, 2, 7, 2, 1)
	if got, want := outcomeReqNos(&tab, 7), []uint64{2}; !slices.Equal(got, want) {
		t.Errorf("outcomes after reset and record = %v, want %v", got, want)
	}
}
