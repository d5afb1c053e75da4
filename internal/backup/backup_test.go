package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/testcluster"
)

// A backup taken while a writer runs, restored into a new cluster of
// another size, serves every write acknowledged before the backup began,
// and only writes made before it ended; deadlines, hashes and keyspaces
// come along, keys already expired do not.
func TestBackupUnderLoadRestoresIntoANewCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := testcluster.Start(t, 3)
	c := old.Dial(t)
	if _, err := c.CreateKeyspace(ctx, client.Keyspace{Name: "users", Prefix: "u/", Mode: "strong", Replicas: 3, Volumes: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateKeyspace(ctx, client.Keyspace{Name: "feed", Prefix: "f/", Mode: "causal", K: 2, Replicas: 3, Volumes: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := c.Put(ctx, fmt.Sprintf("u/%04d", i), []byte(fmt.Sprintf("user %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 { // answered by the causal chain's second member
		if err := c.Put(ctx, fmt.Sprintf("f/%04d", i), []byte("post")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.HashSet(ctx, "u/hash", client.Field{Name: "name", Value: []byte("ada")}, client.Field{Name: "age", Value: []byte("36")}); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := c.Put(ctx, "session", []byte("s"), client.WithExpireAt(later)); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "gone-soon", []byte("g"), client.WithTTL(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}

	// A writer puts new keys until the backup ends: acked[i] says when
	// key w/i was acknowledged, called[i] when its put began.
	var ackedMu sync.Mutex
	acked, called := map[int]time.Time{}, map[int]time.Time{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ackedMu.Lock()
			called[i] = time.Now()
			ackedMu.Unlock()
			if err := c.Put(ctx, fmt.Sprintf("w/%06d", i), []byte("v")); err == nil {
				ackedMu.Lock()
				acked[i] = time.Now()
				ackedMu.Unlock()
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	dir := t.TempDir()
	var progress bytes.Buffer
	m, err := Run(ctx, Options{Client: c, Dir: dir, Progress: &progress, ProgressEvery: time.Millisecond, Release: "test"})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Volumes) != 6 || len(m.Keyspaces) != 3 || !strings.Contains(progress.String(), "6 volumes frozen within") {
		t.Fatalf("manifest %+v, progress %q", m, progress.String())
	}
	if m.FrozenFrom.Before(m.Started) || m.FrozenTo.After(m.Finished) || m.FrozenTo.Before(m.FrozenFrom) {
		t.Fatalf("volumes frozen from %v to %v, outside the backup's %v to %v", m.FrozenFrom, m.FrozenTo, m.Started, m.Finished)
	}
	if _, err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // gone-soon's deadline passes

	fresh := testcluster.Start(t, 2)
	nc := fresh.Dial(t)
	if _, err := nc.Delete(ctx, testcluster.ReadyKey); err != nil {
		t.Fatal(err)
	}
	st, err := Restore(ctx, RestoreOptions{Client: nc, Dir: dir, MaxReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Keyspaces != 2 || st.Expired != 1 {
		t.Errorf("restore: %+v, want 2 keyspaces created and 1 key expired", st)
	}
	for i := range 100 {
		if _, ok, err := nc.Get(ctx, fmt.Sprintf("f/%04d", i)); err != nil || !ok {
			t.Fatalf("f/%04d (causal keyspace) restored: %v, %v", i, ok, err)
		}
	}
	for i := range 300 {
		if v, ok, err := nc.Get(ctx, fmt.Sprintf("u/%04d", i)); err != nil || !ok || string(v) != fmt.Sprintf("user %d", i) {
			t.Fatalf("u/%04d restored as %q, %v, %v", i, v, ok, err)
		}
	}
	if f, ok, err := nc.HashGet(ctx, "u/hash", nil); err != nil || !ok || len(f) != 2 {
		t.Errorf("hash restored as %v, %v", f, err)
	}
	if _, deadline, ok, err := nc.Deadline(ctx, "session"); err != nil || !ok || !deadline.Equal(later) {
		t.Errorf("session restored with deadline %v (%v, %v), want %v", deadline, ok, err, later)
	}
	if _, ok, _ := nc.Get(ctx, "gone-soon"); ok {
		t.Errorf("a key whose deadline passed before the restore was restored")
	}
	restored := map[int]bool{}
	var cur client.Cursor
	for !cur.Done() {
		keys, next, err := nc.Scan(ctx, cur, "w/*", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			var i int
			fmt.Sscanf(k, "w/%06d", &i)
			restored[i] = true
		}
		cur = next
	}
	ackedMu.Lock()
	defer ackedMu.Unlock()
	before := 0
	for i, at := range acked {
		if at.Before(m.FrozenFrom) {
			before++
			if !restored[i] {
				t.Errorf("w/%06d, acknowledged before the volumes were frozen, is not restored", i)
			}
		}
	}
	for i := range restored {
		if !called[i].Before(m.FrozenTo) {
			t.Errorf("w/%06d is restored, but its put began after the volumes were frozen", i)
		}
	}
	if before == 0 {
		t.Errorf("no write was acknowledged before the volumes were frozen")
	}
	t.Logf("%d writes acknowledged before the volumes were frozen (within %v), %d restored", before, m.FrozenTo.Sub(m.FrozenFrom), len(restored))

	// A cluster that holds keys is refused.
	if _, err := Restore(ctx, RestoreOptions{Client: nc, Dir: dir}); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("a restore into a cluster with keys: %v, want ErrNotEmpty", err)
	}
}

// A backup with a file altered, truncated or missing, or without its
// manifest, is refused before anything is written (or, by Objects,
// passed on); a good one is read back whole.
func TestRestoreRefusesABrokenBackup(t *testing.T) {
	dir := t.TempDir()
	vw, err := createVolumeFile(filepath.Join(dir, volumeFileName(0)))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := vw.add(client.ExportedObject{Key: k, Value: []byte("value of " + k)}); err != nil {
			t.Fatal(err)
		}
	}
	size, sum, err := vw.finish()
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Format: Format, Version: FormatVersion, Keyspaces: []client.Keyspace{{Name: "default", Volumes: 1}},
		Volumes: []Volume{{Volume: 0, Keyspace: "default", Objects: 3, File: volumeFileName(0), Bytes: size, SHA256: sum}}}
	if err := writeJSON(filepath.Join(dir, ManifestFile), m); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err != nil {
		t.Fatalf("a good backup: %v", err)
	}
	var keys []string
	if err := decodeVolumeFile(filepath.Join(dir, volumeFileName(0)), m.Volumes[0], func(o Object) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil || strings.Join(keys, ",") != "a,b,c" {
		t.Fatalf("decoded %v, %v", keys, err)
	}
	keys = nil
	if _, err := Objects(dir, func(v Volume, o Object) error {
		keys = append(keys, fmt.Sprintf("%d:%s=%s", v.Volume, o.Key, o.Value))
		return nil
	}); err != nil || strings.Join(keys, ",") != "0:a=value of a,0:b=value of b,0:c=value of c" {
		t.Fatalf("Objects read %v, %v", keys, err)
	}
	good, _ := os.ReadFile(filepath.Join(dir, volumeFileName(0)))

	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T)
		want   string
	}{
		{"a flipped byte", func(t *testing.T) {
			b := bytes.Clone(good)
			b[len(b)/2] ^= 1
			os.WriteFile(filepath.Join(dir, volumeFileName(0)), b, 0o644)
		}, "SHA-256"},
		{"a truncated file", func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, volumeFileName(0)), good[:len(good)-3], 0o644)
		}, "bytes"},
		{"a missing file", func(t *testing.T) { os.Remove(filepath.Join(dir, volumeFileName(0))) }, "no such file"},
		{"no manifest", func(t *testing.T) { os.Remove(filepath.Join(dir, ManifestFile)) }, "did not finish"},
		{"a manifest without a keyspace's volume", func(t *testing.T) {
			bad := m
			bad.Volumes = nil
			writeJSON(filepath.Join(dir, ManifestFile), bad)
		}, "has no file"},
		{"a manifest of another format", func(t *testing.T) {
			bad := m
			bad.Version = FormatVersion + 1
			writeJSON(filepath.Join(dir, ManifestFile), bad)
		}, "format version"},
		{"a wrong object count", func(t *testing.T) {
			bad := m
			bad.Volumes = []Volume{m.Volumes[0]}
			bad.Volumes[0].Objects = 4
			writeJSON(filepath.Join(dir, ManifestFile), bad)
		}, "holds 3 objects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, volumeFileName(0)), good, 0o644)
			writeJSON(filepath.Join(dir, ManifestFile), m)
			tc.break_(t)
			_, err := Verify(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v, want ErrCorrupt mentioning %q", err, tc.want)
			}
			// Restore checks before it dials anything.
			if _, err := Restore(context.Background(), RestoreOptions{Client: &client.Client{}, Dir: dir}); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Restore: %v, want ErrCorrupt", err)
			}
			read := 0
			if _, err := Objects(dir, func(Volume, Object) error { read++; return nil }); !errors.Is(err, ErrCorrupt) || read > 0 {
				t.Errorf("Objects: %v after %d objects, want ErrCorrupt before any", err, read)
			}
		})
	}
}

// Users and roles come along, password hashes included: restored with
// the certificate of one of the backup's admins into a new TLS cluster
// (whose first user must be the caller's own), every user and grant is
// back and authorization is on.
func TestBackupRestoresUsersAndRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := testcluster.Start(t, 1, testcluster.WithTLS())
	root := old.DialAs(t, "root")
	for _, step := range []func() (client.Auth, error){
		func() (client.Auth, error) { return root.AddUser(ctx, "root", "", client.AdminRole) },
		func() (client.Auth, error) { return root.AddUser(ctx, "alice", "s3cret", client.AdminRole) },
		func() (client.Auth, error) { return root.AddRole(ctx, "readers") },
		func() (client.Auth, error) {
			return root.GrantRole(ctx, "readers", client.Grant{Prefix: "pub/", Access: "read"})
		},
		func() (client.Auth, error) { return root.AddUser(ctx, "bob", "hunter2", "readers") },
	} {
		if _, err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := root.Put(ctx, "pub/1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	want, err := root.FetchAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Run(ctx, Options{Client: root, Dir: dir}); err != nil {
		t.Fatal(err)
	}

	fresh := testcluster.Start(t, 1, testcluster.WithTLS())
	nroot := fresh.DialAs(t, "root")
	if _, err := nroot.Delete(ctx, testcluster.ReadyKey); err != nil {
		t.Fatal(err)
	}
	st, err := Restore(ctx, RestoreOptions{Client: nroot, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st.Users != 3 || st.Roles != 1 {
		t.Errorf("restore added %d users and %d roles, want 3 and 1", st.Users, st.Roles)
	}
	got, err := nroot.FetchAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Users, got.Roles) != fmt.Sprint(want.Users, want.Roles) {
		t.Errorf("restored users and roles\n%+v\n%+v\nwant\n%+v\n%+v", got.Users, got.Roles, want.Users, want.Roles)
	}
	// Authorization is on: bob reads pub/ and writes nothing.
	bob := fresh.DialAs(t, "bob")
	if v, ok, err := bob.Get(ctx, "pub/1"); err != nil || !ok || string(v) != "hello" {
		t.Errorf("bob reads pub/1: %q, %v, %v", v, ok, err)
	}
	if err := bob.Put(ctx, "pub/2", []byte("x")); !errors.Is(err, client.ErrDenied) {
		t.Errorf("bob writes pub/2: %v, want ErrDenied", err)
	}
}

// A keyspace split before the backup (docs/adr/0031) is backed up as
// its map then names its volumes, every key in the one volume that
// holds it, and a split while a backup is taken fails the backup
// rather than leave the moved keys out.
func TestBackupOfASplitKeyspace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := testcluster.Start(t, 3)
	c := old.Dial(t)
	if _, err := c.CreateKeyspace(ctx, client.Keyspace{Name: "users", Prefix: "u/", Mode: "strong", Replicas: 3, Volumes: 2}); err != nil {
		t.Fatal(err)
	}
	put := func(prefix string, n int) {
		for i := range n {
			if err := c.Put(ctx, fmt.Sprintf("u/%04d", i), []byte(fmt.Sprintf("%s %d", prefix, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("before", 200)
	k, err := c.SplitKeyspace(ctx, "users", 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if started, volumes := client.SplitDone(st, k); started == volumes {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	put("after", 100) // (keys that moved, and keys that stayed)

	dir := t.TempDir()
	m, err := Run(ctx, Options{Client: c, Dir: dir, Keyspaces: []string{"users"}, Release: "test"})
	if err != nil {
		t.Fatal(err)
	}
	objects := int64(0)
	for _, v := range m.Volumes {
		objects += v.Objects
		if v.Splits != 1 {
			t.Errorf("volume %d read with %d splits, want 1", v.Volume, v.Splits)
		}
	}
	if len(m.Volumes) != 4 || objects != 200 {
		t.Fatalf("backup of users split once: %d volumes, %d objects; want 4 and 200", len(m.Volumes), objects)
	}

	fresh := testcluster.Start(t, 1)
	nc := fresh.Dial(t)
	if _, err := nc.Delete(ctx, testcluster.ReadyKey); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, RestoreOptions{Client: nc, Dir: dir, MaxReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		want := fmt.Sprintf("before %d", i)
		if i < 100 {
			want = fmt.Sprintf("after %d", i)
		}
		if v, ok, err := nc.Get(ctx, fmt.Sprintf("u/%04d", i)); err != nil || !ok || string(v) != want {
			t.Fatalf("u/%04d restored as %q, %v, %v; want %q", i, v, ok, err, want)
		}
	}

	// Split while a backup is taken: it fails, and says why.
	if err := unsplit(ctx, c, []client.Keyspace{k}); err != nil {
		t.Fatalf("no split since: %v", err)
	}
	// The split is another client's: this one has not heard of it.
	if _, err := old.Dial(t).SplitKeyspace(ctx, "users", 1); err != nil {
		t.Fatal(err)
	}
	if err := unsplit(ctx, c, []client.Keyspace{k}); err == nil || !strings.Contains(err.Error(), "was split while the backup was taken") {
		t.Errorf("a split during the backup: %v", err)
	}
}
