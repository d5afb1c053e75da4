// Package wiretest builds the messages tests of the chain core and its
// mode packages feed to replicas: configurations, runs of updates, and
// the SNs a replica forwarded. It imports only wire, so both the chain
// package's own tests and the mode packages' tests (through chaintest or
// directly) use the one copy. Only tests import it.
package wiretest

import (
	"fmt"

	"github.com/catena-kv/catena/internal/wire"
)

// Config returns the strong configuration of volume 0 in epoch: chain,
// and joining ("": none).
func Config(epoch wire.Epoch, joining wire.NodeID, chain ...wire.NodeID) wire.Config {
	return wire.Config{Volume: 0, Epoch: epoch, Chain: chain, Joining: joining}
}

// Updates returns updates first..last, each to key k<sn>.
func Updates(first, last wire.SN) []wire.Update {
	var out []wire.Update
	for sn := first; sn <= last; sn++ {
		out = append(out, wire.Update{SN: sn, Key: fmt.Sprint("k", sn), Changed: true, Value: []byte("v"),
			Client: 1, ReqNo: uint64(sn), AckedBelow: uint64(sn), ReplyTo: "client", Result: wire.Result{SN: sn}})
	}
	return out
}

// ForwardedSNs returns the SNs of the updates the Forwards in out carry
// to to.
func ForwardedSNs(out []wire.Envelope, to wire.NodeID) []wire.SN {
	var sns []wire.SN
	for _, e := range out {
		if f, ok := e.Msg.(*wire.Forward); ok && e.To == to {
			for _, u := range f.Updates {
				sns = append(sns, u.SN)
			}
		}
	}
	return sns
}
