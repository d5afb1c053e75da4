package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Hierarchical replication control across sites (the NFSv4 paper, Zhang
// and Honeyman; docs/adr/0016-hierarchical-replication-control.md): the
// sites of a keyspace elect a primary site per key (shallow control) or
// per key prefix (deep control) by a one-round majority election, and the
// primary orders the writes under it. These are the election's messages
// between sites; internal/control holds the protocol.

// Ballot identifies one election attempt of a site: its site and a
// number the site never reuses (it survives restarts). A vote, an abort
// and a release name the ballot they belong to, so a late abort or
// release never undoes a newer election (NOTES B3.1). Ballots are ordered
// by N, then Site.
type Ballot struct {
	N    uint64
	Site SiteID
}

// IsZero reports whether b names no election.
func (b Ballot) IsZero() bool { return b == Ballot{} }

// Less reports whether b orders before o.
func (b Ballot) Less(o Ballot) bool {
	if b.N != o.N {
		return b.N < o.N
	}
	return b.Site < o.Site
}

func (b Ballot) String() string { return fmt.Sprintf("%d.%d", b.Site, b.N) }

// ControlKind names a control message.
type ControlKind uint8

// The control messages of Fig. 1 of the paper, with deep control (Fig. 2,
// §3.1) and revoke (§3.3).
const (
	// ControlPropose asks the receiver to acknowledge the sender as
	// primary of Path (deep: of every key under the prefix Path). On
	// ViewPath it is Paxos's prepare (phase 1) for view number View.N,
	// with View the sender's own proposal.
	ControlPropose ControlKind = iota + 1
	// ControlVote answers a Propose: Granted, or refused with the
	// holder the receiver acknowledged instead (Holder, HolderBallot;
	// zero for a refused deep request, which conflicts with a
	// descendant). On ViewPath: Granted is a promise, carrying the
	// ballot and view the receiver accepted for the number (HolderBallot,
	// View; HolderBallot zero if none); refused, it names the receiver's
	// promise (Holder, HolderBallot).
	ControlVote
	// ControlAbort withdraws the sender's election of Ballot: a site that
	// acknowledged that ballot forgets it.
	ControlAbort
	// ControlRelease ends the sender's control of Path won by Ballot:
	// every site had every update under it when it was sent.
	ControlRelease
	// ControlRevoke asks the holder of deep control of Path to release it
	// soon: the sender has a write under it (§3.3, revoke).
	ControlRevoke
	// ControlView carries a decided active view (View): its receiver
	// adopts it if its number is larger than its own view's. A change of
	// view is single-decree Paxos per view number on ViewPath: Propose and
	// Vote (phase 1), Accept and Accepted (phase 2).
	ControlView
	// ControlJoin asks a member to add the sender, which is outside the
	// active view and has been resynchronised, to the view (§2.3,
	// recovery). The one message a member accepts from outside its view.
	ControlJoin
	// ControlJoined is the handshake of a site just added to the view:
	// not Granted, it asks a member whether the sender has acknowledged
	// every control the member holds or is electing; Granted, the
	// member's yes.
	ControlJoined
	// ControlAccept is Paxos's accept request (phase 2) of a view change:
	// the receiver accepts view View with Ballot unless it promised a
	// higher ballot for View.N.
	ControlAccept
	// ControlAccepted answers an Accept: Granted, or refused naming the
	// receiver's promise (Holder, HolderBallot).
	ControlAccepted
	// ControlLease asks a member for a lease on the sender's membership
	// of the active view (on ViewPath; Ballot.N names the request: the
	// sender's clock when it sent it). ControlLeased answers it: Granted
	// if the sender is in the receiver's view, which then accepts no view
	// without the sender until the lease has run out (ADR 16: a site
	// reads its own copy only while a majority granted it lately).
	ControlLease
	ControlLeased
	// ControlCheck asks the site of Ballot whether its election or
	// control of Path by Ballot still stands: the sender holds a vote for
	// it and refused another proposer for it. The site answers with a
	// Release of Ballot when it does not (the Abort or Release that
	// ended it may not have reached the sender), and not at all when it
	// does.
	ControlCheck
)

// IsViewKind reports whether k is a message of the active view (a view
// change, the join handshake, membership leases) whatever its path.
func (k ControlKind) IsViewKind() bool { return k >= ControlView && k <= ControlLeased }

var controlNames = map[ControlKind]string{
	ControlPropose: "propose", ControlVote: "vote", ControlAbort: "abort",
	ControlRelease: "release", ControlRevoke: "revoke", ControlView: "view",
	ControlJoin: "join", ControlJoined: "joined", ControlAccept: "accept", ControlAccepted: "accepted",
	ControlLease: "lease", ControlLeased: "leased", ControlCheck: "check",
}

func (k ControlKind) String() string {
	if s, ok := controlNames[k]; ok {
		return s
	}
	return fmt.Sprintf("control(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k ControlKind) Valid() bool { _, ok := controlNames[k]; return ok }

// ViewPath is the reserved path of view changes: not a valid key path
// (CheckPath refuses it), so it conflicts with no key's control.
const ViewPath = "/view"

// ReservedKeyPrefix starts the keys servers keep their own state under in
// a volume's store (a hierarchical volume's control records,
// control.RecordPrefix): no client operation may name such a key
// (kv.Validate refuses it).
const ReservedKeyPrefix = "\x00"

// View is an active view of a keyspace's sites (§2.3): a number, larger
// for every change, and the members, in increasing order. The initial
// view, number 0, is every configured site; messages carry a view only
// when its number is not 0.
type View struct {
	N       uint64
	Members []SiteID
}

// IsZero reports whether v carries no view.
func (v View) IsZero() bool { return v.N == 0 && len(v.Members) == 0 }

// Has reports whether s is a member of v.
func (v View) Has(s SiteID) bool {
	for _, m := range v.Members {
		if m == s {
			return true
		}
	}
	return false
}

func (v View) String() string { return fmt.Sprintf("view %d %v", v.N, v.Members) }

// PathSeparator separates the segments of a key path: a prefix ending in
// it names a directory, whose keys a site may control together.
const PathSeparator = "/"

// Path errors.
var (
	ErrEmptyPath        = errors.New("empty key path")
	ErrEmptyPathSegment = errors.New("key path has an empty segment (a leading, doubled or misplaced '/')")
)

// CheckPath checks that p is a key path (segments separated by "/",
// none empty) or, when it ends in "/", a prefix of one. The empty path
// is the root prefix, which check accepts only for prefixes (allowRoot).
func CheckPath(p string, allowRoot bool) error {
	if p == "" {
		if allowRoot {
			return nil
		}
		return ErrEmptyPath
	}
	body := strings.TrimSuffix(p, PathSeparator)
	if body == "" {
		return fmt.Errorf("%w: %q", ErrEmptyPathSegment, p)
	}
	for _, seg := range strings.Split(body, PathSeparator) {
		if seg == "" {
			return fmt.Errorf("%w: %q", ErrEmptyPathSegment, p)
		}
	}
	return nil
}

// IsPrefixPath reports whether p names a prefix (a directory): the root
// "" or a path ending in "/".
func IsPrefixPath(p string) bool { return p == "" || strings.HasSuffix(p, PathSeparator) }

// Ancestors returns the prefixes strictly above p, nearest first, the
// root "" last: "a/b/c" → "a/b/", "a/", ""; "a/b/" → "a/", "".
func Ancestors(p string) []string {
	var out []string
	body := strings.TrimSuffix(p, PathSeparator)
	for p != "" {
		i := strings.LastIndex(body, PathSeparator)
		if i < 0 {
			out = append(out, "")
			break
		}
		body = body[:i]
		out = append(out, body+PathSeparator)
	}
	return out
}

// PathDepth is the number of segments of p: 0 for the root, 2 for
// "a/b" and for "a/b/".
func PathDepth(p string) int {
	body := strings.TrimSuffix(p, PathSeparator)
	if body == "" {
		return 0
	}
	return strings.Count(body, PathSeparator) + 1
}
