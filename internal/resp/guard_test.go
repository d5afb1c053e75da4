package resp

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// drip hands out its input n bytes per Read, as a slow client would.
type drip struct {
	r     io.Reader
	n     int
	reads int
}

func (d *drip) Read(p []byte) (int, error) {
	d.reads++
	return d.r.Read(p[:min(len(p), d.n)])
}

func bulkCommand(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// A command handed over a byte at a time reaches redcon in a few pieces:
// redcon re-parses an incomplete command on every read and recurses once
// per read, so a piece per byte would cost quadratic time and a stack as
// deep as the command is long.
func TestGuardCoalescesACommandSentSlowly(t *testing.T) {
	value := strings.Repeat("v", 256<<10)
	src := bulkCommand("SET", "k", value) + bulkCommand("GET", "k")
	d := &drip{r: strings.NewReader(src), n: 1}
	counted := &countingReader{r: &guard{r: d}}
	rd := redcon.NewReader(counted)
	var got []string
	for len(got) < 2 {
		cmds, err := rd.ReadCommands()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		for _, c := range cmds {
			got = append(got, string(c.Args[0]))
		}
	}
	if got[0] != "SET" || got[1] != "GET" {
		t.Fatalf("commands %v", got)
	}
	if d.reads < len(src) {
		t.Fatalf("the source was read %d times for %d bytes: not a byte at a time", d.reads, len(src))
	}
	// redcon's buffer doubles from 4 KiB: about log2(256 KiB / 4 KiB) + a
	// few reads.
	if counted.reads > 20 {
		t.Errorf("redcon read %d times; want a few", counted.reads)
	}
}

type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// Each limit is enforced as soon as the header that breaks it arrives (or
// the command grows past it), before the rest is read; the complete
// commands before it are delivered first.
func TestGuardLimits(t *testing.T) {
	big := strings.Repeat("x", ArgumentSizeMax)
	tests := []struct {
		name string
		src  string
		// unread is how much of src's end must not have been read when
		// the error comes (less what the last read may have taken).
		unread  int
		wantErr string
	}{
		{"bulk length", bulkCommand("PING") + "*2\r\n$3\r\nGET\r\n$" + fmt.Sprint(ArgumentSizeMax+1) + "\r\n" + strings.Repeat("x", 1<<20),
			1 << 20, "invalid bulk length"},
		{"argument count", bulkCommand("PING") + fmt.Sprintf("*%d\r\n", ArgumentsMax+1) + strings.Repeat("$1\r\nx\r\n", 10000),
			70000, "invalid multibulk length"},
		{"command size", bulkCommand("PING") + "*4\r\n$4\r\nMSET\r\n" + strings.Repeat(fmt.Sprintf("$%d\r\n%s\r\n", len(big), big), 3),
			len(big) - CommandSizeMax%len(big), fmt.Sprintf("command larger than %d bytes", CommandSizeMax)},
		{"inline line", "PING\r\n" + strings.Repeat("x", InlineSizeMax+1<<20),
			1 << 20, "too big inline request"},
		{"length line", bulkCommand("PING") + "*1\r\n$" + strings.Repeat("1", lengthLineMax+1<<20),
			1 << 20, "invalid bulk length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.NewReader(tt.src)
			const piece = 4096
			rd := redcon.NewReader(&guard{r: &drip{r: src, n: piece}})
			cmds, err := rd.ReadCommands()
			if err != nil || len(cmds) != 1 || string(cmds[0].Args[0]) != "PING" {
				t.Fatalf("first read: %d commands, %v; want the PING before the violation", len(cmds), err)
			}
			_, err = rd.ReadCommands()
			if !errors.Is(err, errLimit) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v; want %q", err, tt.wantErr)
			}
			if src.Len() < tt.unread-piece {
				t.Errorf("%d bytes left unread; want at least %d", src.Len(), tt.unread)
			}
		})
	}
}

// Commands at the limits pass, whole, however they are cut.
func TestGuardPassesCommandsWithinLimits(t *testing.T) {
	value := strings.Repeat("v", ArgumentSizeMax)
	inline := "ECHO " + strings.Repeat("i", InlineSizeMax-len("ECHO \r\n")) + "\r\n"
	src := bulkCommand("SET", "k", value) + inline + bulkCommand("GET", "k") + "PING\r\n" + bulkCommand("EMPTY", "")
	for _, n := range []int{1 << 20, 4096, 7} {
		if n == 7 && testing.Short() {
			continue
		}
		rd := redcon.NewReader(&guard{r: &drip{r: strings.NewReader(src), n: n}})
		var got []string
		for len(got) < 5 {
			cmds, err := rd.ReadCommands()
			if err != nil {
				t.Fatalf("pieces of %d: after %v: %v", n, got, err)
			}
			for _, c := range cmds {
				got = append(got, fmt.Sprintf("%s/%d", c.Args[0], len(c.Args)))
			}
		}
		if want := "SET/3 ECHO/2 GET/2 PING/1 EMPTY/2"; strings.Join(got, " ") != want {
			t.Errorf("pieces of %d: commands %v; want %s", n, got, want)
		}
	}
}

// Handing redcon a large command slowly keeps its goroutine's stack small.
func TestGuardKeepsTheStackShallow(t *testing.T) {
	src := bulkCommand("SET", "k", strings.Repeat("v", 200<<10))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan error)
	go func() {
		rd := redcon.NewReader(&guard{r: &drip{r: strings.NewReader(src), n: 1}})
		_, err := rd.ReadCommands()
		runtime.ReadMemStats(&after)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Unguarded, 200 KiB in 1-byte reads takes about 250 MB of stack.
	if grew := int64(after.StackInuse) - int64(before.StackInuse); grew > 16<<20 {
		t.Errorf("stack grew by %d MB", grew>>20)
	}
}
