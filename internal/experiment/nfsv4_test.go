package experiment

import (
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// quickNFSv4 runs the quick build-like workload once.
func quickNFSv4(t *testing.T, mode NFSv4Mode, sites int, rttMS float64, idle wire.Time) NFSv4Result {
	t.Helper()
	res, err := RunNFSv4(NFSv4Run{Mode: mode, Sites: sites, RTT: msTime(rttMS), Idle: idle, Costs: DefaultNFSv4Costs, Seed: 1}, true)
	if err != nil {
		t.Fatalf("%s, %d sites, %g ms: %v", mode, sites, rttMS, err)
	}
	return res
}

// The paper's Fig. 6 claim, on the quick workload: with hierarchical
// control the penalty for a replica 120 ms away is small, while
// fine-grained control pays an election per new key and a remote server
// a round trip per operation.
func TestNFSv4HierarchicalControlHidesTheWAN(t *testing.T) {
	local := quickNFSv4(t, NFSv4Local, 2, 120, wire.Second).Total()
	hier := quickNFSv4(t, NFSv4Hierarchical, 2, 120, wire.Second)
	fine := quickNFSv4(t, NFSv4FineGrained, 2, 120, wire.Second)
	remote := quickNFSv4(t, NFSv4Remote, 2, 120, wire.Second).Total()
	t.Logf("build at 120 ms: local %s, hierarchical %s (%d elections), fine-grained %s (%d elections), remote %s",
		local, hier.Total(), hier.Elections, fine.Total(), fine.Elections, remote)
	if hier.Total() > local*3/2 {
		t.Errorf("hierarchical control took %s, more than 1.5× the local server's %s", hier.Total(), local)
	}
	if !(hier.Total() < fine.Total() && fine.Total() < remote) {
		t.Errorf("want hierarchical < fine-grained < remote; got %s, %s, %s", hier.Total(), fine.Total(), remote)
	}
	if hier.Elections*5 > fine.Elections {
		t.Errorf("hierarchical control waited for %d elections, fine-grained %d: deep control should save most", hier.Elections, fine.Elections)
	}
}

// The paper's Fig. 7 claim: a shorter idle time costs elections in the
// build phase, whose CPU gaps outlast it; unpack hardly changes.
func TestNFSv4ShortIdleTimeCostsTheBuildPhase(t *testing.T) {
	short := quickNFSv4(t, NFSv4Hierarchical, 2, 120, 100*wire.Millisecond)
	long := quickNFSv4(t, NFSv4Hierarchical, 2, 120, wire.Second)
	t.Logf("idle 0.1 s: phases %v; idle 1 s: phases %v", short.Phase, long.Phase)
	if short.Phase[2] <= long.Phase[2] {
		t.Errorf("build phase with idle 0.1 s took %s, not more than with 1 s (%s)", short.Phase[2], long.Phase[2])
	}
	if short.Phase[0] != long.Phase[0] {
		t.Errorf("unpack took %s with idle 0.1 s and %s with 1 s; its writes follow each other closely", short.Phase[0], long.Phase[0])
	}
}

// The same run twice gives the same result: the experiment's files
// depend on the seed alone.
func TestNFSv4RunIsDeterministic(t *testing.T) {
	a := quickNFSv4(t, NFSv4Hierarchical, 3, 40, 500*wire.Millisecond)
	b := quickNFSv4(t, NFSv4Hierarchical, 3, 40, 500*wire.Millisecond)
	if a != b {
		t.Fatalf("two runs differ: %+v and %+v", a, b)
	}
}
