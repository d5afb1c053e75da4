package torture

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Availability: how long a fault kept clients from succeeding. A fault
// hits the chains its victim is in, not the cluster, so the measure is
// per volume: after a fault starts, the longest time a volume's clients
// waited with no operation of theirs on it succeeding, taking the worst
// volume. Time when no operation on the volume was in flight does not
// count (with 20 keys live over 8 volumes, a volume is often idle): a
// wait is a span of time, between two successes, during which some call
// on the volume was in flight (or retried within retryBridge). For a crash that is about the failure
// timeout plus the reconfiguration; for a partition, up to its whole
// length when the victim's chains must wait for it.

// faultWindow is one injected fault: its kind and when it started and
// ended, counted from the start of the fault phase.
type faultWindow struct {
	kind Kind
	// site is the index of the site it hit (0 in a run of one site).
	site       int
	start, end time.Duration
}

// retryBridge joins two waits on a volume with less than this between
// them into one: clients pace their operations (the rate) and give up
// and try again, so a volume that stays down shows calls that fail with
// short idle times between them.
const retryBridge = 250 * time.Millisecond

// availabilityAfter bounds how long after a fault ends its outage is
// looked for (or until the next fault starts): recovery may outlast the
// fault (a restarted server rejoins, a master elects a leader).
const availabilityAfter = 10 * time.Second

// opsOf is one volume's operations: the successes' return times, and
// every operation's call and return, by call time.
type opsOf struct {
	done  []time.Duration
	calls [][2]time.Duration
}

// outage returns the longest time, from start and before until, that a
// volume's clients waited with none of their operations succeeding (the
// worst volume). A wait that lasts past until ends at the next success,
// at the end of its calls, or at last when none came.
func outage(volumes map[wire.VolumeID]*opsOf, start, until, last time.Duration) time.Duration {
	var worst time.Duration
	for _, ops := range volumes {
		from := start
		i, _ := slices.BinarySearch(ops.done, start)
		for from < until {
			next := last
			if i < len(ops.done) {
				next = ops.done[i]
			}
			// The spans with a call in flight between from and next:
			// each is a wait with no success.
			var spanFrom, spanTo time.Duration
			open := false
			for _, c := range ops.calls {
				if c[0] >= next {
					break
				}
				if c[1] <= from {
					continue
				}
				begin, end := max(c[0], from), min(c[1], next)
				if open && begin <= spanTo+retryBridge {
					spanTo = max(spanTo, end)
					continue
				}
				if open {
					worst = max(worst, spanTo-spanFrom)
				}
				spanFrom, spanTo, open = begin, end, true
			}
			if open {
				worst = max(worst, spanTo-spanFrom)
			}
			if i >= len(ops.done) {
				break
			}
			from = next
			i++
		}
	}
	return worst
}

// opsByVolume sorts the history's operations (the final reads left out)
// into updates and reads per volume, by volumeOf, and returns them with
// the last return time.
func opsByVolume(history []Record, volumeOf func(Record) wire.VolumeID) (updates, reads map[wire.VolumeID]*opsOf, last time.Duration) {
	updates, reads = map[wire.VolumeID]*opsOf{}, map[wire.VolumeID]*opsOf{}
	for _, h := range history {
		if h.Client == finalClient {
			continue // the reads after healing
		}
		last = max(last, time.Duration(h.Return))
		m := updates
		if h.Op.Kind.IsQuery() {
			m = reads
		}
		v := volumeOf(h)
		if m[v] == nil {
			m[v] = &opsOf{}
		}
		m[v].calls = append(m[v].calls, [2]time.Duration{time.Duration(h.Call), time.Duration(h.Return)})
		if h.Outcome == OK {
			m[v].done = append(m[v].done, time.Duration(h.Return))
		}
	}
	for _, m := range []map[wire.VolumeID]*opsOf{updates, reads} {
		for _, ops := range m {
			slices.Sort(ops.done)
			slices.SortFunc(ops.calls, func(a, b [2]time.Duration) int { return cmp.Compare(a[0], b[0]) })
		}
	}
	return updates, reads, last
}

// keyVolumes returns the volume of a record's key among volumes.
func keyVolumes(volumes int) func(Record) wire.VolumeID {
	return func(h Record) wire.VolumeID { return placement.VolumeOf(h.Op.Key, volumes) }
}

// nextAfter returns the first of the sorted times that is after t, or
// limit if none comes before it: where a window that begins at t ends
// at the latest, for another nemesis's event.
func nextAfter(times []time.Duration, t, limit time.Duration) time.Duration {
	i, _ := slices.BinarySearch(times, t+1)
	if i < len(times) && times[i] < limit {
		return times[i]
	}
	return limit
}

// availability measures, for every fault, the worst volume's outage of
// updates and of reads, and returns a summary line per kind (median and
// maximum over its faults). A fault's window also ends where one of
// others begins (the upgrade's steps, sorted): their outages are theirs.
func availability(history []Record, faults []faultWindow, others []time.Duration, volumes int) []string {
	if len(faults) == 0 || volumes < 1 {
		return nil
	}
	updates, reads, last := opsByVolume(history, keyVolumes(volumes))
	type gaps struct{ writes, reads []time.Duration }
	per := map[Kind]*gaps{}
	for i, f := range faults {
		g := per[f.kind]
		if g == nil {
			g = &gaps{}
			per[f.kind] = g
		}
		until := f.end + availabilityAfter
		if i+1 < len(faults) {
			until = min(until, faults[i+1].start) // the next fault's own
		}
		until = nextAfter(others, f.start, until)
		g.writes = append(g.writes, outage(updates, f.start, until, last))
		g.reads = append(g.reads, outage(reads, f.start, until, last))
	}
	var lines []string
	for _, k := range Kinds {
		g := per[k]
		if g == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s (%d): writes %s, reads %s", k, len(g.writes), spread(g.writes), spread(g.reads)))
	}
	return lines
}

// stepAvailability measures, for every step of an upgrade, as
// availability does for a fault (from the step's start until
// availabilityAfter past its end, or the next step's start), the worst
// volume's outage of the history's updates and reads, and the proxy
// clients' outage of theirs (proxyHistory, all one "volume"); it returns
// a line per step that also says what the step did. A step's window also
// ends where one of faults (the fault nemesis's, sorted by start) begins.
func stepAvailability(steps []stepResult, faults []faultWindow, history, proxyHistory []Record, volumes int) []string {
	var faultStarts []time.Duration
	for _, f := range faults {
		faultStarts = append(faultStarts, f.start)
	}
	updates, reads, last := opsByVolume(history, keyVolumes(volumes))
	proxyUpdates, proxyReads, proxyLast := opsByVolume(proxyHistory, func(Record) wire.VolumeID { return 0 })
	var lines []string
	for i, s := range steps {
		until := s.end + availabilityAfter
		if i+1 < len(steps) {
			until = min(until, steps[i+1].start)
		}
		until = nextAfter(faultStarts, s.start, until)
		line := fmt.Sprintf("%s at %s", s.step, s.start.Round(100*time.Millisecond))
		switch {
		case s.err != nil:
			line += ": FAILED: " + s.err.Error()
		case s.how != "":
			line += ": " + s.how
		}
		round := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
		line += fmt.Sprintf("; writes %s, reads %s", round(outage(updates, s.start, until, last)), round(outage(reads, s.start, until, last)))
		if len(proxyHistory) > 0 {
			line += fmt.Sprintf("; proxy writes %s, reads %s",
				round(outage(proxyUpdates, s.start, until, proxyLast)), round(outage(proxyReads, s.start, until, proxyLast)))
		}
		lines = append(lines, line)
	}
	return lines
}

// spread describes durations as their median and maximum.
func spread(d []time.Duration) string {
	slices.Sort(d)
	med, top := d[len(d)/2], d[len(d)-1]
	if len(d) == 1 {
		return fmt.Sprintf("%s", top.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("median %s, max %s", med.Round(10*time.Millisecond), top.Round(10*time.Millisecond))
}
