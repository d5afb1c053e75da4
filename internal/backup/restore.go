package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
)

// RestoreOptions configure a restore.
type RestoreOptions struct {
	// Client reaches the new cluster (with authorization on, as a user
	// with role admin).
	Client *client.Client
	// Dir is the backup.
	Dir string
	// Parallel is how many writes are in flight at once (0: 32).
	Parallel int
	// SkipUsers leaves the users and roles out.
	SkipUsers bool
	// MaxReplicas, if above 0, caps the chain length of the keyspaces
	// created (and a causal one's k), for a new cluster with fewer
	// servers than the old one's chains were long.
	MaxReplicas int
	// Progress, if not nil, receives progress lines every ProgressEvery
	// (0: 2 s).
	Progress      io.Writer
	ProgressEvery time.Duration
}

// RestoreStats are what a restore did.
type RestoreStats struct {
	// Objects were written; Expired were left out, their deadline past.
	Objects, Expired int64
	// Keyspaces were created; Users and Roles added.
	Keyspaces, Users, Roles int
}

// ErrNotEmpty is returned by Restore for a cluster that holds keys.
var ErrNotEmpty = errors.New("the cluster holds keys already")

// Restore checks the backup in o.Dir whole (Verify), then loads it into
// the new, empty cluster o.Client reaches: it creates the backup's
// keyspaces (the default keyspace is the new cluster's own), writes
// every object with its deadline (one already past is left out), and
// adds the users and roles. The new cluster places the keys over its
// own servers and volumes, whatever their number. Exactly-once
// sessions are not part of a backup: clients start new ones.
func Restore(ctx context.Context, o RestoreOptions) (RestoreStats, error) {
	var st RestoreStats
	if o.Client == nil || o.Dir == "" {
		return st, errors.New("a client and a backup directory are required")
	}
	m, err := Verify(o.Dir)
	if err != nil {
		return st, err
	}
	c := o.Client
	if _, err := c.Volumes(ctx); err != nil {
		return st, err
	}
	if err := checkEmpty(ctx, c); err != nil {
		return st, err
	}
	if st.Keyspaces, err = restoreKeyspaces(ctx, c, m.Keyspaces, o.MaxReplicas); err != nil {
		return st, err
	}
	if err := restoreObjects(ctx, o, m, &st); err != nil {
		return st, err
	}
	if m.Auth != nil && !o.SkipUsers {
		if st.Roles, st.Users, err = restoreAuth(ctx, c, *m.Auth); err != nil {
			return st, fmt.Errorf("the keys are restored, the users and roles not: %w", err)
		}
	}
	return st, nil
}

// checkEmpty refuses a cluster that holds a key.
func checkEmpty(ctx context.Context, c *client.Client) error {
	var cur client.Cursor
	for !cur.Done() {
		keys, next, err := c.Scan(ctx, cur, "", 1000)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			return fmt.Errorf("%w (%q, ...): restore into a new cluster", ErrNotEmpty, keys[0])
		}
		cur = next
	}
	return nil
}

// restoreKeyspaces creates the backup's keyspaces the cluster lacks and
// returns how many it created, their chains at most maxReplicas long
// (0: as long as in the backup). One that exists must have the same
// prefix.
func restoreKeyspaces(ctx context.Context, c *client.Client, keyspaces []client.Keyspace, maxReplicas int) (int, error) {
	have := c.Keyspaces()
	created := 0
	for _, ks := range keyspaces {
		i := slices.IndexFunc(have, func(h client.Keyspace) bool { return h.Name == ks.Name })
		if i >= 0 {
			if have[i].Prefix != ks.Prefix {
				return created, fmt.Errorf("keyspace %s has prefix %q here and %q in the backup", ks.Name, have[i].Prefix, ks.Prefix)
			}
			continue
		}
		ks.FirstVolume, ks.Splits, ks.VolumeIDs = 0, 0, nil // (the new keyspace's volumes are numbered anew)
		if maxReplicas > 0 && ks.Replicas > maxReplicas {
			ks.Replicas, ks.K = maxReplicas, min(ks.K, maxReplicas)
		}
		ks.GraceGeneration, ks.GraceSites, ks.ReassignGeneration, ks.ReassignSites = 0, nil, 0, nil
		if _, err := c.CreateKeyspace(ctx, ks); err != nil {
			return created, fmt.Errorf("creating keyspace %s: %w", ks.Name, err)
		}
		created++
	}
	return created, nil
}

// restoreObjects writes every object of the backup, o.Parallel at once.
func restoreObjects(ctx context.Context, o RestoreOptions, m Manifest, st *RestoreStats) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	parallel := o.Parallel
	if parallel <= 0 {
		parallel = 32
	}
	objects := make(chan Object, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	p := newProgress(o.Progress, o.ProgressEvery, "restore")
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for obj := range objects {
				if err := writeObject(ctx, o.Client, obj); err != nil {
					cancel(fmt.Errorf("writing %q: %w", obj.Key, err))
					continue
				}
				mu.Lock()
				st.Objects++
				p.read(1, len(obj.Key)+len(obj.Value))
				mu.Unlock()
			}
		}()
	}
	now := time.Now()
	var readErr error
	for _, v := range m.Volumes {
		readErr = decodeVolumeFile(filepath.Join(o.Dir, v.File), v, func(obj Object) error {
			if !obj.Expires.IsZero() && !obj.Expires.After(now) {
				mu.Lock()
				st.Expired++
				mu.Unlock()
				return nil
			}
			select {
			case objects <- obj:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		if readErr != nil {
			break
		}
	}
	close(objects)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return readErr
}

// writeObject writes one object with its deadline.
func writeObject(ctx context.Context, c *client.Client, o Object) error {
	if !o.Hash {
		var opts []client.WriteOption
		if !o.Expires.IsZero() {
			opts = append(opts, client.WithExpireAt(o.Expires))
		}
		return c.Put(ctx, o.Key, o.Value, opts...)
	}
	fields, err := decodeHash(o)
	if err != nil {
		return err
	}
	if _, err := c.HashSet(ctx, o.Key, fields...); err != nil {
		return err
	}
	if !o.Expires.IsZero() {
		_, _, err = c.ChangeExpiry(ctx, o.Key, client.Expiry{At: o.Expires})
	}
	return err
}

// restoreAuth adds the roles, with their grants, and the users the
// cluster lacks, admins first (the first user added turns authorization
// on and must be the caller's own).
func restoreAuth(ctx context.Context, c *client.Client, a client.Auth) (roles, users int, err error) {
	have, err := c.Auth(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range a.Roles {
		if !slices.ContainsFunc(have.Roles, func(h client.Role) bool { return h.Name == r.Name }) {
			if _, err := c.AddRole(ctx, r.Name); err != nil {
				return roles, users, fmt.Errorf("role %s: %w", r.Name, err)
			}
			roles++
		}
		for _, g := range r.Grants {
			if _, err := c.GrantRole(ctx, r.Name, g); err != nil {
				return roles, users, fmt.Errorf("role %s: %w", r.Name, err)
			}
		}
	}
	ordered := slices.Clone(a.Users)
	slices.SortStableFunc(ordered, func(x, y client.User) int {
		return boolRank(isAdmin(y)) - boolRank(isAdmin(x))
	})
	exists := func(name string) bool {
		return slices.ContainsFunc(have.Users, func(h client.User) bool { return h.Name == name })
	}
	if len(have.Users) == 0 && len(ordered) > 0 {
		// The first user turns authorization on and must be the
		// caller's own certificate user, an admin: find it among the
		// backup's admins.
		first := ""
		var refusals []string
		for _, u := range ordered {
			if !isAdmin(u) {
				break
			}
			if _, err := c.AddUserHashed(ctx, u.Name, u.Password, u.Roles...); err != nil {
				refusals = append(refusals, fmt.Sprintf("%s: %v", u.Name, err))
				continue
			}
			first = u.Name
			users++
			break
		}
		if first == "" {
			return roles, users, fmt.Errorf("the first user must be this client's own certificate user with role admin, and none of the backup's admins could be (%s): restore with a client certificate of one of them, or with -skip-users", strings.Join(refusals, "; "))
		}
		have.Users = append(have.Users, client.User{Name: first})
	}
	for _, u := range ordered {
		if exists(u.Name) {
			continue
		}
		if _, err := c.AddUserHashed(ctx, u.Name, u.Password, u.Roles...); err != nil {
			return roles, users, fmt.Errorf("user %s: %w", u.Name, err)
		}
		users++
	}
	return roles, users, nil
}

// isAdmin reports whether u holds role admin.
func isAdmin(u client.User) bool { return slices.Contains(u.Roles, client.AdminRole) }

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
