// Package testbin builds Catena's binary once per test process, for tests
// that run it as separate processes (real-process integration tests,
// catena dev, the benchmark harness).
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
//	bin := testbin.Catena(t)
//
// Under the race detector (go test -race) the binary is built with it
// too, so the processes the tests start are checked as well: each writes
// what it finds to a report file (GORACE log_path) and stops at the first
// race, and the test that started it fails with the report.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error

	// reportsMu guards reported.
	reportsMu sync.Mutex
	// reported names the race reports a test has failed with already.
	reported = map[string]bool{}
)

// raceReportPrefix starts the name of the race report files, in dir, of
// the processes the tests start (GORACE log_path: one per process,
// suffixed with its pid).
const raceReportPrefix = "race-report"

// Catena returns the path of cmd/catena built from this tree, building it
// on the first call. With -short it skips the test: such tests start
// processes. Under the race detector, tb fails when it ends if a process
// started meanwhile reported a data race.
func Catena(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds the binary and starts processes")
	}
	once.Do(build)
	if err != nil {
		tb.Fatal(err)
	}
	if raceEnabled {
		tb.Cleanup(func() {
			if reports := newRaceReports(); reports != "" {
				tb.Errorf("a process the tests started reported a data race while this test ran:\n%s", reports)
			}
		})
	}
	return path
}

// tagged holds the binaries CatenaTagged built, by tags.
var tagged = struct {
	sync.Mutex
	paths map[string]string
}{paths: map[string]string{}}

// CatenaTagged returns the path of cmd/catena built from this tree with
// the build tags tags (another build than Catena's: a test build that
// plays the next release, say), building it on the first call for those
// tags, beside Catena's and with the race detector if that has it.
func CatenaTagged(tb testing.TB, tags string) string {
	tb.Helper()
	Catena(tb) // the directory, GORACE, the skip with -short
	tagged.Lock()
	defer tagged.Unlock()
	if p, ok := tagged.paths[tags]; ok {
		return p
	}
	p := filepath.Join(dir, "catena-"+strings.ReplaceAll(tags, ",", "-"))
	args := []string{"build", "-tags", tags, "-o", p}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "github.com/catena-kv/catena/cmd/catena")...).CombinedOutput(); err != nil {
		tb.Fatalf("go build -tags %s: %v\n%s", tags, err, out)
	}
	tagged.paths[tags] = p
	return p
}

// build builds the binary into a new temporary directory, with the race
// detector if this test binary has it, and then has every process the
// tests start write its race reports there.
func build() {
	if dir, err = os.MkdirTemp("", "catena-test-bin-"); err != nil {
		return
	}
	path = filepath.Join(dir, "catena")
	args := []string{"build", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, buildErr := exec.Command("go", append(args, "github.com/catena-kv/catena/cmd/catena")...).CombinedOutput(); buildErr != nil {
		err = fmt.Errorf("go build: %v\n%s", buildErr, out)
		return
	}
	if raceEnabled {
		// Options the caller set in GORACE come last and win.
		options := "log_path=" + filepath.Join(dir, raceReportPrefix) + " halt_on_error=1"
		err = os.Setenv("GORACE", strings.TrimSpace(options+" "+os.Getenv("GORACE")))
	}
}

// newRaceReports returns the race reports the started processes wrote
// since the last call, each headed by its file's name; "" if none.
func newRaceReports() string {
	reportsMu.Lock()
	defer reportsMu.Unlock()
	files, _ := filepath.Glob(filepath.Join(dir, raceReportPrefix+".*"))
	slices.Sort(files)
	var b strings.Builder
	for _, f := range files {
		if reported[f] {
			continue
		}
		reported[f] = true
		text, readErr := os.ReadFile(f)
		if readErr != nil {
			text = []byte(readErr.Error())
		}
		fmt.Fprintf(&b, "%s:\n%s\n", filepath.Base(f), text)
	}
	return b.String()
}

// Main runs the tests and removes the binary Catena built, then runs
// atExit (say, removing other files the tests shared): call it as the
// package's TestMain. A race report no test claimed (a process that
// outlived its test) fails the run.
func Main(m *testing.M, atExit ...func()) {
	code := m.Run()
	if dir != "" {
		if reports := newRaceReports(); reports != "" {
			fmt.Fprintf(os.Stderr, "a process the tests started reported a data race after its test ended:\n%s", reports)
			code = max(code, 1)
		}
		os.RemoveAll(dir)
	}
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}
