package control

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// A host keeps a site's control records as objects of reserved keys in
// the control domain's own store (docs/adr/0016: a volume's chain carries
// them, so every member of the site's chain holds the site's votes and a
// new head restores its machine from its replica). One key per vote, one
// for the ballot counter, the view and the view acceptor state; a record
// that removes something deletes its key. Clients cannot name these keys
// (wire.ReservedKeyPrefix).

// RecordPrefix starts every key Record.Object returns.
const RecordPrefix = wire.ReservedKeyPrefix + "ctl/"

const (
	voteKeys     = RecordPrefix + "v/"
	ballotKey    = RecordPrefix + "ballot"
	viewKey      = RecordPrefix + "view"
	acceptorKey  = RecordPrefix + "acceptor"
	ballotBytes  = 8 + 4
	voteBytes    = 4 + ballotBytes + 1
	viewMinBytes = 8 + 4
)

// ErrBadRecord is wrapped by the errors of ParseRecord.
var ErrBadRecord = errors.New("control: bad record")

// IsRecordKey reports whether key is one Record.Object returns.
func IsRecordKey(key string) bool { return strings.HasPrefix(key, RecordPrefix) }

// Object returns the key the host stores r under and its value; a nil
// value deletes the key.
func (r Record) Object() (key string, value []byte) {
	switch r.Kind {
	case RecordVote:
		if r.Vote == nil {
			return voteKeys + r.Path, nil
		}
		b := binary.BigEndian.AppendUint32(nil, uint32(r.Vote.Holder))
		b = appendBallot(b, r.Vote.Ballot)
		deep := byte(0)
		if r.Vote.Deep {
			deep = 1
		}
		return voteKeys + r.Path, append(b, deep)
	case RecordNextBallot:
		return ballotKey, binary.BigEndian.AppendUint64(nil, r.NextBallot)
	case RecordView:
		return viewKey, appendView(nil, r.View)
	case RecordViewAcceptor:
		if r.ViewAcceptor == nil {
			return acceptorKey, nil
		}
		a := r.ViewAcceptor
		b := binary.BigEndian.AppendUint64(nil, a.N)
		b = appendBallot(b, a.Promised)
		b = appendBallot(b, a.Accepted)
		return acceptorKey, appendView(b, a.View)
	}
	panic(fmt.Sprintf("control: record of unknown kind %d", r.Kind))
}

// ParseRecord returns the record stored under key with value; a nil
// value is the removal Object returns for a vote or the acceptor state.
func ParseRecord(key string, value []byte) (Record, error) {
	bad := func(what string) (Record, error) {
		return Record{}, fmt.Errorf("%w: %q: %s", ErrBadRecord, key, what)
	}
	switch {
	case value == nil && strings.HasPrefix(key, voteKeys):
		return Record{Kind: RecordVote, Path: key[len(voteKeys):]}, nil
	case value == nil && key == acceptorKey:
		return Record{Kind: RecordViewAcceptor}, nil
	case value == nil:
		return bad("removed, but only votes and the acceptor state are")
	case strings.HasPrefix(key, voteKeys):
		if len(value) != voteBytes || value[voteBytes-1] > 1 {
			return bad(fmt.Sprintf("vote of %d bytes", len(value)))
		}
		v := &Vote{Holder: wire.SiteID(binary.BigEndian.Uint32(value)), Ballot: ballotAt(value[4:]), Deep: value[voteBytes-1] == 1}
		return Record{Kind: RecordVote, Path: key[len(voteKeys):], Vote: v}, nil
	case key == ballotKey:
		if len(value) != 8 {
			return bad(fmt.Sprintf("ballot counter of %d bytes", len(value)))
		}
		return Record{Kind: RecordNextBallot, NextBallot: binary.BigEndian.Uint64(value)}, nil
	case key == viewKey:
		v, rest, err := viewAt(value)
		if err != nil || len(rest) != 0 {
			return bad("view")
		}
		return Record{Kind: RecordView, View: v}, nil
	case key == acceptorKey:
		if len(value) < 8+2*ballotBytes {
			return bad(fmt.Sprintf("acceptor of %d bytes", len(value)))
		}
		a := &ViewAcceptor{N: binary.BigEndian.Uint64(value), Promised: ballotAt(value[8:]), Accepted: ballotAt(value[8+ballotBytes:])}
		v, rest, err := viewAt(value[8+2*ballotBytes:])
		if err != nil || len(rest) != 0 {
			return bad("acceptor's view")
		}
		a.View = v
		return Record{Kind: RecordViewAcceptor, ViewAcceptor: a}, nil
	}
	return bad("not a record key")
}

func appendBallot(b []byte, x wire.Ballot) []byte {
	b = binary.BigEndian.AppendUint64(b, x.N)
	return binary.BigEndian.AppendUint32(b, uint32(x.Site))
}

func ballotAt(b []byte) wire.Ballot {
	return wire.Ballot{N: binary.BigEndian.Uint64(b), Site: wire.SiteID(binary.BigEndian.Uint32(b[8:]))}
}

func appendView(b []byte, v wire.View) []byte {
	b = binary.BigEndian.AppendUint64(b, v.N)
	b = binary.BigEndian.AppendUint32(b, uint32(len(v.Members)))
	for _, s := range v.Members {
		b = binary.BigEndian.AppendUint32(b, uint32(s))
	}
	return b
}

func viewAt(b []byte) (wire.View, []byte, error) {
	if len(b) < viewMinBytes {
		return wire.View{}, nil, ErrBadRecord
	}
	v := wire.View{N: binary.BigEndian.Uint64(b)}
	n := binary.BigEndian.Uint32(b[8:])
	b = b[viewMinBytes:]
	if uint64(len(b)) < 4*uint64(n) {
		return wire.View{}, nil, ErrBadRecord
	}
	for range n {
		v.Members = append(v.Members, wire.SiteID(binary.BigEndian.Uint32(b)))
		b = b[4:]
	}
	return v, b, nil
}
