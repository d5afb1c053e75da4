package resp

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/security"
)

// ClusterUsers checks AUTH's passwords against the cluster's users: it
// keeps their password hashes, fetched from the master (a proxy's
// certificate may fetch them: client.FetchAuth), refreshed every
// UsersRefreshInterval, and when AUTH names a user it does not know or
// whose password does not match (the user may have just been created, or
// its password changed): AUTH then waits for a fetch that started after
// it, one at a time, at most one every usersRefreshMin.
// Verifying a password computes its argon2id hash: at most
// PasswordChecksMax run at once, so a storm of AUTHs costs the proxy
// bounded memory. A deleted user's connections need nothing from here:
// the servers refuse its next request.
type ClusterUsers struct {
	fetch func(context.Context) (client.Auth, error)
	log   *slog.Logger
	// checks holds a token per password check running.
	checks chan struct{}

	mu      sync.Mutex
	hashes  map[string]string
	version uint64
	// started is when the last fetch started.
	started time.Time
	lastErr string
	// fetching is held by the fetch under way.
	fetching sync.Mutex
}

// Bounds of ClusterUsers.
const (
	// UsersRefreshInterval is how often the users are fetched again.
	UsersRefreshInterval = 5 * time.Second
	// usersRefreshMin spaces fetches.
	usersRefreshMin = 100 * time.Millisecond
	// usersFetchTimeout bounds one fetch.
	usersFetchTimeout = 2 * time.Second
	// PasswordChecksMax bounds the password hashes computed at once
	// (each takes its hash's memory, 19 MiB by default).
	PasswordChecksMax = 4
)

// NewClusterUsers returns a ClusterUsers that fetches with fetch (a
// proxy's client.FetchAuth).
func NewClusterUsers(fetch func(context.Context) (client.Auth, error), log *slog.Logger) *ClusterUsers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ClusterUsers{fetch: fetch, log: log, checks: make(chan struct{}, PasswordChecksMax), hashes: map[string]string{}}
}

// Run fetches the users every UsersRefreshInterval until ctx ends.
func (u *ClusterUsers) Run(ctx context.Context) {
	u.refresh(ctx, time.Now())
	t := time.NewTicker(UsersRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.refresh(ctx, time.Now())
		}
	}
}

// refresh fetches the users unless a fetch started after asked (and,
// holding fetching, has ended), no sooner than usersRefreshMin after the
// last one started. A failure is logged when it differs from the
// previous one.
func (u *ClusterUsers) refresh(ctx context.Context, asked time.Time) {
	u.fetching.Lock()
	defer u.fetching.Unlock()
	u.mu.Lock()
	started := u.started
	u.mu.Unlock()
	if started.After(asked) {
		return
	}
	if wait := usersRefreshMin - time.Since(started); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
	u.mu.Lock()
	u.started = time.Now()
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, usersFetchTimeout)
	defer cancel()
	auth, err := u.fetch(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != u.lastErr {
			u.lastErr = msg
			u.log.Warn("resp: cannot fetch the cluster's users; AUTH of a cluster user fails until it can (the proxy needs a certificate of role proxy)", "error", err)
		}
		return
	}
	u.lastErr = ""
	if auth.Version < u.version {
		return // a lagging master member's
	}
	u.version = auth.Version
	u.hashes = make(map[string]string, len(auth.Users))
	for _, user := range auth.Users {
		if user.Password != "" {
			u.hashes[user.Name] = user.Password
		}
	}
}

// hash returns user's password hash ("" for none).
func (u *ClusterUsers) hash(user string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hashes[user]
}

// Authenticate reports whether password is the cluster user's.
func (u *ClusterUsers) Authenticate(user, password string) bool {
	if len(password) > security.PasswordLengthMax {
		return false
	}
	asked := time.Now()
	h := u.hash(user)
	if h != "" && u.verify(h, password) {
		return true
	}
	// Perhaps created, or its password changed, since the last fetch.
	u.refresh(context.Background(), asked)
	if fresh := u.hash(user); fresh != "" && fresh != h {
		return u.verify(fresh, password)
	}
	return false
}

// verify checks password against hash, with at most PasswordChecksMax
// checks running at once.
func (u *ClusterUsers) verify(hash, password string) bool {
	u.checks <- struct{}{}
	defer func() { <-u.checks }()
	return security.VerifyPassword(hash, password)
}
