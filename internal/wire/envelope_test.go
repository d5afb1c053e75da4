package wire

import (
	"slices"
	"testing"
)

// SendEarly sends an Early message at once unless a waiting message to
// the same destination precedes it, and keeps each destination's order.
func TestSendEarly(t *testing.T) {
	early := func(to NodeID, sn SN) Envelope { return Envelope{To: to, Msg: &Durable{SN: sn}, Early: true} }
	late := func(to NodeID, sn SN) Envelope { return Envelope{To: to, Msg: &Durable{SN: sn}} }
	for _, tc := range []struct {
		name           string
		waiting, out   []Envelope
		sent, nowWaits []SN
	}{
		{"nothing early", nil, []Envelope{late("b", 1), late("c", 2)}, nil, []SN{1, 2}},
		{"early alone", nil, []Envelope{early("b", 1), early("b", 2)}, []SN{1, 2}, nil},
		{"early after a late one to the same node waits",
			nil, []Envelope{early("b", 1), late("b", 2), early("b", 3), early("c", 4)}, []SN{1, 4}, []SN{2, 3}},
		{"a message already waiting blocks its destination",
			[]Envelope{late("b", 1)}, []Envelope{early("b", 2), early("c", 3)}, []SN{3}, []SN{1, 2}},
	} {
		var sent []SN
		waits := SendEarly(tc.waiting, tc.out, func(e Envelope) { sent = append(sent, e.Msg.(*Durable).SN) })
		var waitSNs []SN
		for _, e := range waits {
			waitSNs = append(waitSNs, e.Msg.(*Durable).SN)
		}
		if !slices.Equal(sent, tc.sent) || !slices.Equal(waitSNs, tc.nowWaits) {
			t.Errorf("%s: sent %v, waiting %v; want sent %v, waiting %v", tc.name, sent, waitSNs, tc.sent, tc.nowWaits)
		}
	}
}
