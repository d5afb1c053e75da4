package cli

import (
	"os"
	"runtime/pprof"
)

// StartCPUProfile writes a CPU profile of the process to path until the
// returned function runs; an empty path profiles nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
