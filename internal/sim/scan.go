package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/wire"
)

// Scans (Options.Scans). Clients of strong keyspaces also walk whole
// scans: every volume, a page of two keys at a time
// (clientcore.StartScan), each page read at its volume's tail. The run
// then checks Redis's SCAN promise against the history: a scan lists
// every key that existed for its whole duration, and no key no client
// ever created.

// scanPageKeys is how many keys a simulated scan page examines: few, so
// a walk takes many pages and reconfigurations fall between them.
const scanPageKeys = 2

// scanRecord is a whole scan a client walked: when its first page was
// asked for, when its last was answered, and what its pages listed.
type scanRecord struct {
	client    wire.NodeID
	call, ret wire.Time
	keys      []string
}

// scanWalk is a client's scan in progress: where it stands
// (clientcore.ScanCursor, as client.Scan walks), and what it listed.
type scanWalk struct {
	at   clientcore.ScanCursor
	call wire.Time
	keys []string
	page clientcore.OpID
}

// startScan begins a walk over every volume the core knows; false if it
// knows none yet.
func (c *client) startScan(now wire.Time) bool {
	at, ok := c.core.ScanStart()
	if !ok {
		return false
	}
	c.walk = &scanWalk{at: at, call: c.realTime()}
	c.askPage(now)
	return true
}

// askPage asks for the walk's next page.
func (c *client) askPage(now wire.Time) {
	w := c.walk
	w.page = c.core.StartScan(now, w.at.Volume, w.at.From, "", scanPageKeys, clientcore.CallOptions{Deadline: now + c.timeouts.giveUp})
}

// scanPage takes the answer to the walk's page: the walk goes on, ends
// (recorded), or is given up when the page was not answered.
func (c *client) scanPage(now wire.Time, d clientcore.Done) {
	w := c.walk
	if d.Outcome != clientcore.OK {
		c.walk = nil // not answered in time: a scan the client abandons
		return
	}
	page, err := wire.DecodeScanPage(d.Result.Value)
	if err != nil {
		c.failure(fmt.Sprintf("client %s: a scan page of volume %d: %v", c.id, w.at.Volume, err))
		c.walk = nil
		return
	}
	if c.core.ScanBehind(w.at.Volume, page) {
		// The volume split and this client has not heard: it learns
		// the keyspace list that names the new volume before it walks
		// on (as client.Scan does), asking the page again meanwhile.
		c.core.RequestConfig(now)
		c.askPage(now)
		return
	}
	for _, k := range page.Keys {
		if !strings.HasPrefix(k, expiryKeyPrefix) { // (checked by their own rule: expiry.go)
			w.keys = append(w.keys, k)
		}
	}
	w.at = c.core.ScanAdvance(w.at, page)
	if w.at.Done {
		*c.scans = append(*c.scans, scanRecord{client: c.id, call: w.call, ret: c.realTime(), keys: w.keys})
		c.walk = nil
		return
	}
	c.askPage(now)
}

// checkScans checks every scan walked against the history: it listed
// each key some write created before the scan began and no delete could
// have removed before it ended, and only keys some write created before
// it ended.
func checkScans(scans []scanRecord, history []check.Operation) error {
	created := map[string][]check.Operation{}
	deleted := map[string][]check.Operation{}
	for _, op := range history {
		switch {
		case op.Op.Kind == wire.OpDelete || op.Op.Kind == wire.OpHashDelete: // (the last field's delete deletes the key)
			deleted[op.Op.Key] = append(deleted[op.Op.Key], op)
		case createsKey(op):
			created[op.Op.Key] = append(created[op.Op.Key], op)
		}
	}
	for _, s := range scans {
		listed := map[string]bool{}
		for _, k := range s.keys {
			if listed[k] {
				return fmt.Errorf("scan by %s [%.3fs, %.3fs] listed %q twice", s.client, float64(s.call)/1e9, float64(s.ret)/1e9, k)
			}
			listed[k] = true
			if !slices.ContainsFunc(created[k], func(c check.Operation) bool { return wire.Time(c.Call) < s.ret }) {
				return fmt.Errorf("scan by %s [%.3fs, %.3fs] listed %q, which no write created before it ended", s.client, float64(s.call)/1e9, float64(s.ret)/1e9, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(created)) {
			if listed[k] {
				continue
			}
			for _, c := range created[k] {
				if presentThroughout(c, deleted[k], s) {
					return fmt.Errorf("scan by %s [%.3fs, %.3fs] missed %q, which exists throughout: %v returned at %.3fs and no delete could follow before the scan ended",
						s.client, float64(s.call)/1e9, float64(s.ret)/1e9, k, c.Op, float64(c.Return)/1e9)
				}
			}
		}
	}
	return nil
}

// createsKey reports whether op certainly left its key existing when it
// took effect: an answered put, swap or append, an increment that found
// a number, a compare-and-set that matched.
func createsKey(op check.Operation) bool {
	if op.Unknown {
		return false
	}
	switch op.Op.Kind {
	case wire.OpPut, wire.OpSwap, wire.OpAppend:
		return true
	case wire.OpIncrement, wire.OpCompareAndSet, wire.OpHashSet, wire.OpHashSetNX, wire.OpHashIncrement:
		return op.Result.Status == wire.StatusOK
	}
	return false
}

// presentThroughout reports whether the key that create made exists for
// the whole scan s: create returned before s began, and every delete of
// the key either returned before create was called (it took effect
// first) or was called after s ended. A delete whose outcome is unknown
// may take effect at any time after its call.
func presentThroughout(create check.Operation, deletes []check.Operation, s scanRecord) bool {
	if wire.Time(create.Return) >= s.call {
		return false
	}
	for _, d := range deletes {
		before := !d.Unknown && d.Return < create.Call
		if !before && wire.Time(d.Call) <= s.ret {
			return false
		}
	}
	return true
}
