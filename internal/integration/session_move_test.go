package integration

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/catena-kv/catena/client"
)

// A session moving between sites on real processes, two sites 20 ms
// apart (issue 32 item 7.3): while site 1 is cut off, Client.WaitFor at
// site 2 fails at its deadline naming the move, the site that lacks the
// past and the site it comes from; once the cut heals it returns, and
// the session reads its write at site 2.
func TestSessionMoveNamesWhatIsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	sites := startSites(t, sitesCase{sites: 2, masters: 1, servers: 3, volumes: 1, k: 1, t: 3, rtt: 20 * time.Millisecond})
	at1, ctx := dial(t, sites[0].mAddr)
	at2, _ := dial(t, sites[1].mAddr)
	setCuts(t, sites, sites[0])
	if err := at1.Put(ctx, "moved", []byte("v")); err != nil {
		t.Fatal(err)
	}
	past := at1.CausalPast()
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	err := at2.WaitFor(short, past)
	cancel()
	want := regexp.MustCompile(`session move: site 2 \(site2\) has not yet received update \d+ from site 1 \(site1\) \(key "moved"\): context deadline exceeded`)
	if !errors.Is(err, client.ErrUnavailable) || !want.MatchString(err.Error()) {
		t.Fatalf("WaitFor while site 1 is cut off: %v; want it to match %s", err, want)
	}
	t.Logf("while cut off: %v", err)
	setCuts(t, sites, nil)
	began := time.Now()
	if err := at2.WaitFor(ctx, past); err != nil {
		t.Fatalf("WaitFor once the cut healed: %v", err)
	}
	t.Logf("WaitFor returned %s after the cut healed", time.Since(began).Round(time.Millisecond))
	if v, found, err := at2.Get(ctx, "moved"); err != nil || !found || string(v) != "v" {
		t.Fatalf("the moved session's read at site 2: %q %v %v", v, found, err)
	}
}
