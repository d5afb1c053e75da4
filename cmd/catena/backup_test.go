package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// The operator's path of docs/operations.md "Backup and restore": catena
// backup of a catena dev cluster under load, restored with catena
// restore into a new catena dev cluster in a new directory, which then
// serves every key acknowledged before the backup began.
func TestBackupOfADevClusterRestoresIntoANewOne(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two local clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := freeBasePort(t, 3)
	old := startDev(t, nil, "-insecure", "-redis", "off", "-volumes", "2", "-replicas", "3", "-base-port", strconv.Itoa(base))
	old.awaitBanner()
	oldMaster := fmt.Sprintf("127.0.0.1:%d", base)
	c, err := client.Dial(ctx, oldMaster)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 500 {
		if err := c.Put(ctx, fmt.Sprintf("k/%04d", i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}

	// A writer adds keys while the backup runs.
	var mu sync.Mutex
	ackedAt := map[string]time.Time{}
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
			key := fmt.Sprintf("w/%06d", i)
			if c.Put(ctx, key, []byte("w")) == nil {
				mu.Lock()
				ackedAt[key] = time.Now()
				mu.Unlock()
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	dir := filepath.Join(t.TempDir(), "backup")
	began := time.Now()
	out, err := exec.Command(catenaBinary(t), "backup", "-master", oldMaster, "-out", dir, "-rate", "4M").CombinedOutput()
	close(stop)
	wg.Wait()
	if err != nil || !strings.Contains(string(out), "backup: done: 1 keyspaces, 2 volumes") {
		t.Fatalf("catena backup: %v\n%s", err, out)
	}
	if out, err := exec.Command(catenaBinary(t), "restore", "-verify", "-from", dir).CombinedOutput(); err != nil || !strings.Contains(string(out), "is a whole backup") {
		t.Fatalf("catena restore -verify: %v\n%s", err, out)
	}

	base2 := freeBasePort(t, 3)
	for base2 == base {
		base2 = freeBasePort(t, 3)
	}
	fresh := startDev(t, nil, "-insecure", "-redis", "off", "-servers", "4", "-volumes", "3", "-replicas", "2", "-base-port", strconv.Itoa(base2))
	fresh.awaitBanner()
	newMaster := fmt.Sprintf("127.0.0.1:%d", base2)
	out, err = exec.Command(catenaBinary(t), "restore", "-master", newMaster, "-from", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "restore: done") {
		t.Fatalf("catena restore: %v\n%s", err, out)
	}
	nc, err := client.Dial(ctx, newMaster)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i := range 500 {
		if v, ok, err := nc.Get(ctx, fmt.Sprintf("k/%04d", i)); err != nil || !ok || string(v) != strconv.Itoa(i) {
			t.Fatalf("k/%04d in the restored cluster: %q, %v, %v", i, v, ok, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	checked := 0
	for key, at := range ackedAt {
		if !at.Before(began) {
			continue
		}
		checked++
		if _, ok, err := nc.Get(ctx, key); err != nil || !ok {
			t.Errorf("%s, acknowledged before the backup began, is missing from the restored cluster (%v)", key, err)
		}
	}
	if checked == 0 {
		t.Error("no write was acknowledged before the backup began")
	}
	// A second restore into the same cluster is refused: it holds keys.
	if out, err := exec.Command(catenaBinary(t), "restore", "-master", newMaster, "-from", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "holds keys already") {
		t.Errorf("a restore into a cluster with keys: %v\n%s", err, out)
	}
}
