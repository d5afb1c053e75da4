package resp

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Starter is a Store that starts operations without a goroutine waiting
// for each (*client.Client). With one, a connection's GET and SET
// without options (the commands of nearly every Redis workload) do not
// go through a worker goroutine each: the connection's reader collects
// the ones it read in one go and starts them with one call to Start
// once it has dispatched them all, and each reply is made when its
// outcome arrives. Every other command, and a GET or SET that must wait
// for an earlier command of the connection on its key, runs as before.
// The replies are the same either way: the same checks, the same
// operations, the same errors.
type Starter interface {
	Start(ctx context.Context, calls []client.Call)
}

var _ Starter = (*client.Client)(nil)

// The commands a Starter runs (commandList's: the commands table is
// filled by an init function).
var cmdGet, cmdSet = listed("get"), listed("set")

func listed(name string) *command {
	for _, c := range commandList {
		if c.name == name {
			return c
		}
	}
	panic("resp: no command " + name)
}

// startCall queues a command on key for the Starter and reports whether
// it did: a GET, or a SET without options, within Catena's limits (the
// others, and an invalid one, for which runGet or runSet writes the
// error, run as every command does). j's reply is written when the call
// ends.
func (c *conn) startCall(cmd *command, name string, args [][]byte, keys []string, j *job, r *reply, read time.Time) bool {
	var call client.Call
	switch {
	case cmd == cmdGet:
		call = client.Call{Kind: client.CallGet, Key: keys[0], Consistency: c.consistency}
		if kv.Validate(wire.Op{Kind: wire.OpGet, Key: call.Key}) != nil {
			return false
		}
	case cmd == cmdSet && len(args) == 3:
		call = client.Call{Kind: client.CallPut, Key: keys[0], Value: args[2]}
		if kv.Validate(wire.Op{Kind: wire.OpPut, Key: call.Key, Value: call.Value}) != nil {
			return false
		}
	default:
		return false
	}
	get := call.Kind == client.CallGet
	call.Done = func(res client.CallResult) {
		switch {
		case res.Err != nil:
			r.err(errorReply(res.Err))
		case get && res.Found:
			// r.value's reply, written by the writer without a copy.
			j.value, j.isValue = res.Value, true
		case get:
			r.null()
		default:
			r.ok()
		}
		c.observe(name, r, read)
		j.out = r.b
		close(j.done)
	}
	c.pending = append(c.pending, call)
	return true
}

// writeBulk writes v as a bulk string, as reply.bulk does.
func writeBulk(w *bufio.Writer, v []byte) {
	var header [24]byte
	b := append(header[:0], '$')
	b = strconv.AppendInt(b, int64(len(v)), 10)
	w.Write(append(b, '\r', '\n'))
	w.Write(v)
	w.WriteString("\r\n")
}

// startPending starts the calls queued by startCall.
func (c *conn) startPending() {
	if len(c.pending) == 0 {
		return
	}
	c.starter.Start(c.ctx, c.pending)
	clear(c.pending)
	c.pending = c.pending[:0]
}

// lookup returns the command a call's first argument names (nil if
// none) and its name, without the copy strings.ToLower makes.
func lookup(arg []byte) (*command, string) {
	var buf [32]byte
	if len(arg) <= len(buf) {
		b := buf[:len(arg)]
		ascii := true
		for i, ch := range arg {
			if ch >= 0x80 {
				ascii = false
				break
			}
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			b[i] = ch
		}
		if ascii {
			if cmd, ok := commands[string(b)]; ok {
				return cmd, cmd.name
			}
			return nil, "unknown"
		}
	}
	// Unicode's lower case of a name is not always ASCII's (the Kelvin
	// sign's is k): as strings.ToLower has it.
	if cmd, ok := commands[strings.ToLower(string(arg))]; ok {
		return cmd, cmd.name
	}
	return nil, "unknown"
}

// keysOf returns cmd.keys(args), in one's storage for a command on one
// key.
func keysOf(cmd *command, args [][]byte, one *[1]string) []string {
	if cmd.firstKey > 0 && cmd.lastKey == cmd.firstKey && cmd.firstKey < len(args) {
		one[0] = string(args[cmd.firstKey])
		return one[:]
	}
	return cmd.keys(args)
}
