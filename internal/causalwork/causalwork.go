// Package causalwork is a causal+ workload for tests of real processes
// (the kill and site tests of internal/integration, catena-lab torture):
// client sessions that write unique values and read a few keys of a
// causal keyspace, the history they record, and its checks — causal+
// (check.CausalConvergence), convergence of the final reads, and no lost
// acknowledged write.
package causalwork

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// Session is one client working sequentially. Its history is cut into
// segments, each a session of the checker: a write whose outcome is
// unknown may still be applied after the client's next operations, so
// it ends its segment (check.CausalConvergence takes it as the last
// operation of its session) and the client goes on in a new one.
type Session struct {
	cl      *client.Client
	timeout time.Duration
	segment int
}

// Client returns the session's client.
func (s *Session) Client() *client.Client { return s.cl }

// Workload records the history of its sessions.
type Workload struct {
	start    time.Time
	sessions []*Session
	acked    atomic.Int64
	segments atomic.Int64

	mu      sync.Mutex
	history []check.Operation
	// problems are answers that mean the cluster lost something (a read
	// refused because no member holds a version the client saw).
	problems []string
	// final holds the final reads, per key.
	final map[string][]check.Operation
}

// New returns a workload whose times count from start.
func New(start time.Time) *Workload {
	return &Workload{start: start, final: map[string][]check.Operation{}}
}

// NewSession adds a session of cl whose operations give up after
// timeout (then a write's outcome is unknown).
func (w *Workload) NewSession(cl *client.Client, timeout time.Duration) *Session {
	s := &Session{cl: cl, timeout: timeout, segment: int(w.segments.Add(1))}
	w.mu.Lock()
	w.sessions = append(w.sessions, s)
	w.mu.Unlock()
	return s
}

func (w *Workload) now() int64 { return int64(time.Since(w.start)) }

// Put writes a value, which must be unique, and records the write. It
// reports whether the write was acknowledged.
func (w *Workload) Put(s *Session, key, value string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rec := check.Operation{Client: s.segment, Op: wire.Op{Kind: wire.OpPut, Key: key, Value: []byte(value)}, Call: w.now()}
	err := s.cl.Put(ctx, key, rec.Op.Value)
	rec.Return = w.now()
	switch {
	case err == nil:
		rec.Result.Found = true
		w.acked.Add(1)
	case errors.Is(err, client.ErrUnavailable):
		return false // never sent: not applied
	case errors.Is(err, client.ErrAmbiguous):
		rec.Unknown = true
	default:
		rec.Unknown = true
		w.problem("put %s=%s: %v", key, value, err)
	}
	w.record(rec)
	if rec.Unknown {
		s.segment = int(w.segments.Add(1))
	}
	return err == nil
}

// Get reads a key and records the read; a final read (made once every
// chain is quiet) is also kept for the convergence check, and waits up to
// timeout rather than the session's.
func (w *Workload) Get(s *Session, key string, final bool, timeout time.Duration) error {
	if !final {
		timeout = s.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec := check.Operation{Client: s.segment, Op: wire.Op{Kind: wire.OpGet, Key: key}, Call: w.now()}
	value, found, err := s.cl.Get(ctx, key)
	rec.Return = w.now()
	switch {
	case err == nil:
		rec.Result.Value, rec.Result.Found = value, found
	case errors.Is(err, client.ErrUnavailable):
		return err // no outcome: a read that never happened
	default:
		// ErrInvalid here is ErrUnknownVersion: no member holds a version
		// this client saw.
		w.problem("get %s in session %d: %v", key, s.segment, err)
		return err
	}
	w.record(rec)
	if final {
		w.mu.Lock()
		w.final[key] = append(w.final[key], rec)
		w.mu.Unlock()
	}
	return nil
}

// FinalReads has every session read every key, once every chain is
// quiet, each read retried until deadline. Every answer is then stable,
// so a session's metadata must be empty afterwards (it holds only
// unstable versions); one that is not is a problem. It returns the most
// keys with metadata each session held at once.
func (w *Workload) FinalReads(keys []string, deadline time.Time) ([]int, error) {
	var peaks []int
	for _, s := range w.Sessions() {
		for _, key := range keys {
			for {
				err := w.Get(s, key, true, max(time.Until(deadline), time.Millisecond))
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return peaks, fmt.Errorf("final read of %s in session %d: %w", key, s.segment, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		m := s.cl.CausalMetadata()
		if m.Entries != 0 {
			w.problem("session %d holds metadata for %d keys after reading every key from quiet chains", s.segment, m.Entries)
		}
		peaks = append(peaks, m.Peak)
	}
	return peaks, nil
}

func (w *Workload) record(rec check.Operation) {
	w.mu.Lock()
	w.history = append(w.history, rec)
	w.mu.Unlock()
}

func (w *Workload) problem(format string, args ...any) {
	w.mu.Lock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// Sessions returns the sessions.
func (w *Workload) Sessions() []*Session {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sessions)
}

// Acked returns the writes acknowledged so far.
func (w *Workload) Acked() int64 { return w.acked.Load() }

// Segments returns the checker's sessions so far (a session's segments).
func (w *Workload) Segments() int64 { return w.segments.Load() }

// Report is what a workload recorded, for its checks.
type Report struct {
	History  []check.Operation            `json:"history"`
	Final    map[string][]check.Operation `json:"final"`
	Problems []string                     `json:"problems"`
	Keys     []string                     `json:"keys"`
}

// Report returns a copy of what the workload recorded; keys are the keys
// its sessions used.
func (w *Workload) Report(keys []string) Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	final := map[string][]check.Operation{}
	for k, ops := range w.final {
		final[k] = slices.Clone(ops)
	}
	return Report{History: slices.Clone(w.history), Final: final, Problems: slices.Clone(w.problems), Keys: slices.Clone(keys)}
}

// Unknown counts the writes whose outcome is unknown.
func (r Report) Unknown() int {
	n := 0
	for _, op := range r.History {
		if op.Unknown {
			n++
		}
	}
	return n
}

// Findings checks a report: the answers that meant something was lost
// (problems), causal+ (check.CausalConvergence), convergence (every final
// read of a key, made once every chain was quiet, returns the same), and
// no lost acknowledged write (LostWrites). It returns what is wrong, nil
// if nothing.
func (r Report) Findings() []string {
	out := slices.Clone(r.Problems)
	if v := check.CausalConvergence(r.History); v != nil {
		out = append(out, v.Error())
	}
	for _, key := range r.Keys {
		reads := r.Final[key]
		if len(reads) == 0 {
			out = append(out, fmt.Sprintf("no final read of %s", key))
			continue
		}
		for _, rd := range reads[1:] {
			if rd.Result.Found != reads[0].Result.Found || string(rd.Result.Value) != string(reads[0].Result.Value) {
				out = append(out, fmt.Sprintf("no convergence on %s: session %d reads %s, session %d reads %s once every chain is quiet",
					key, reads[0].Client, describeRead(reads[0]), rd.Client, describeRead(rd)))
			}
		}
		out = append(out, LostWrites(r.History, key, reads[0])...)
	}
	return out
}

func describeRead(op check.Operation) string {
	if !op.Result.Found {
		return "⊥"
	}
	return fmt.Sprintf("%q", op.Result.Value)
}

// LostWrites checks the converged final value of key against every
// session's last acknowledged write to it: the final value must be that
// write or one its session made later, or another session's (a
// concurrent write may win). It returns a description of each
// acknowledged write the final value goes back on.
func LostWrites(history []check.Operation, key string, final check.Operation) []string {
	type write struct {
		session, pos int
		value        string
	}
	pos := map[int]int{} // per session, operations so far
	writer := map[string]write{}
	lastAcked := map[int]write{}
	for _, op := range history {
		pos[op.Client]++
		if op.Op.Kind != wire.OpPut || op.Op.Key != key {
			continue
		}
		wr := write{op.Client, pos[op.Client], string(op.Op.Value)}
		writer[wr.value] = wr
		if !op.Unknown {
			lastAcked[op.Client] = wr
		}
	}
	var out []string
	for _, s := range slices.Sorted(maps.Keys(lastAcked)) {
		a := lastAcked[s]
		if !final.Result.Found {
			out = append(out, fmt.Sprintf("lost write: %s=%q acknowledged in session %d, final value ⊥", key, a.value, s))
			continue
		}
		if w, ok := writer[string(final.Result.Value)]; ok && w.session == s && w.pos < a.pos {
			out = append(out, fmt.Sprintf("lost write: %s=%q acknowledged in session %d after its write of the final value %q",
				key, a.value, s, w.value))
		}
	}
	return out
}
