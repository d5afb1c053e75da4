package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/wire"
)

// Loop counts what a process's event loop does: the messages it takes in
// and emits by type; at a server, the client requests it takes in by
// operation and outcome, with how long each took to handle, and the
// state it transfers to and from joining servers; at a master, the
// leases it grants. It is a node.Observer: its methods run on the loop's
// goroutine.
type Loop struct {
	received, sent *prometheus.CounterVec
	receivedByType map[string]prometheus.Counter
	sentByType     map[string]prometheus.Counter

	// A server's; nil at a master.
	requests         *prometheus.CounterVec
	requestSeconds   *prometheus.HistogramVec
	byRequest        map[requestKey]requestMetrics
	pending          []pendingRequest
	transferSent     *[3]prometheus.Counter // bytes, objects, chunks
	transferReceived *[3]prometheus.Counter

	// A master's; nil at a server.
	leasesGranted, leasesRefused prometheus.Counter
}

var _ node.Observer = (*Loop)(nil)

type requestKey struct{ op, outcome string }

type requestMetrics struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

type pendingRequest struct {
	metrics requestMetrics
	began   time.Time
}

// OutcomeForwarded is the outcome of a request that this server passed
// on without answering it: an update the head sent down the chain (the
// tail answers it), or a retried update waiting for its first copy to
// commit.
const OutcomeForwarded = "forwarded"

// NewServerLoop returns the Loop of a chain server, its metrics
// registered with reg: messages, client requests and state transfers.
func NewServerLoop(reg prometheus.Registerer) *Loop {
	l := newLoop(reg)
	l.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "server", Name: "requests_total",
		Help: "Client requests this server took in, by operation and outcome: ok, an operation status (compare-failed, not-integer, ...), an error code (wrong-epoch, not-head, unavailable, dirty, ...), or forwarded (an update sent down the chain, whose tail answers).",
	}, []string{"op", "outcome"})
	l.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "server", Name: "request_duration_seconds",
		Help:    "Time from taking a client request in to its reply (or forwarded update) leaving the process, group commit included, by operation and outcome.",
		Buckets: latencyBuckets,
	}, []string{"op", "outcome"})
	transfer := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "state_transfer", Name: name, Help: help}, []string{"direction"})
	}
	bytes := transfer("bytes_total", "Bytes of keys and values in the snapshot chunks of chain extensions, sent (as the tail) or received (as the joining server).")
	objects := transfer("objects_total", "Objects in the snapshot chunks of chain extensions, sent or received.")
	chunks := transfer("chunks_total", "Snapshot chunks of chain extensions, sent or received.")
	reg.MustRegister(l.requests, l.requestSeconds, bytes, objects, chunks)
	l.transferSent = &[3]prometheus.Counter{bytes.WithLabelValues("sent"), objects.WithLabelValues("sent"), chunks.WithLabelValues("sent")}
	l.transferReceived = &[3]prometheus.Counter{bytes.WithLabelValues("received"), objects.WithLabelValues("received"), chunks.WithLabelValues("received")}
	return l
}

// Sibling returns a Loop that counts into l's metrics from another
// event loop of the same process (node.Pool): each loop's observer keeps
// its own caches and pending requests, and the metrics they update are
// safe for concurrent use.
func (l *Loop) Sibling() *Loop {
	sibling := *l
	sibling.receivedByType = map[string]prometheus.Counter{}
	sibling.sentByType = map[string]prometheus.Counter{}
	sibling.byRequest = map[requestKey]requestMetrics{}
	sibling.pending = nil
	return &sibling
}

// NewMasterLoop returns the Loop of a master member, its metrics
// registered with reg: messages and leases.
func NewMasterLoop(reg prometheus.Registerer) *Loop {
	l := newLoop(reg)
	l.leasesGranted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "master", Name: "leases_granted_total",
		Help: "Leases this master member granted with heartbeat replies.",
	})
	l.leasesRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "master", Name: "leases_refused_total",
		Help: "Heartbeat replies that granted no lease (a server incarnation the log does not know yet, or a leader unsure of its quorum).",
	})
	reg.MustRegister(l.leasesGranted, l.leasesRefused)
	return l
}

func newLoop(reg prometheus.Registerer) *Loop {
	l := &Loop{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "node", Name: "messages_received_total",
			Help: "Messages the process's state machine took in, by message type.",
		}, []string{"type"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "node", Name: "messages_sent_total",
			Help: "Messages the process's state machine emitted, by message type.",
		}, []string{"type"}),
		receivedByType: map[string]prometheus.Counter{},
		sentByType:     map[string]prometheus.Counter{},
		byRequest:      map[requestKey]requestMetrics{},
	}
	reg.MustRegister(l.received, l.sent)
	return l
}

// Stepped implements node.Observer.
func (l *Loop) Stepped(began time.Time, from wire.NodeID, in wire.Message, out []wire.Envelope) {
	if in != nil {
		counterFor(l.received, l.receivedByType, wire.MessageName(in)).Inc()
		switch m := in.(type) {
		case *wire.ClientRequest:
			if l.requests != nil {
				outcome := Outcome(m, from, out)
				l.pending = append(l.pending, pendingRequest{metrics: l.request(m.Op.Kind.String(), outcome), began: began})
			}
		case *wire.SnapshotChunk:
			countChunk(l.transferReceived, m)
		}
	}
	for _, env := range out {
		counterFor(l.sent, l.sentByType, wire.MessageName(env.Msg)).Inc()
		switch m := env.Msg.(type) {
		case *wire.SnapshotChunk:
			countChunk(l.transferSent, m)
		case *wire.HeartbeatReply:
			if l.leasesGranted == nil {
				continue
			}
			if m.LeaseGranted {
				l.leasesGranted.Inc()
			} else {
				l.leasesRefused.Inc()
			}
		}
	}
}

// BatchSent implements node.Observer: the requests of the batch are
// answered (or forwarded) now.
func (l *Loop) BatchSent() {
	if len(l.pending) == 0 {
		return
	}
	now := time.Now()
	for _, p := range l.pending {
		p.metrics.count.Inc()
		p.metrics.latency.Observe(now.Sub(p.began).Seconds())
	}
	clear(l.pending)
	l.pending = l.pending[:0]
}

func (l *Loop) request(op, outcome string) requestMetrics {
	k := requestKey{op, outcome}
	m, ok := l.byRequest[k]
	if !ok {
		m = requestMetrics{count: l.requests.WithLabelValues(op, outcome), latency: l.requestSeconds.WithLabelValues(op, outcome)}
		l.byRequest[k] = m
	}
	return m
}

// counterFor returns vec's counter for the label value name, cached in
// cache: the loop counts every message, and a map lookup by a constant
// string is cheaper than the vector's hashing.
func counterFor(vec *prometheus.CounterVec, cache map[string]prometheus.Counter, name string) prometheus.Counter {
	c, ok := cache[name]
	if !ok {
		c = vec.WithLabelValues(name)
		cache[name] = c
	}
	return c
}

func countChunk(c *[3]prometheus.Counter, m *wire.SnapshotChunk) {
	if c == nil {
		return
	}
	c[0].Add(float64(ChunkBytes(m)))
	c[1].Add(float64(len(m.Objects)))
	c[2].Inc()
}

// ChunkBytes returns the bytes of keys and values a snapshot chunk
// carries.
func ChunkBytes(m *wire.SnapshotChunk) int {
	n := 0
	for _, o := range m.Objects {
		n += len(o.Key) + len(o.Value)
	}
	return n
}

// Outcome names what became of a client request req from from, given the
// messages its step emitted: the status or error code of the reply to
// it, or OutcomeForwarded when the step did not answer it.
func Outcome(req *wire.ClientRequest, from wire.NodeID, out []wire.Envelope) string {
	for _, env := range out {
		r, ok := env.Msg.(*wire.ClientReply)
		if !ok || env.To != from || r.Client != req.Client || r.ReqNo != req.ReqNo {
			continue
		}
		if r.Err != wire.ErrNone {
			return r.Err.String()
		}
		return r.Result.Status.String()
	}
	return OutcomeForwarded
}
