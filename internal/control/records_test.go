package control

import (
	"errors"
	"reflect"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// Every kind of record comes back from its object as it went in, and a
// removal is a deletion of the same key.
func TestRecordObjectsRoundTrip(t *testing.T) {
	b1, b2 := wire.Ballot{N: 7, Site: 2}, wire.Ballot{N: 1 << 40, Site: 3}
	view := wire.View{N: 4, Members: []wire.SiteID{1, 3, 5}}
	for _, r := range []Record{
		{Kind: RecordVote, Path: "src/", Vote: &Vote{Holder: 2, Ballot: b1, Deep: true}},
		{Kind: RecordVote, Path: "src/main.c", Vote: &Vote{Holder: 3, Ballot: b2}},
		{Kind: RecordVote, Path: "", Vote: &Vote{Holder: 1, Ballot: b1, Deep: true}},
		{Kind: RecordNextBallot, NextBallot: 1<<63 + 5},
		{Kind: RecordView, View: view},
		{Kind: RecordView, View: wire.View{N: 9}},
		{Kind: RecordViewAcceptor, ViewAcceptor: &ViewAcceptor{N: 5, Promised: b2, Accepted: b1, View: view}},
	} {
		key, value := r.Object()
		if !IsRecordKey(key) || value == nil {
			t.Fatalf("%+v: key %q, value %v", r, key, value)
		}
		got, err := ParseRecord(key, value)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("%+v: parsed back as %+v, %v", r, got, err)
		}
	}
	for _, r := range []Record{{Kind: RecordVote, Path: "src/"}, {Kind: RecordViewAcceptor}} {
		key, value := r.Object()
		if value != nil || !IsRecordKey(key) {
			t.Errorf("removal %+v: key %q value %v", r, key, value)
		}
		if got, err := ParseRecord(key, nil); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("removal %+v: parsed back as %+v, %v", r, got, err)
		}
	}
	if key, _ := (Record{Kind: RecordVote, Path: "a"}).Object(); key == "a" || IsRecordKey("a") {
		t.Error("a vote's key is the path itself")
	}
}

// Bad objects are refused with ErrBadRecord.
func TestParseRecordRefusesBadObjects(t *testing.T) {
	voteKey, vote := Record{Kind: RecordVote, Path: "k", Vote: &Vote{Holder: 1}}.Object()
	viewKey, view := Record{Kind: RecordView, View: wire.View{N: 1, Members: []wire.SiteID{1, 2}}}.Object()
	accKey, acc := Record{Kind: RecordViewAcceptor, ViewAcceptor: &ViewAcceptor{N: 1}}.Object()
	deep := append([]byte(nil), vote...)
	deep[len(deep)-1] = 7
	for _, tc := range []struct {
		key   string
		value []byte
	}{
		{voteKey, vote[:len(vote)-1]}, {voteKey, deep}, {RecordPrefix + "ballot", []byte{1, 2}},
		{viewKey, view[:len(view)-1]}, {viewKey, append(view, 0)}, {accKey, acc[:10]},
		{RecordPrefix + "other", []byte{1}}, {"plain", vote}, {viewKey, nil}, {RecordPrefix + "ballot", nil},
	} {
		if _, err := ParseRecord(tc.key, tc.value); !errors.Is(err, ErrBadRecord) {
			t.Errorf("ParseRecord(%q, %v) = %v, want ErrBadRecord", tc.key, tc.value, err)
		}
	}
}
