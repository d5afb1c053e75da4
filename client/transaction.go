package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Item is one value a GetTransaction read.
type Item struct {
	Key   string
	Value []byte
	Found bool
}

// ErrContention is returned by GetTransaction when its keys were written
// so often that no two rounds of reads agreed: the servers answered, but
// no snapshot came of it (retry, or read fewer or quieter keys). It is
// not ErrUnavailable.
var ErrContention = errors.New("catena: contention")

// GetTransaction reads keys of causal keyspaces as one causally
// consistent snapshot (ChainReaction's GET-TRANSACTION): no value
// returned is older, in causal order, than a write in the causal past of
// another value returned, and none is older than what this session has
// seen. It reads every key in rounds until two rounds in a row agree
// (docs/adr/0013-sites-and-geo-causal.md). Items come in the order of
// keys.
func (c *Client) GetTransaction(ctx context.Context, keys ...string) ([]Item, error) {
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		call.Consistency, call.User = clientcore.Consistency(c.opts.Consistency), userOf(ctx)
		return c.core.StartTransaction(now, keys, call)
	})
	if err != nil {
		return nil, err
	}
	return txnItems(keys, d)
}

// txnItems turns a finished GET-TRANSACTION into what GetTransaction
// returns.
func txnItems(keys []string, d clientcore.Done) ([]Item, error) {
	switch {
	case d.Outcome == clientcore.OK && d.Txn != nil:
		items := make([]Item, len(keys))
		for i, r := range d.Txn.Results {
			items[i] = Item{Key: keys[i], Value: r.Value, Found: r.Found}
		}
		return items, nil
	case d.Outcome == clientcore.Invalid:
		return nil, fmt.Errorf("%w: %w", ErrInvalid, d.Err)
	case d.Outcome == clientcore.Refused:
		return nil, refusedError(d.Err)
	case errors.Is(d.Err, clientcore.ErrContention):
		return nil, fmt.Errorf("%w: %w (%d rounds of reads)", ErrContention, d.Err, d.Attempts)
	}
	cause := d.Err
	if errors.Is(cause, clientcore.ErrDeadline) {
		cause = context.DeadlineExceeded
	}
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// CausalPast is what a session has seen of keyspaces replicated by
// several sites: take it to a client of another site (Options.After),
// which then waits, before its first operation, until all of it is
// stable there, so the session reads its own writes and never goes back
// in time when it moves (docs/adr/0013-sites-and-geo-causal.md).
type CausalPast struct {
	deps []wire.Dep
	ts   uint64
}

// CausalPast returns the session's causal past across sites.
func (c *Client) CausalPast() CausalPast {
	c.mu.Lock()
	defer c.mu.Unlock()
	deps, ts := c.core.CausalPast()
	return CausalPast{deps: deps, ts: ts}
}

// Len is the number of dependencies the causal past holds.
func (p CausalPast) Len() int { return len(p.deps) }

// WaitFor moves a session's causal past from a client of another site
// (CausalPast there) to this client, and returns once all of it, and
// any past given to Dial (Options.After) still arriving, is stable at
// this client's site: from then on the session reads its own writes
// here. Operations started meanwhile wait for it too. If the context
// ends first, the error (ErrUnavailable) says which update of which
// site this site has not yet received.
func (c *Client) WaitFor(ctx context.Context, past CausalPast) error {
	if past.Len() > 0 && ctx.Err() == nil {
		c.learnSites()
	}
	d, err := c.run(ctx, func(now wire.Time, call clientcore.CallOptions) clientcore.OpID {
		return c.core.StartMove(now, past.deps, past.ts, call)
	})
	if err != nil {
		return err
	}
	_, err = result(d)
	return err
}

// learnSites asks the masters for the status, without waiting, so that
// a session move that fails can name the sites (Client.sites).
func (c *Client) learnSites() {
	c.mu.Lock()
	masters := c.core.Masters()
	c.mu.Unlock()
	for _, m := range masters {
		c.tr.Send(wire.Envelope{To: m, Msg: &wire.StatusRequest{}})
	}
}

// explainMove completes the *clientcore.MoveError of an operation held
// for a session's arriving past: the sites' names, as the last status
// gave them, and the context's error for the core's deadline.
func (c *Client) explainMove(d clientcore.Done) clientcore.Done {
	var me *clientcore.MoveError
	if !errors.As(d.Err, &me) {
		return d
	}
	e := *me
	if errors.Is(e.Cause, clientcore.ErrDeadline) {
		e.Cause = context.DeadlineExceeded
	}
	c.mu.Lock()
	st := c.sites
	c.mu.Unlock()
	e.Here = "the site of master " + c.master
	if st != nil && st.Site != 0 {
		e.Sites = map[wire.SiteID]string{}
		for _, s := range st.Sites {
			e.Sites[s.ID] = fmt.Sprintf("site %d (%s)", s.ID, s.Name)
		}
		e.Here = cmp.Or(e.Sites[st.Site], fmt.Sprintf("site %d", st.Site))
	}
	d.Err = &e
	return d
}
