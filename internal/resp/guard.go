package resp

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// guard sits between a connection and redcon's reader and enforces the
// limits redcon has none of. redcon's reader parses the commands; the
// guard only follows RESP's framing (an array header, then each
// argument's length line and bytes; or an inline line) to know where a
// command ends, so that:
//
//   - a bulk length above ArgumentSizeMax, an argument count above
//     ArgumentsMax, a command above CommandSizeMax or an inline line above
//     InlineSizeMax is refused as soon as its header arrives, as Redis
//     refuses a bulk length above proto-max-bulk-len, instead of buffering
//     whatever the client goes on sending;
//   - each Read returns only once a command is complete or the caller's
//     buffer is full. redcon re-parses an incomplete command from its start
//     on every read and recurses once per read, so handing it a large
//     command a few bytes at a time costs quadratic time and a deep stack;
//     this way it sees a command in O(log size) pieces.
//
// Framing errors that redcon reports itself (a missing '$', a bad length
// line) end a command here, so redcon sees them at once.
type guard struct {
	r io.Reader
	// err is a limit violation found after the bytes already returned; the
	// next Read returns it.
	err error

	state    guardState
	header   []byte // the length line being read (without '*' or '$')
	args     int    // arguments still to come in the current array
	body     int64  // bytes of the current argument (with its CRLF) still to come
	inline   int    // bytes of the current inline line so far
	commands int64  // bytes of the current command so far
}

type guardState uint8

const (
	guardStart     guardState = iota // between commands
	guardArrayLen                    // in "*<n>\r\n"
	guardBulkStart                   // expecting '$'
	guardBulkLen                     // in "$<n>\r\n"
	guardBulkBody                    // in an argument's bytes and CRLF
	guardInline                      // in an inline command's line
)

// lengthLineMax bounds a length line ("*<n>\r" or "$<n>\r"): enough for
// any int64.
const lengthLineMax = 24

// errLimit marks the errors of a guard: each is a protocol error that ends
// the connection.
var errLimit = errors.New("Protocol error")

func limitf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errLimit, fmt.Sprintf(format, args...))
}

// Read reads from the connection into p until a command is complete, p is
// full, or the connection fails.
func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	got := 0
	for got < len(p) {
		n, err := g.r.Read(p[got:])
		complete, bad, limitErr := g.scan(p[got : got+n])
		switch {
		case limitErr != nil:
			// Return what precedes the offending command's start, which
			// at worst is nothing; the error comes next.
			g.err = limitErr
			if bad := got + bad; bad > 0 {
				return bad, nil
			}
			return 0, limitErr
		case err != nil:
			return got + n, err
		}
		got += n
		if complete {
			return got, nil
		}
	}
	return got, nil
}

// scan follows the framing over b and reports whether a command ended in
// it. On a limit violation it returns the offset in b from which nothing
// may be returned (the end of the last complete command in b, or 0) and
// the error.
func (g *guard) scan(b []byte) (complete bool, safe int, err error) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if g.state == guardStart {
			g.commands = 0
		}
		// The bytes of the command up to and including b[i], or to the
		// end of b or of the argument, whichever comes first.
		step := int64(1)
		if g.state == guardBulkBody {
			step = min(g.body, int64(len(b)-i))
		}
		if g.commands += step; g.commands > CommandSizeMax {
			return complete, safe, limitf("command larger than %d bytes", CommandSizeMax)
		}
		switch g.state {
		case guardStart:
			if c == '*' {
				g.state, g.header = guardArrayLen, g.header[:0]
				continue
			}
			g.state, g.inline = guardInline, 0
			fallthrough
		case guardInline:
			g.inline++
			if c == '\n' {
				g.state, complete, safe = guardStart, true, i+1
				continue
			}
			if g.inline > InlineSizeMax {
				return complete, safe, limitf("too big inline request")
			}
		case guardArrayLen, guardBulkLen:
			if c != '\n' {
				if len(g.header) >= lengthLineMax {
					// redcon would wait for the end of the line.
					return complete, safe, limitf("invalid %s length", g.lengthName())
				}
				g.header = append(g.header, c)
				continue
			}
			n, ok := parseLength(g.header)
			switch {
			case !ok:
				// Malformed: redcon reports it.
				g.state, complete, safe = guardStart, true, i+1
			case g.state == guardArrayLen && n > ArgumentsMax:
				return complete, safe, limitf("invalid multibulk length")
			case g.state == guardArrayLen && n <= 0:
				g.state, complete, safe = guardStart, true, i+1 // redcon refuses it
			case g.state == guardArrayLen:
				g.args, g.state = int(n), guardBulkStart
			case n < 0 || n > ArgumentSizeMax:
				return complete, safe, limitf("invalid bulk length")
			default:
				g.body, g.state = n+2, guardBulkBody
			}
		case guardBulkStart:
			if c != '$' {
				g.state, complete, safe = guardStart, true, i+1 // redcon reports it
				continue
			}
			g.state, g.header = guardBulkLen, g.header[:0]
		case guardBulkBody:
			g.body -= step
			i += int(step) - 1
			if g.body == 0 {
				if g.args--; g.args == 0 {
					g.state, complete, safe = guardStart, true, i+1
				} else {
					g.state = guardBulkStart
				}
			}
		}
	}
	return complete, safe, nil
}

func (g *guard) lengthName() string {
	if g.state == guardArrayLen {
		return "multibulk"
	}
	return "bulk"
}

// parseLength parses a length line's digits, which end in '\r'.
func parseLength(line []byte) (int64, bool) {
	if len(line) < 2 || line[len(line)-1] != '\r' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(line[:len(line)-1]), 10, 64)
	return n, err == nil
}
