package transport

import (
	"errors"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Emulated networks for tests and the emulated WAN between sites on one
// machine: a delay per link (SetLinkDelays) and partitions (SetCut).

// LinkDelay is an emulated wide-area link: every message to the peer
// leaves OneWay ± Jitter (uniform) after it was sent, and never before
// the message sent before it (FIFO holds; the chain protocol relies on
// it). This machine's kernel has no netem, so sites' WAN latency is
// injected here (docs/adr/0013-sites-and-geo-causal.md).
type LinkDelay struct {
	OneWay, Jitter time.Duration
}

// SetLinkDelays makes messages to each peer wait delay(peer) before they
// leave. It applies to connections opened afterwards; call it before the
// transport sends anything. delay must be safe for concurrent use.
func (t *Transport) SetLinkDelays(delay func(peer wire.NodeID) LinkDelay) {
	t.linkDelay.Store(&delay)
}

// errCut is why a peer this node is cut off from (SetCut) is unreachable.
var errCut = errors.New("cut off from this peer (an emulated network partition, SetCut)")

// cutRetry spaces the dial attempts to a peer this node is cut off from,
// so that the link comes back soon after the cut is lifted.
const cutRetry = 50 * time.Millisecond

// SetCut cuts this node off from the listening peers for which cut
// reports true, as a network partition would: their connections, dialed
// and accepted, are closed at once, dials to them fail and their
// connections are closed after the Hello, until SetCut(nil) lifts it.
// Messages queued for a cut peer wait in its queue as for any
// unreachable peer (the protocol learns of the gap from the PeerReset
// that follows the reconnection). Clients are never cut. It is a test
// hook (the emulated WAN between sites on one machine, cmd/catena
// -wan-peers and SIGUSR1/SIGUSR2, docs/operations.md "Sites"): set on
// one side only, it still cuts both directions. cut must be safe for
// concurrent use.
func (t *Transport) SetCut(cut func(peer wire.NodeID) bool) {
	if cut == nil {
		t.cut.Store(nil)
		return
	}
	t.cut.Store(&cut)
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.all {
		if t.isCut(c.peer) {
			c.breakLink()
		}
	}
}

// isCut reports whether this node is cut off from peer (SetCut).
func (t *Transport) isCut(peer wire.NodeID) bool {
	f := t.cut.Load()
	return f != nil && !strings.HasPrefix(string(peer), ClientPrefix) && (*f)(peer)
}

// breakLink closes the connection's current socket; a dialed peer's
// connection redials.
func (c *conn) breakLink() {
	c.mu.Lock()
	if c.nc != nil {
		c.nc.Close()
	}
	c.mu.Unlock()
}
