package torture

import (
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Availability: how long a fault kept clients from succeeding. A fault
// hits the chains its victim is in, not the cluster, so the measure is
// per volume: after a fault starts, how long a volume went without a
// successful update (or read) on any of its keys, taking the worst
// volume. Steady traffic (the default 200 ops/s over 8 volumes) leaves a
// volume without a success for tens of milliseconds at most, so longer
// gaps are the fault's outage: for a crash, the failure timeout plus the
// reconfiguration; for a partition, up to its whole length when the
// victim's chains must wait for it.

// faultWindow is one injected fault: its kind and when it started and
// ended, counted from the start of the fault phase.
type faultWindow struct {
	kind       Kind
	start, end time.Duration
}

// availabilityAfter bounds how long after a fault ends its outage is
// looked for (or until the next fault starts): recovery may outlast the
// fault (a restarted server rejoins, a master elects a leader).
const availabilityAfter = 10 * time.Second

// outage returns the longest time, from start and before until, that
// passed without an entry of done (sorted success times) for one of
// volumes' keys: the worst volume's gap. An outage that lasts past until
// ends at the first success after it, or at end of the history.
func outage(done map[wire.VolumeID][]time.Duration, start, until, last time.Duration) time.Duration {
	var worst time.Duration
	for _, times := range done {
		from := start
		i, _ := slices.BinarySearch(times, start)
		for ; i < len(times) && from < until; i++ {
			worst = max(worst, times[i]-from)
			from = times[i]
		}
		if from < until {
			worst = max(worst, last-from) // no success after it at all
		}
	}
	return worst
}

// availability measures, for every fault, the worst volume's outage of
// updates and of reads, and returns a summary line per kind (median and
// maximum over its faults).
func availability(history []Record, faults []faultWindow, volumes int) []string {
	if len(faults) == 0 || volumes < 1 {
		return nil
	}
	updates := map[wire.VolumeID][]time.Duration{}
	reads := map[wire.VolumeID][]time.Duration{}
	var last time.Duration
	for _, h := range history {
		if h.Client == finalClient {
			continue // the reads after healing
		}
		last = max(last, time.Duration(h.Return))
		if h.Outcome != OK {
			continue
		}
		v := placement.VolumeOf(h.Op.Key, volumes)
		if h.Op.Kind.IsQuery() {
			reads[v] = append(reads[v], time.Duration(h.Return))
		} else {
			updates[v] = append(updates[v], time.Duration(h.Return))
		}
	}
	for _, m := range []map[wire.VolumeID][]time.Duration{updates, reads} {
		for v := range m {
			slices.Sort(m[v])
		}
	}
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

// spread describes durations as their median and maximum.
func spread(d []time.Duration) string {
	slices.Sort(d)
	med, top := d[len(d)/2], d[len(d)-1]
	if len(d) == 1 {
		return fmt.Sprintf("%s", top.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("median %s, max %s", med.Round(10*time.Millisecond), top.Round(10*time.Millisecond))
}
