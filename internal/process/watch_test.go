package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// scrapeGauge returns the value of the series name{volume="0"} a
// server's /metrics serves, and whether it is there.
func scrapeGauge(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	prefix := name + `{volume="0"} `
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, s.Text(), err)
			}
			return f, true
		}
	}
	io.Copy(io.Discard, resp.Body)
	return 0, false
}

// A server's metrics and the master's status show the watches a replica
// holds and its watch window, read on the loops' own goroutines while
// a writer keeps them busy (run with -race).
func TestWatchMetricsAndStatus(t *testing.T) {
	mAddr, sAddr, httpAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	m, err := NewMaster(masterConfig(t, mAddr, wire.NodeID(sAddr)))
	if err != nil {
		t.Fatal(err)
	}
	sc := serverConfig(t, sAddr, wire.NodeID(mAddr))
	sc.HTTP = httpAddr
	s, err := NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, proc := range []Process{s, m} {
		running.Go(func() { Run(ctx, proc) })
	}
	defer running.Wait()
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	cl, err := client.Dial(dctx, mAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const puts = 20
	for i := range puts {
		if err := cl.Put(dctx, fmt.Sprintf("other/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// A writer of keys the watch does not match: the member holds the
	// watch while its loops step the writes.
	var writer sync.WaitGroup
	wctx, stopWriter := context.WithCancel(dctx)
	defer writer.Wait()
	defer stopWriter()
	writer.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			cl.Put(wctx, fmt.Sprintf("other/w%d", i%50), []byte("v"))
		}
	})
	w, err := cl.Watch(dctx, "watched/", client.WatchHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	await := func(what string, done func() string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got := done()
			if got == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, got)
			}
		}
	}
	await("the metrics show the watch and the window", func() string {
		watches, ok := scrapeGauge(t, httpAddr, "catena_replica_watches")
		window, ok2 := scrapeGauge(t, httpAddr, "catena_replica_watch_window_updates")
		if !ok || !ok2 || watches < 1 || window < puts {
			return fmt.Sprintf("catena_replica_watches %v (served: %v), catena_replica_watch_window_updates %v (served: %v); want at least 1 and at least %d", watches, ok, window, ok2, puts)
		}
		return ""
	})
	await("the master's status shows the watch", func() string {
		st, err := cl.Status(dctx)
		if err != nil {
			return err.Error()
		}
		for _, srv := range st.Servers {
			for _, v := range srv.Volumes {
				if srv.Addr == sAddr && v.Volume == 0 && v.Watches >= 1 {
					return ""
				}
			}
		}
		return fmt.Sprintf("%+v", st.Servers)
	})
	w.Close()
	await("the metrics show no watch once it closed", func() string {
		if watches, _ := scrapeGauge(t, httpAddr, "catena_replica_watches"); watches != 0 {
			return fmt.Sprintf("catena_replica_watches %v", watches)
		}
		return ""
	})
}
