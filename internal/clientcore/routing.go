package clientcore

import "github.com/catena-kv/catena/internal/wire"

// Consistency says which replicas may answer a read. Updates always go to
// the member that sequences them. New levels (causal, bounded staleness)
// are new values here with their own rule in Routing.Query.
type Consistency uint8

const (
	// Strong reads are answered by the member that orders reads with
	// updates: the chain's tail (CR §2). Linearizable.
	Strong Consistency = iota
	// AnyMember reads go to a random member of the key's chain (CRAQ's
	// apportioned queries). A server that answers clean keys anywhere
	// (chain.ReadsCleanAtAnyMember) answers ErrDirty for a key with an
	// update in flight, and the core asks the Strong target instead: the
	// reads stay linearizable and spread over the chain.
	AnyMember
)

func (c Consistency) String() string {
	switch c {
	case Strong:
		return "strong"
	case AnyMember:
		return "any-member"
	}
	return "consistency(?)"
}

// Valid reports whether c is a known level.
func (c Consistency) Valid() bool { return c <= AnyMember }

// Routing says which member of a volume's configuration a request goes
// to. It is the protocol's half of routing; the core owns the rest
// (which volume, which configuration, what to do with the answer).
type Routing interface {
	// Update returns the member that sequences updates.
	Update(cfg wire.Config) wire.NodeID
	// Query returns the member a read at level c goes to; pick(n)
	// draws an index in [0, n) from the core's seeded source.
	Query(cfg wire.Config, c Consistency, pick func(n int) int) wire.NodeID
}

// ChainRouting is chain replication's routing (CR §2, CRAQ): updates at
// the head, Strong reads at the tail, AnyMember reads at a random member.
type ChainRouting struct{}

// Update returns the head.
func (ChainRouting) Update(cfg wire.Config) wire.NodeID { return cfg.Head() }

// Query returns the tail for Strong reads and a random member otherwise.
func (ChainRouting) Query(cfg wire.Config, c Consistency, pick func(n int) int) wire.NodeID {
	if c == Strong || len(cfg.Chain) == 0 {
		return cfg.Tail()
	}
	return cfg.Chain[pick(len(cfg.Chain))]
}
