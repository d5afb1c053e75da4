package statuspage

import (
	"time"

	"github.com/catena-kv/catena/client"
)

// Throughput is measured from the volumes' committed sequence numbers,
// which servers report to the master with every heartbeat: each committed
// update raises its volume's by one. The page keeps the samples it took
// while it was viewed and compares the newest with the oldest within
// throughputWindow.
const (
	throughputWindow = 10 * time.Second
	// throughputSpanMin is the shortest span a rate is computed over.
	throughputSpanMin = time.Second
	samplesMax        = 64
)

type sample struct {
	at        time.Time
	committed map[uint32]uint64
}

type throughput struct {
	known bool
	// total and volumes are committed updates per second.
	total   float64
	volumes map[uint32]float64
}

// committed returns each volume's highest committed sequence number any
// server reported.
func committed(st *client.ClusterStatus) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, s := range st.Servers {
		for _, r := range s.Volumes {
			out[r.Volume] = max(out[r.Volume], r.Committed)
		}
	}
	return out
}

// throughput records st as a sample taken at now and returns the rates
// since the oldest sample in the window.
func (p *Page) throughput(now time.Time, st *client.ClusterStatus) throughput {
	cur := sample{at: now, committed: committed(st)}
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.samples[:0]
	for _, s := range p.samples {
		if now.Sub(s.at) <= throughputWindow {
			keep = append(keep, s)
		}
	}
	p.samples = keep
	var t throughput
	if len(p.samples) > 0 {
		t = rates(p.samples[0], cur)
	}
	if len(p.samples) == samplesMax {
		p.samples = p.samples[1:]
	}
	p.samples = append(p.samples, cur)
	return t
}

// rates returns the committed updates per second from a to b, if they are
// far enough apart. A volume whose sequence numbers went back (recreated)
// counts as none.
func rates(a, b sample) throughput {
	span := b.at.Sub(a.at)
	if span < throughputSpanMin {
		return throughput{}
	}
	t := throughput{known: true, volumes: map[uint32]float64{}}
	for v, now := range b.committed {
		before, ok := a.committed[v]
		if !ok || now < before {
			continue
		}
		r := float64(now-before) / span.Seconds()
		t.volumes[v] = r
		t.total += r
	}
	return t
}
