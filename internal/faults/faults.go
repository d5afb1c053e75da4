// Package faults injects faults into a catena process for fault testing
// (catena-lab torture, docs/torture.md): a control file, named by the
// environment variable CATENA_FAULTS, says how far and how fast the
// process's protocol clock is off and whether its disk fails. The process
// reads the file when it starts and again every PollInterval; the harness
// rewrites it (WriteFile) to start and end a fault.
//
// Without the variable nothing is injected and nothing runs: FromEnv
// returns a nil *Injector, whose methods leave the clock and the file
// system as they are, so a production process pays one environment
// lookup at start.
package faults

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EnvVar names the environment variable that holds the control file's
// path.
const EnvVar = "CATENA_FAULTS"

// PollInterval is how often a process re-reads its control file.
const PollInterval = 100 * time.Millisecond

// Disk is a fault of the disk under a process's Pebble databases.
type Disk string

// The disk faults.
const (
	// DiskOK injects nothing.
	DiskOK Disk = ""
	// DiskFull fails every write that needs space with ENOSPC: a write
	// writes half its bytes, then fails (a short write, as write(2) does
	// when the disk fills); creating a file, a link or a directory and
	// preallocating fail.
	DiskFull Disk = "enospc"
	// DiskSyncError fails every fsync (of a file or a directory) with EIO.
	DiskSyncError Disk = "fsync-error"
)

// Faults is what a control file asks for. The zero value asks for
// nothing.
type Faults struct {
	// ClockOffset is added to the process's protocol clock: changing it
	// makes the clock jump, forward or back.
	ClockOffset time.Duration
	// ClockRate is how fast the protocol clock runs against real time
	// from the moment it is read (2: twice as fast); 0 means 1. A change
	// of rate does not make the clock jump.
	ClockRate float64
	// Disk is the disk fault in force.
	Disk Disk
}

// rate returns the clock's rate, 1 for the zero value.
func (f Faults) rate() float64 {
	if f.ClockRate == 0 {
		return 1
	}
	return f.ClockRate
}

// String returns the control file's text for f, one "key=value" a line
// (Parse's input); the zero Faults is the empty text.
func (f Faults) String() string {
	var b strings.Builder
	if f.ClockOffset != 0 {
		fmt.Fprintf(&b, "clock-offset=%s\n", f.ClockOffset)
	}
	if f.ClockRate != 0 && f.ClockRate != 1 {
		fmt.Fprintf(&b, "clock-rate=%s\n", strconv.FormatFloat(f.ClockRate, 'g', -1, 64))
	}
	if f.Disk != DiskOK {
		fmt.Fprintf(&b, "disk=%s\n", f.Disk)
	}
	return b.String()
}

// describe is f for a log line.
func (f Faults) describe() string {
	return fmt.Sprintf("clock offset %s, clock rate %g, disk %s", f.ClockOffset, f.rate(), cmp.Or(string(f.Disk), "ok"))
}

// Parse reads a control file: lines of "key=value", where key is
// clock-offset (a Go duration, may be negative), clock-rate (a positive
// number, at most 1000) or disk (enospc, fsync-error, or none); blank
// lines and lines starting with # are ignored, and a key given twice
// keeps the last value. Anything else is an error naming the line.
func Parse(text string) (Faults, error) {
	var f Faults
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		bad := func(format string, args ...any) (Faults, error) {
			return Faults{}, fmt.Errorf("line %d (%q): %s", i+1, line, fmt.Sprintf(format, args...))
		}
		if !ok {
			return bad("want key=value")
		}
		switch key {
		case "clock-offset":
			d, err := time.ParseDuration(value)
			if err != nil {
				return bad("clock-offset: %v", err)
			}
			f.ClockOffset = d
		case "clock-rate":
			r, err := strconv.ParseFloat(value, 64)
			if err != nil || !(r > 0 && r <= 1000) {
				return bad("clock-rate must be a number above 0 and at most 1000")
			}
			f.ClockRate = r
			if r == 1 {
				f.ClockRate = 0
			}
		case "disk":
			switch Disk(value) {
			case DiskFull, DiskSyncError:
				f.Disk = Disk(value)
			case "none":
				f.Disk = DiskOK
			default:
				return bad("disk must be enospc, fsync-error or none")
			}
		default:
			return bad("unknown key %q: want clock-offset, clock-rate or disk", key)
		}
	}
	return f, nil
}

// WriteFile replaces the control file at path with f's text, atomically
// (a new file renamed over the old one), so a process never reads half
// of it.
func WriteFile(path string, f Faults) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(f.String()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Injector applies a control file's faults to one process. A nil
// *Injector injects nothing.
type Injector struct {
	path string
	log  *slog.Logger
	// current is the faults in force, read by the clock and the file
	// system on every call.
	current atomic.Pointer[Faults]
	// text is the control file's content last read (under mu).
	mu   sync.Mutex
	text []byte
}

// FromEnv returns the injector of the control file CATENA_FAULTS names,
// or nil if the variable is unset or empty. It reads the file once (see
// Open) and logs a warning that faults are injected.
func FromEnv(log *slog.Logger) (*Injector, error) {
	path := os.Getenv(EnvVar)
	if path == "" {
		return nil, nil
	}
	in, err := Open(path, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	in.log.Warn("fault injection enabled: the control file "+EnvVar+" names may skew this process's clock and fail its disk (fault testing only)",
		"file", path, "faults", in.Faults().describe())
	return in, nil
}

// Open returns the injector of the control file at path, with the faults
// it asks for now. A missing file asks for nothing; a file that cannot
// be read or parsed is an error.
func Open(path string, log *slog.Logger) (*Injector, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := &Injector{path: path, log: log}
	in.current.Store(&Faults{})
	if err := in.Reload(); err != nil {
		return nil, err
	}
	return in, nil
}

// Faults returns the faults in force (none for a nil injector).
func (in *Injector) Faults() Faults {
	if in == nil {
		return Faults{}
	}
	return *in.current.Load()
}

// Poll re-reads the control file every PollInterval until ctx ends. A
// file that cannot be read or parsed is logged (once while it stays the
// same) and changes nothing: the faults in force stay. It returns at once
// for a nil injector.
func (in *Injector) Poll(ctx context.Context) {
	if in == nil {
		return
	}
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	logged := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := in.Reload()
			if err != nil && err.Error() != logged {
				in.log.Error("fault injection: ignoring the control file", "file", in.path, "error", err)
			}
			logged = ""
			if err != nil {
				logged = err.Error()
			}
		}
	}
}

// Reload reads the control file now and, if its text changed, puts its
// faults in force and logs them.
func (in *Injector) Reload() error {
	text, err := os.ReadFile(in.path)
	if errors.Is(err, os.ErrNotExist) {
		text, err = nil, nil
	}
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.text != nil && bytes.Equal(text, in.text) {
		return nil
	}
	f, err := Parse(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", in.path, err)
	}
	in.text = text
	if in.text == nil {
		in.text = []byte{}
	}
	if old := in.current.Swap(&f); *old != f {
		in.log.Warn("fault injection: faults changed", "faults", f.describe(), "was", old.describe())
	}
	return nil
}

// Warp returns the clock transformation for node.Loop.Warp: it maps the
// real time elapsed since the loop started to the protocol time elapsed,
// under the control file's clock offset and rate. A change of offset
// makes the protocol clock jump by the difference (back, if it
// decreased: deliberately not monotonic, for testing what a jump does);
// a change of rate takes effect from the moment it is read, without a
// jump. It returns nil for a nil injector: node.Loop then uses real time.
// The function is safe for concurrent use.
func (in *Injector) Warp() func(elapsed time.Duration) time.Duration {
	if in == nil {
		return nil
	}
	c := &warpClock{in: in, rate: 1}
	return c.warp
}

// warpClock is the state of one Warp function: the protocol clock runs
// at rate since the real elapsed time since (when the rate last changed),
// when it read at (offset excluded).
type warpClock struct {
	in        *Injector
	mu        sync.Mutex
	since, at time.Duration
	rate      float64
}

func (c *warpClock) warp(elapsed time.Duration) time.Duration {
	f := c.in.Faults()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := f.rate(); r != c.rate {
		c.at += scale(elapsed-c.since, c.rate)
		c.since, c.rate = elapsed, r
	}
	return c.at + scale(elapsed-c.since, c.rate) + f.ClockOffset
}

// scale returns d·r, rounded to the nanosecond.
func scale(d time.Duration, r float64) time.Duration {
	if r == 1 {
		return d
	}
	return time.Duration(math.Round(float64(d) * r))
}
