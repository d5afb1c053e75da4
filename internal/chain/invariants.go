package chain

import (
	"errors"
	"fmt"

	"github.com/catena-kv/catena/internal/mutation"
)

// protocolError records a message from a peer that contradicts the
// protocol. The message is dropped; the peer's retries or the master's
// next configuration repair the link. The simulator fails a run on any.
func (r *Replica) protocolError(format string, args ...any) {
	if len(r.protocolErrors) < 16 {
		r.protocolErrors = append(r.protocolErrors, fmt.Sprintf(format, args...))
	}
}

// ProtocolErrors returns and clears the recorded protocol errors.
func (r *Replica) ProtocolErrors() []string {
	errs := r.protocolErrors
	r.protocolErrors = nil
	return errs
}

// CheckInvariants verifies the replica's local invariants; the simulator
// calls it after every step, so it costs O(1) (Sent's SNs are consecutive
// by construction: sentList.append asserts it). CR §3's invariants across
// replicas are checked by the simulator (internal/check).
func (r *Replica) CheckInvariants() error {
	var errs []error
	for _, e := range r.protocolErrors {
		errs = append(errs, errors.New("protocol error: "+e))
	}
	return errors.Join(append(errs, r.checkState())...)
}

// checkState verifies the replica's local invariants: CheckInvariants
// without the protocol errors, which a peer's message caused (a server
// logs them: ProtocolErrors). O(1).
func (r *Replica) checkState() error {
	var errs []error
	if r.committed > r.applied {
		errs = append(errs, fmt.Errorf("%s: committed %d > applied %d", r.id, r.committed, r.applied))
	}
	if err := r.sent.check(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", r.id, err))
	}
	if r.sent.len() > 0 && r.sent.lastSN() != r.applied {
		errs = append(errs, fmt.Errorf("%s: Sent ends at %d, applied %d", r.id, r.sent.lastSN(), r.applied))
	}
	if err := r.recent.check(); err != nil {
		errs = append(errs, fmt.Errorf("%s: catch-up log: %w", r.id, err))
	}
	if r.recent.len() > 0 && r.recent.lastSN() != r.applied {
		errs = append(errs, fmt.Errorf("%s: catch-up log ends at %d, applied %d", r.id, r.recent.lastSN(), r.applied))
	}
	if r.role.isTail() && !r.hasJoiner() && r.sent.len() > 0 && (!r.pipelined() || r.sent.firstSN() <= r.committed) {
		errs = append(errs, fmt.Errorf("%s: tail without joiner holds updates %d to %d on Sent, committed %d", r.id, r.sent.firstSN(), r.sent.lastSN(), r.committed))
	}
	// INVARIANT durable answer (durable.go), this member's part; the
	// simulator checks the other members' disks.
	if r.pipelined() && r.role.isTail() && r.phase != phaseWedged && !(mutation.Enabled && r.mutations.TailAnswersBeforeDurable) && r.committed > r.durable {
		errs = append(errs, fmt.Errorf("%s: tail processed %d, its disk holds %d", r.id, r.committed, r.durable))
	}
	// Phases belong to roles.
	if r.phase == phaseHandoffPaused && !r.hasJoiner() {
		errs = append(errs, fmt.Errorf("%s: paused for hand-off as %s without a joining server", r.id, r.role))
	}
	if r.phase != phaseWedged && (r.upstream == predecessorNone) != (r.predecessor == "") {
		errs = append(errs, fmt.Errorf("%s: link from predecessor %q in state %d", r.id, r.predecessor, r.upstream))
	}
	// The lazy phase falls behind by a bounded amount (a member inside the
	// first K holds nothing back: forward sends at once).
	if held := r.heldBack(); held > 0 && (!r.forwardsLazily() || held >= r.limits.LazyBacklogMax) {
		errs = append(errs, fmt.Errorf("%s: %d applied updates held back from successor %s (lazy %v, bound %d)", r.id, held, r.successor, r.forwardsLazily(), r.limits.LazyBacklogMax))
	}
	if r.downstream == successorStreaming && r.successor == "" {
		errs = append(errs, fmt.Errorf("%s: streaming to no successor", r.id))
	}
	return errors.Join(errs...)
}
