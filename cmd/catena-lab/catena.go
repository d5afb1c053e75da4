package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
)

// catenaBinary returns the catena binary the lab's harnesses run as a
// cluster's processes: catena beside this executable (both built into
// one directory, go build -o DIR/ ./cmd/catena ./cmd/catena-lab, or
// installed by go install ./cmd/...), else one that go build makes from
// the module in the working directory (go run ./cmd/catena-lab ...),
// with this binary's build tags (catena_unsafe), in a temporary
// directory that cleanup removes.
func catenaBinary() (path string, cleanup func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	if beside, ok := catenaBeside(exe); ok {
		return beside, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "catena-lab-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "catena")
	args := []string{"build", "-o", path}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-tags" && s.Value != "" {
				args = append(args, "-tags", s.Value)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "catena-lab: no catena beside %s; building one: go build%s ./cmd/catena\n", exe, joinArgs(args[1:]))
	if out, err := exec.Command("go", append(args, "github.com/catena-kv/catena/cmd/catena")...).CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("no catena binary beside %s, and go build failed (%v): %s\nbuild both into one directory: go build -o DIR/ ./cmd/catena ./cmd/catena-lab", exe, err, out)
	}
	return path, cleanup, nil
}

// orCatenaBinary sets *path to catenaBinary's when it is empty (a
// harness's -binary flag not given); cleanup removes a binary it built.
func orCatenaBinary(path *string) (cleanup func(), err error) {
	if *path != "" {
		return func() {}, nil
	}
	*path, cleanup, err = catenaBinary()
	return cleanup, err
}

// catenaBeside returns the catena binary in the directory of exe (a
// symbolic link followed), if there is one.
func catenaBeside(exe string) (string, bool) {
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	beside := filepath.Join(filepath.Dir(exe), "catena")
	info, err := os.Stat(beside)
	return beside, err == nil && !info.IsDir()
}
