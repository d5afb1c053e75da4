package storage

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFdatasync measures what one group commit's sync costs this
// host, outside Pebble: a 4 KiB write and an fdatasync, reported as wall
// time per sync (ns/op) and as this process's CPU per sync (cpu-ns/op,
// user and system time from getrusage). Every replica of a chain pays one
// per group commit (ADR 17), so on a host where a sync costs CPU, and not
// only time, it bounds the CPU per replicated write (docs/benchmarks.md,
// issue 36).
//
//   - append: each write extends the file, as a new write-ahead log's
//     writes do (the file system journals the new size or the written
//     extent with each sync);
//   - preallocated: the file's blocks were allocated (fallocate) but
//     never written, as Pebble preallocates a new WAL: each sync converts
//     an unwritten extent, metadata again;
//   - overwrite: the blocks were written and synced before, as a recycled
//     WAL's are (Pebble recycles obsolete WAL files after memtable
//     flushes): only the data is synced.
func BenchmarkFdatasync(b *testing.B) {
	const block = 4096
	for _, c := range []struct {
		name    string
		prepare func(f *os.File, n int) error
	}{
		{"append", func(*os.File, int) error { return nil }},
		{"preallocated", func(f *os.File, n int) error {
			return syscall.Fallocate(int(f.Fd()), 0, 0, int64(n*block))
		}},
		{"overwrite", func(f *os.File, n int) error {
			if _, err := f.Write(make([]byte, n*block)); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			_, err := f.Seek(0, 0)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := c.prepare(f, b.N); err != nil {
				b.Skipf("%s: %v", c.name, err)
			}
			buf := make([]byte, block)
			before := processCPU()
			b.ResetTimer()
			for range b.N {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
