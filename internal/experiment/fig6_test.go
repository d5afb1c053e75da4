package experiment

import (
	"bytes"
	"encoding/csv"
	"io"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// The paper's qualitative claims about Figure 6 (CR §5.3) that hold in our
// run, on the --quick scale (12 servers, 300 volumes, 8 minutes, the
// failure at 2:00, the reboot at 3:00; the same detector, watchdog and
// load). See docs/experiments.md for the ones that do not.
func TestFig6QuickShowsThePapersClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("two 8-minute load simulations; skipped with -short")
	}
	runs, err := RunFig6(Options{Quick: true, Seed: 1, Workers: 2, Progress: io.Discard, ProgressEvery: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || len(runs[0].Failed) != 1 || len(runs[1].Failed) != 2 {
		t.Fatalf("want scenarios with one and two failed servers, got %d runs", len(runs))
	}
	for _, r := range runs {
		p := r.Params
		s := r.Summary()
		t.Log(s)
		// Throughput is near zero from the failure until the master has
		// removed the failed servers, which takes about the failure
		// timeout (10 s, less the age of the last heartbeat).
		if s.Removed < p.FailureTimeout-p.HeartbeatInterval || s.Removed > p.FailureTimeout+2*p.TickInterval {
			t.Errorf("%s: failed servers removed %v after the failure, want about the failure timeout %v", r.Scenario, s.Removed, p.FailureTimeout)
		}
		if s.OutageQueries > 0.1*s.PreQueries || s.OutageUpdates > 0.4*s.PreUpdates {
			t.Errorf("%s: %.1f queries/s and %.2f updates/s until removal, against %.1f and %.2f before: not near zero",
				r.Scenario, s.OutageQueries, s.OutageUpdates, s.PreQueries, s.PreUpdates)
		}
		// ... and comes back once the clients' watchdogs have moved on: a
		// client gives up on a request after the watchdog, and its next
		// request leaves before it has the new configuration, so it may
		// be stuck once more; throughput is counted per second.
		if s.QueriesBack <= s.Removed || s.QueriesBack > s.Removed+2*p.Watchdog+2*wire.Second {
			t.Errorf("%s: queries back to 90%% %v after the failure, removal at %v", r.Scenario, s.QueriesBack, s.Removed)
		}
		// Update throughput after the removal is at least what it was:
		// some chains are shorter.
		if s.DegradedUpdates < s.PreUpdates {
			t.Errorf("%s: %.2f updates/s between removal and reboot, %.2f before", r.Scenario, s.DegradedUpdates, s.PreUpdates)
		}
		// Query throughput dips while a server is missing and recovers.
		if s.DegradedQueries >= 0.99*s.PreQueries {
			t.Errorf("%s: %.1f queries/s between removal and reboot, %.1f before: no dip", r.Scenario, s.DegradedQueries, s.PreQueries)
		}
		if s.FinalQueries <= s.DegradedQueries || s.FinalQueries < 0.95*s.PreQueries {
			t.Errorf("%s: %.1f queries/s at the end, %.1f during the dip, %.1f before: not recovered", r.Scenario, s.FinalQueries, s.DegradedQueries, s.PreQueries)
		}
		// Every chain is back to t members, and the rebooted servers took
		// part: they are in fewer chains than the others. They joined each
		// at its tail, but role moves gave them heads and took tails: they
		// hold about their share of each role (a third of their chains),
		// within the policy's slack (a quarter of the share, and one).
		if s.Repaired == 0 || s.MinChain != p.T || s.MaxChain != p.T {
			t.Errorf("%s: chain lengths %d..%d at the end, repaired %v after the failure", r.Scenario, s.MinChain, s.MaxChain, s.Repaired)
		}
		if s.Joins == 0 || s.RebootedVolumes == 0 || float64(s.RebootedVolumes)/float64(len(r.Failed)) >= s.OtherVolumes {
			t.Errorf("%s: rebooted servers joined %d chains and are in %d at the end, other servers in %.1f each",
				r.Scenario, s.Joins, s.RebootedVolumes, s.OtherVolumes)
		}
		share := float64(s.RebootedVolumes) / float64(p.T)
		slack := share/4 + float64(len(r.Failed))
		if float64(s.RebootedTails) > share+slack || float64(s.RebootedHeads) < share-slack {
			t.Errorf("%s: the rebooted servers are heads of %d and tails of %d of their %d chains; want about %.1f each",
				r.Scenario, s.RebootedHeads, s.RebootedTails, s.RebootedVolumes, share)
		}
	}

	var b bytes.Buffer
	if err := WriteFig6CSV(&b, runs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows[0], ","); !strings.HasPrefix(got, "scenario,minute,query_throughput,update_throughput") {
		t.Errorf("header %q", got)
	}
	if want := 1 + len(runs[0].Rows()) + len(runs[1].Rows()); len(rows) != want {
		t.Errorf("%d rows, want %d", len(rows), want)
	}
}
