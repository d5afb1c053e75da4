// Package statuspage is the master's status page over HTTP: the cluster
// as the leader sees it (keyspaces, volumes and their chains with each
// server's role, epoch, applied sequence number, lag, watches held and
// health, the master's members), the reconfigurations the serving member applied
// recently, and the update throughput, as server-rendered HTML that
// refreshes itself (GET /) and as JSON (GET /status.json, the
// client.ClusterStatus that catena status --json prints).
package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/metrics"
)

// Options configure a Page.
type Options struct {
	// Self is the address of the master member serving the page.
	Self string
	// Status returns the cluster's status: the leader's view when the
	// leader answers (client.Client.Status).
	Status func(ctx context.Context) (*client.ClusterStatus, error)
	// Recent returns the reconfigurations this member applied recently,
	// newest first; nil if none are kept.
	Recent func() []metrics.Reconfiguration
	// Refresh is how often the page reloads itself (default 2 s).
	Refresh time.Duration
}

// statusTimeout bounds the wait for the cluster's status.
const statusTimeout = 3 * time.Second

// Page serves the status page. Safe for concurrent use.
type Page struct {
	opts Options
	mu   sync.Mutex
	// samples are recent committed sequence numbers, for throughput.
	samples []sample
}

// New returns a page.
func New(o Options) *Page {
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Second
	}
	return &Page{opts: o}
}

// Register adds the page's routes to mux: / (HTML) and /status.json.
func (p *Page) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", p.serveHTML)
	mux.HandleFunc("GET /status.json", p.serveJSON)
}

func (p *Page) status(r *http.Request) (*client.ClusterStatus, error) {
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	return p.opts.Status(ctx)
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	st, err := p.status(r)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	WriteJSON(w, st)
}

// WriteJSON writes s as the status JSON: indented, ending in a newline.
func WriteJSON(w io.Writer, s *client.ClusterStatus) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	now := time.Now()
	st, err := p.status(r)
	var v *view
	if err != nil {
		v = &view{Error: err.Error()}
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		v = buildView(st, p.opts.Self, p.throughput(now, st))
	}
	v.Self, v.Generated, v.RefreshSeconds = p.opts.Self, now.Format("2006-01-02 15:04:05 MST"), int(p.opts.Refresh.Seconds())
	if p.opts.Recent != nil {
		v.Reconfigurations = reconfigurationRows(p.opts.Recent(), now)
	}
	if err := pageTemplate.Execute(w, v); err != nil {
		// Headers are sent; all that can be done is to stop.
		return
	}
}
