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
// for each (*client.Client). With one, a connection's GET, SET without
// options, HSET, HMSET and hash reads (the commands of nearly every
// Redis workload, YCSB's included) do not go through a worker goroutine
// each: the connection's reader collects
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

// startFunc is how a command runs on a Starter: the call that does its
// work, and how the call's result becomes its reply (startCall writes an
// error's). ok false runs the command as every other command runs: an
// invalid one, whose error its run writes, or one with options the call
// cannot carry.
type startFunc func(args [][]byte, keys []string, consistency client.Consistency) (call client.Call, answer func(j *job, res client.CallResult), ok bool)

// startGet is GET's startFunc.
func startGet(args [][]byte, keys []string, consistency client.Consistency) (client.Call, func(*job, client.CallResult), bool) {
	if kv.Validate(wire.Op{Kind: wire.OpGet, Key: keys[0]}) != nil {
		return client.Call{}, nil, false
	}
	return client.Call{Kind: client.CallGet, Key: keys[0], Consistency: consistency}, func(j *job, res client.CallResult) {
		if !res.Found {
			j.r.null()
			return
		}
		// The value's reply, written by the writer without a copy.
		j.value, j.isValue = res.Value, true
	}, true
}

// startSet is SET's startFunc, for a SET without options.
func startSet(args [][]byte, keys []string, _ client.Consistency) (client.Call, func(*job, client.CallResult), bool) {
	if len(args) != 3 || kv.Validate(wire.Op{Kind: wire.OpPut, Key: keys[0], Value: args[2]}) != nil {
		return client.Call{}, nil, false
	}
	return client.Call{Kind: client.CallPut, Key: keys[0], Value: args[2]}, func(j *job, _ client.CallResult) { j.r.ok() }, true
}

// startCall queues a command on key for the Starter and reports whether
// it did (see startFunc). j's reply is written when the call ends.
func (c *conn) startCall(cmd *command, name string, args [][]byte, keys []string, j *job, read time.Time) bool {
	if cmd.start == nil {
		return false
	}
	call, answer, ok := cmd.start(args, keys, c.consistency)
	if !ok {
		return false
	}
	r := &j.r
	call.Done = func(res client.CallResult) {
		if res.Err != nil {
			r.err(errorReply(res.Err))
		} else {
			answer(j, res)
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
