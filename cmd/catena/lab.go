package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/catena-kv/catena/internal/cli"
)

// labBinary names the binary of the lab's commands (cmd/catena-lab).
const labBinary = "catena-lab"

// runLab runs a lab command (sim, bench, experiment, torture), which
// moved to catena-lab: catena-lab beside this executable (both built
// into one directory, or installed by go install) replaces this process,
// as git runs git-NAME; without one, it says where the command went.
func runLab(cmd string, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	lab := filepath.Join(filepath.Dir(exe), labBinary)
	if info, err := os.Stat(lab); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
		err := syscall.Exec(lab, append([]string{lab, cmd}, args...), os.Environ())
		return fmt.Errorf("running %s: %w", lab, err)
	}
	quoted := []string{cmd}
	for _, a := range args {
		quoted = append(quoted, shellQuote(a))
	}
	return cli.UsageErrorf("moved to %s: go run ./cmd/%s %s (or build both binaries into one directory, go build -o DIR/ ./cmd/catena ./cmd/%s, and catena %s runs DIR/%s)",
		labBinary, labBinary, strings.Join(quoted, " "), labBinary, cmd, labBinary)
}
