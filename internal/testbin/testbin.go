// Package testbin builds Catena's binary once per test process, for tests
// that run it as separate processes (real-process integration tests,
// catena dev, the benchmark harness).
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
//	bin := testbin.Catena(t)
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Catena returns the path of cmd/catena built from this tree, building it
// on the first call. With -short it skips the test: such tests start
// processes.
func Catena(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds the binary and starts processes")
	}
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "catena-test-bin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "catena")
		if out, buildErr := exec.Command("go", "build", "-o", path, "github.com/catena-kv/catena/cmd/catena").CombinedOutput(); buildErr != nil {
			err = fmt.Errorf("go build: %v\n%s", buildErr, out)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Main runs the tests and removes the binary Catena built, then runs
// atExit (say, removing other files the tests shared): call it as the
// package's TestMain.
func Main(m *testing.M, atExit ...func()) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}
