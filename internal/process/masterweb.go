package process

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/master"
	"github.com/catena-kv/catena/internal/metrics"
	"github.com/catena-kv/catena/internal/node"
	"github.com/catena-kv/catena/internal/security"
	"github.com/catena-kv/catena/internal/statuspage"
	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// masterWeb sets up what a master member reports about itself: the log
// lines of reconfigurations and leader changes, and with an address its
// status page and metrics.
type masterWeb struct {
	addr string // "" for no HTTP
	log  *slog.Logger
	// tls is the member's TLS material (nil: none): HTTPS, and the
	// status page's client dials with it.
	tls *security.Material
}

// start watches m's configurations and leader after each of loop's
// batches and logs their changes and the progress of recoveries, and,
// with an address, listens there for the status page, its JSON and the
// metrics; serve (nil without an address) serves them until ctx ends.
// term is the Raft term of a replicated member (nil for a single
// master); masters lists every member's address, for the status page's
// client. What start holds is released when l closes. Call before loop
// runs.
func (w masterWeb) start(l *lifecycle, loop *node.Loop, m *master.Master, term func() uint64, tr *transport.Transport, masters string) (serve func(ctx context.Context), err error) {
	reg := metrics.NewRegistry()
	watch := metrics.NewMaster(reg, m, metrics.MasterOptions{Term: term, Inspect: loop.Inspect})
	recovery := recoveryLog{log: w.log}
	before := loop.AfterBatch
	loop.AfterBatch = func(clock wire.Time) {
		if before != nil {
			before(clock)
		}
		now := time.Now()
		changes := watch.AfterBatch(now)
		if changes.LeaderChanged {
			w.log.Info("leader changed", "leader", string(changes.Leader))
		}
		for _, r := range changes.Reconfigurations {
			w.log.Info("reconfiguration", "kind", r.Kind, "volume", r.Volume, "epoch", r.Epoch,
				"chain", strings.Join(r.Chain, ","), "joining", r.Joining, "removed", strings.Join(r.Removed, ","))
		}
		short, extending := watch.Recovery()
		recovery.observe(now, short, extending)
	}
	if w.addr == "" {
		return nil, nil
	}
	loop.Observer = metrics.NewMasterLoop(reg)
	reg.MustRegister(metrics.NewTransport(tr))
	status := &statusClient{masters: masters, tls: clientTLS(w.tls)}
	l.hold(status.Close)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	statuspage.New(statuspage.Options{Self: tr.Addr(), Status: status.Status, Recent: watch.Recent}).Register(mux)
	return listenHTTP(l, w.addr, mux, w.log, w.tls)
}

// statusClient asks the master for the cluster's status as catena status
// does, through a client it dials on first use: any member's page shows
// the leader's view.
type statusClient struct {
	masters string
	tls     client.TLSFiles
	mu      sync.Mutex
	c       *client.Client
	closed  bool
}

// Status returns the cluster's status.
func (s *statusClient) Status(ctx context.Context) (*client.ClusterStatus, error) {
	s.mu.Lock()
	if s.c == nil && !s.closed {
		c, err := client.Dial(ctx, s.masters, client.Options{TLS: s.tls})
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.c = c
	}
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return nil, client.ErrClosed
	}
	return c.Status(ctx)
}

// Close closes the client, if one was dialed.
func (s *statusClient) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.c != nil {
		s.c.Close()
	}
}

// Recovery progress lines: when the counts change, at most this often;
// while they do not, this often.
const (
	recoveryLogChangedEvery = 2 * time.Second
	recoveryLogSteadyEvery  = 30 * time.Second
)

// recoveryLog logs a master's recoveries: when chains become shorter than
// their keyspace's replication factor, progress lines while some are short or being
// extended (state transfers), and when every chain is whole again.
type recoveryLog struct {
	log *slog.Logger
	// began is when the recovery under way began (zero: none); logged
	// when the last line was written, with the counts it showed.
	began, logged                time.Time
	loggedShort, loggedExtending int
}

func (r *recoveryLog) active() bool { return !r.began.IsZero() }

// observe takes the current counts of short and extending chains.
func (r *recoveryLog) observe(now time.Time, short, extending int) {
	switch {
	case !r.active() && short+extending == 0:
		return
	case !r.active():
		r.began, r.logged = now, now
		r.loggedShort, r.loggedExtending = short, extending
		r.log.Info("recovery: started", "chains-short", short, "extensions", extending)
	case short+extending == 0:
		r.log.Info("recovery: complete, every chain has its replicas", "elapsed", now.Sub(r.began).Round(time.Millisecond))
		r.began = time.Time{}
	default:
		changed := short != r.loggedShort || extending != r.loggedExtending
		since := now.Sub(r.logged)
		if changed && since >= recoveryLogChangedEvery || since >= recoveryLogSteadyEvery {
			r.logged, r.loggedShort, r.loggedExtending = now, short, extending
			r.log.Info("recovery: progress", "chains-short", short, "extensions", extending, "elapsed", now.Sub(r.began).Round(time.Second))
		}
	}
}
