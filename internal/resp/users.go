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
// UsersRefreshInterval and at once when AUTH names a user it does not
// know or whose password does not match (the user may have just been
// created, or its password changed), at most every usersRefreshMin.
// Verifying a password computes its argon2id hash: at most
// PasswordChecksMax run at once, so a storm of AUTHs costs the proxy
// bounded memory. A deleted user's connections need nothing from here:
// the servers refuse its next request.
type ClusterUsers struct {
	fetch func(context.Context) (client.Auth, error)
	log   *slog.Logger
	// checks holds a token per password check running.
	checks chan struct{}

	mu       sync.Mutex
	hashes   map[string]string
	version  uint64
	fetched  time.Time
	lastErr  string
	fetching sync.Mutex
}

// Bounds of ClusterUsers.
const (
	// UsersRefreshInterval is how often the users are fetched again.
	UsersRefreshInterval = 5 * time.Second
	// usersRefreshMin spaces fetches an AUTH asks for.
	usersRefreshMin = 200 * time.Millisecond
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
	u.refresh(ctx, 0)
	t := time.NewTicker(UsersRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.refresh(ctx, 0)
		}
	}
}

// refresh fetches the users unless they were fetched within minAge. A
// failure is logged when it differs from the previous one.
func (u *ClusterUsers) refresh(ctx context.Context, minAge time.Duration) {
	u.fetching.Lock()
	defer u.fetching.Unlock()
	u.mu.Lock()
	recent := minAge > 0 && time.Since(u.fetched) < minAge
	u.mu.Unlock()
	if recent {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, usersFetchTimeout)
	defer cancel()
	auth, err := u.fetch(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fetched = time.Now()
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
	h := u.hash(user)
	if h != "" && u.verify(h, password) {
		return true
	}
	// Perhaps created, or its password changed, since the last fetch.
	u.refresh(context.Background(), usersRefreshMin)
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
