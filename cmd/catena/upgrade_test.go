package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/release"
	"github.com/catena-kv/catena/internal/testcluster"
)

// catena upgrade status lists what each process speaks; finalize raises
// the cluster version only to one every process speaks.
func TestUpgradeStatusAndFinalize(t *testing.T) {
	c := testcluster.Start(t, 3)
	master := c.MasterAddr()
	code, stdout, stderr := runCatena(t, "", "upgrade", "status", "-master", master)
	if code != 0 {
		t.Fatalf("upgrade status: exit status %d, stderr %q", code, stderr)
	}
	p := release.Speaks.String()
	// A new cluster runs at its release's newest version.
	current := fmt.Sprintf("cluster protocol version %d", release.ProtocolMax)
	if !strings.Contains(stdout, current+"\n") || !strings.Contains(stdout, "master (leader)") ||
		!strings.Contains(stdout, release.Version) || strings.Count(stdout, "server ") != 3 || strings.Count(stdout, "  "+p+" ") < 4 {
		t.Errorf("upgrade status printed:\n%s", stdout)
	}
	code, stdout, stderr = runCatena(t, "", "upgrade", "finalize", "-master", master)
	if code != 0 || stdout != fmt.Sprintf("%s (was %d)\n", current, release.ProtocolMax) {
		t.Errorf("upgrade finalize: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runCatena(t, "", "upgrade", "finalize", "-version", "99", "-master", master)
	if code == 0 || !strings.Contains(stderr, "not 99: upgrade it first") {
		t.Errorf("finalize to a version no process speaks: exit status %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCatena(t, "", "upgrade", "rollback", "-master", master); code != 2 || !strings.Contains(stderr, "want status or finalize") {
		t.Errorf("upgrade rollback: exit status %d, stderr %q", code, stderr)
	}
}
