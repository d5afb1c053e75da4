package resp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// command is one Redis command: how it is called (arity, key positions,
// as COMMAND INFO reports them) and what runs it.
type command struct {
	name string
	// arity is Redis's: n means exactly n arguments with the name, -n at
	// least n.
	arity int
	// firstKey, lastKey and step locate the keys among the arguments
	// (lastKey -1: the last argument); 0, 0, 0 for no keys.
	firstKey, lastKey, step int
	flags                   []string
	group, since, summary   string
	complexity              string

	// Exactly one of local and run is set. local runs a connection
	// command in the reader goroutine and returns false to close the
	// connection after its reply; run executes a data command.
	local func(c *conn, args [][]byte, r *reply) bool
	run   func(ctx context.Context, x exec, args [][]byte, r *reply)
	// start, if set, runs a data command on a Starter instead of run
	// (start.go); its reply is the one run would write.
	start startFunc
	// valueReplies is how many stored values the reply may hold, for the
	// pipeline budget: 1 (GET), -1 one per key (MGET), or 0.
	valueReplies int
}

// exec is what a data command runs with: the store and the connection's
// state when the command was read.
type exec struct {
	store       Store
	consistency client.Consistency
	cursors     *cursorTable
}

// commands is the command table, by lower-case name.
var commands = map[string]*command{}

func init() {
	commandList = append(commandList, expiryCommands...)
	commandList = append(commandList, hashCommands...)
	for _, c := range commandList {
		commands[c.name] = c
	}
}

// noAuth reports whether a connection may run the command before it
// authenticated (Redis's no_auth flag: AUTH, HELLO, QUIT).
func (c *command) noAuth() bool { return slices.Contains(c.flags, "no_auth") }

func (c *command) arityOK(n int) bool {
	if c.arity >= 0 {
		return n == c.arity
	}
	return n >= -c.arity
}

// keys returns the distinct keys of a call, in order.
func (c *command) keys(args [][]byte) []string {
	if c.firstKey == 0 {
		return nil
	}
	last := c.lastKey
	if last < 0 {
		last = len(args) + last
	}
	var out []string
	seen := map[string]bool{}
	for i := c.firstKey; i <= last && i < len(args); i += c.step {
		if k := string(args[i]); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// replyBound is the most bytes the reply to a call may hold.
func (c *command) replyBound(args [][]byte) int64 {
	const valueReplyMax = kv.ValueSizeMax + 16
	switch c.valueReplies {
	case 0:
		return 64
	case 1:
		return valueReplyMax
	}
	return min(int64(len(args)-1)*valueReplyMax, ReplySizeMax+KeysParallelMax*valueReplyMax)
}

func unknownCommand(args [][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", truncate(args[0]))
	for _, a := range args[1:] {
		if b.Len() > 512 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(a))
	}
	return b.String()
}

func truncate(b []byte) string {
	const max = 128
	if len(b) > max {
		b = b[:max]
	}
	return string(b)
}

func wrongArity(name string) string {
	return fmt.Sprintf("ERR wrong number of arguments for '%s' command", name)
}

// Redis's error replies.
const (
	errNotInteger = "ERR value is not an integer or out of range"
	errOverflow   = "ERR increment or decrement would overflow"
	errSyntax     = "ERR syntax error"
)

// errorReply turns a Store error into Redis's error reply for it.
func errorReply(err error) string {
	switch {
	case errors.Is(err, client.ErrNotInteger):
		return errNotInteger
	case errors.Is(err, client.ErrOverflow):
		return errOverflow
	case errors.Is(err, client.ErrValueTooLarge):
		return fmt.Sprintf("ERR string exceeds maximum allowed size (%d bytes)", kv.ValueSizeMax)
	case errors.Is(err, client.ErrDenied):
		return errNoPerm
	case errors.Is(err, client.ErrWrongType):
		return errWrongType
	case errors.Is(err, client.ErrUnauthenticated):
		return errNoAuthUser
	}
	// ErrAmbiguous, ErrUnavailable, ErrInvalid, ErrClosed: their text
	// says what happened ("catena: outcome unknown (the update may or may
	// not have been applied): ...").
	return "ERR " + err.Error()
}

// invalid checks an operation against Catena's limits (kv.Validate, the
// check the client core applies) and returns the error reply, or "".
func invalid(kind wire.OpKind, key, value []byte) string {
	err := kv.Validate(wire.Op{Kind: kind, Key: string(key), Value: value})
	if err == nil {
		return ""
	}
	return "ERR " + strings.TrimPrefix(err.Error(), kv.ErrBadOp.Error()+": ")
}

func parseInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// commandList holds every command served. Summaries, groups and "since"
// are Redis's, as COMMAND DOCS reports them.
var commandList = []*command{
	{name: "get", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "string", since: "1.0.0", summary: "Returns the string value of a key.", complexity: "O(1)",
		valueReplies: 1, run: runGet, start: startGet},
	{name: "set", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom"},
		group: "string", since: "1.0.0", summary: "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", complexity: "O(1)",
		valueReplies: 1, run: runSet, start: startSet},
	{name: "getset", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Returns the previous string value of a key after setting it to a new value.", complexity: "O(1)",
		valueReplies: 1, run: runGetSet},
	{name: "setnx", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Set the string value of a key only when the key doesn't exist.", complexity: "O(1)",
		run: runSetNX},
	{name: "del", arity: -2, firstKey: 1, lastKey: -1, step: 1, flags: []string{"write"},
		group: "generic", since: "1.0.0", summary: "Deletes one or more keys.", complexity: "O(N) where N is the number of keys that will be removed.",
		run: runDel},
	{name: "unlink", arity: -2, firstKey: 1, lastKey: -1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "4.0.0", summary: "Asynchronously deletes one or more keys.", complexity: "O(1) for each key removed regardless of its size. Then the command does O(N) work in a different thread in order to reclaim memory, where N is the number of allocations the deleted objects where composed of.",
		run: runDel}, // Catena deletes as DEL does: nothing to reclaim later
	{name: "type", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "1.0.0", summary: "Determines the type of value stored at a key.", complexity: "O(1)",
		run: runType},
	{name: "scan", arity: -2, flags: []string{"readonly"},
		group: "generic", since: "2.8.0", summary: "Iterates over the key names in the database.", complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
		run: runScan},
	{name: "keys", arity: 2, flags: []string{"readonly"},
		group: "generic", since: "1.0.0", summary: "Returns all key names that match a pattern.", complexity: "O(N) with N being the number of keys in the database, under the assumption that the key names in the database and the given pattern have limited length.",
		run: runKeys},
	{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"},
		group: "server", since: "1.0.0", summary: "Returns the number of keys in the database.", complexity: "O(1)",
		run: runDBSize}, // O(N) here: Catena keeps no count of keys
	{name: "randomkey", arity: 1, flags: []string{"readonly"},
		group: "generic", since: "1.0.0", summary: "Returns a random key name from the database.", complexity: "O(1)",
		run: runRandomKey},
	{name: "exists", arity: -2, firstKey: 1, lastKey: -1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "1.0.0", summary: "Determines whether one or more keys exist.", complexity: "O(N) where N is the number of keys to check.",
		run: runExists},
	{name: "incr", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", complexity: "O(1)",
		run: runIncrement(1, false)},
	{name: "decr", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", complexity: "O(1)",
		run: runIncrement(-1, false)},
	{name: "incrby", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", complexity: "O(1)",
		run: runIncrement(1, true)},
	{name: "decrby", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "1.0.0", summary: "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", complexity: "O(1)",
		run: runIncrement(-1, true)},
	{name: "append", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "string", since: "2.0.0", summary: "Appends a string to the value of a key. Creates the key if it doesn't exist.", complexity: "O(1)",
		run: runAppend},
	{name: "strlen", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "string", since: "2.2.0", summary: "Returns the length of a string value.", complexity: "O(1)",
		run: runStrlen},
	{name: "mget", arity: -2, firstKey: 1, lastKey: -1, step: 1, flags: []string{"readonly", "fast"},
		group: "string", since: "1.0.0", summary: "Atomically returns the string values of one or more keys.", complexity: "O(N) where N is the number of keys to retrieve.",
		valueReplies: -1, run: runMGet},
	{name: "mset", arity: -3, firstKey: 1, lastKey: -1, step: 2, flags: []string{"write", "denyoom"},
		group: "string", since: "1.0.1", summary: "Atomically creates or modifies the string values of one or more keys.", complexity: "O(N) where N is the number of keys to set.",
		run: runMSet},
	{name: "ping", arity: -1, flags: []string{"fast"},
		group: "connection", since: "1.0.0", summary: "Returns the server's liveliness response.", complexity: "O(1)",
		local: localPing},
	{name: "echo", arity: 2, flags: []string{"fast"},
		group: "connection", since: "1.0.0", summary: "Returns the given string.", complexity: "O(1)",
		local: localEcho},
	{name: "hello", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"},
		group: "connection", since: "6.0.0", summary: "Handshakes with the Redis server.", complexity: "O(1)",
		local: localHello},
	{name: "auth", arity: -2, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"},
		group: "connection", since: "1.0.0", summary: "Authenticates the connection.", complexity: "O(N) where N is the number of passwords defined for the user",
		local: localAuth},
	{name: "select", arity: 2, flags: []string{"loading", "stale", "fast"},
		group: "connection", since: "1.0.0", summary: "Changes the selected database.", complexity: "O(1)",
		local: localSelect},
	{name: "client", arity: -2, flags: []string{"noscript", "loading", "stale"},
		group: "connection", since: "2.4.0", summary: "A container for client connection commands.", complexity: "Depends on subcommand.",
		local: localClient},
	{name: "info", arity: -1, flags: []string{"loading", "stale"},
		group: "server", since: "1.0.0", summary: "Returns information and statistics about the server.", complexity: "O(1)",
		local: localInfo},
	{name: "command", arity: -1, flags: []string{"loading", "stale"},
		group: "server", since: "2.8.13", summary: "Returns detailed information about all commands.", complexity: "O(N) where N is the total number of Redis commands",
		local: localCommand},
	{name: "quit", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"},
		group: "connection", since: "1.0.0", summary: "Closes the connection.", complexity: "O(1)",
		local: localQuit},
}

func runGet(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
		r.err(msg)
		return
	}
	v, found, err := x.store.Get(ctx, string(args[1]), x.consistency)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.value(v, found)
}

// setOptions are SET's options.
type setOptions struct {
	nx, xx, get bool
	// expiry is the deadline option given (EX, PX, EXAT, PXAT, KEEPTTL),
	// as a write option; nil: none.
	expiry client.WriteOption
}

// parseSetOptions parses SET's options as Redis does: an unknown option,
// NX with XX, or two expiry options (KEEPTTL counts as one) are a syntax
// error; an expiry's argument must be a positive integer.
func parseSetOptions(args [][]byte) (setOptions, string) {
	var o setOptions
	for i := 3; i < len(args); i++ {
		switch opt := strings.ToUpper(string(args[i])); opt {
		case "NX":
			if o.xx {
				return o, errSyntax
			}
			o.nx = true
		case "XX":
			if o.nx {
				return o, errSyntax
			}
			o.xx = true
		case "GET":
			o.get = true
		case "KEEPTTL":
			if o.expiry != nil {
				return o, errSyntax
			}
			o.expiry = client.WithKeepTTL()
		case "EX", "PX", "EXAT", "PXAT":
			if o.expiry != nil || i+1 == len(args) {
				return o, errSyntax
			}
			i++
			e, msg := parseExpireTime(opt, args[i], "set", false)
			if msg != "" {
				return o, msg
			}
			if e.At.IsZero() {
				o.expiry = client.WithTTL(e.TTL)
			} else {
				o.expiry = client.WithExpireAt(e.At)
			}
		default:
			return o, errSyntax
		}
	}
	return o, ""
}

func runSet(ctx context.Context, x exec, args [][]byte, r *reply) {
	o, msg := parseSetOptions(args)
	if msg == "" {
		msg = invalid(wire.OpPut, args[1], args[2])
	}
	if msg != "" {
		r.err(msg)
		return
	}
	key, value := string(args[1]), args[2]
	var opts []client.WriteOption
	if o.expiry != nil {
		opts = append(opts, o.expiry)
	}
	switch {
	case o.nx:
		put, current, err := x.store.PutIfAbsent(ctx, key, value, opts...)
		switch {
		case err != nil:
			r.err(errorReply(err))
		case o.get && put:
			r.null()
		case o.get:
			r.bulk(current)
		case put:
			r.ok()
		default:
			r.null()
		}
	case o.xx:
		replaced, prior, err := x.store.Replace(ctx, key, value, opts...)
		switch {
		case err != nil:
			r.err(errorReply(err))
		case o.get:
			r.value(prior, replaced)
		case replaced:
			r.ok()
		default:
			r.null()
		}
	case o.get:
		prior, found, err := x.store.Swap(ctx, key, value, opts...)
		if err != nil {
			r.err(errorReply(err))
			return
		}
		r.value(prior, found)
	default:
		if err := x.store.Put(ctx, key, value, opts...); err != nil {
			r.err(errorReply(err))
			return
		}
		r.ok()
	}
}

func runGetSet(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpSwap, args[1], args[2]); msg != "" {
		r.err(msg)
		return
	}
	prior, found, err := x.store.Swap(ctx, string(args[1]), args[2])
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.value(prior, found)
}

func runSetNX(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpCompareAndSet, args[1], args[2]); msg != "" {
		r.err(msg)
		return
	}
	put, _, err := x.store.PutIfAbsent(ctx, string(args[1]), args[2])
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(boolInt(put))
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// forKeys runs f on each key, KeysParallelMax at a time, and returns the
// first error; after an error it starts no more.
func forKeys(keys []string, f func(i int, key string) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	workers := min(len(keys), KeysParallelMax)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				if err := f(i, keys[i]); err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(len(keys))) // start no more
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// validateKeys returns the error reply for the first key over Catena's
// limits, or "".
func validateKeys(keys []string) string {
	for _, k := range keys {
		if msg := invalid(wire.OpGet, []byte(k), nil); msg != "" {
			return msg
		}
	}
	return ""
}

func runDel(ctx context.Context, x exec, args [][]byte, r *reply) {
	keys := commands["del"].keys(args)
	if msg := validateKeys(keys); msg != "" {
		r.err(msg)
		return
	}
	var deleted atomic.Int64
	err := forKeys(keys, func(_ int, k string) error {
		found, err := x.store.Delete(ctx, k)
		if found {
			deleted.Add(1)
		}
		return err
	})
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(deleted.Load())
}

// runType answers TYPE: every Catena value is a string.
func runType(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
		r.err(msg)
		return
	}
	typ, err := x.store.TypeOf(ctx, string(args[1]), x.consistency)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.status(typ)
}

func runExists(ctx context.Context, x exec, args [][]byte, r *reply) {
	keys := commands["exists"].keys(args)
	if msg := validateKeys(keys); msg != "" {
		r.err(msg)
		return
	}
	exists := make([]bool, len(keys))
	err := forKeys(keys, func(i int, k string) error {
		typ, err := x.store.TypeOf(ctx, k, x.consistency) // (of any type)
		exists[i] = typ != "none"
		return err
	})
	if err != nil {
		r.err(errorReply(err))
		return
	}
	found := map[string]bool{}
	for i, k := range keys {
		found[k] = exists[i]
	}
	// A key named twice counts twice, as in Redis.
	var n int64
	for _, a := range args[1:] {
		n += boolInt(found[string(a)])
	}
	r.int(n)
}

// runIncrement returns INCR (sign 1), DECR (-1), and with byArgument
// INCRBY and DECRBY.
func runIncrement(sign int64, byArgument bool) func(context.Context, exec, [][]byte, *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		delta := sign
		if byArgument {
			n, ok := parseInt(args[2])
			if !ok {
				r.err(errNotInteger)
				return
			}
			if sign < 0 && n == math.MinInt64 {
				r.err("ERR decrement would overflow")
				return
			}
			delta = sign * n
		}
		if msg := invalid(wire.OpIncrement, args[1], nil); msg != "" {
			r.err(msg)
			return
		}
		n, err := x.store.Increment(ctx, string(args[1]), delta)
		if err != nil {
			r.err(errorReply(err))
			return
		}
		r.int(n)
	}
}

func runAppend(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpAppend, args[1], args[2]); msg != "" {
		r.err(msg)
		return
	}
	v, err := x.store.Append(ctx, string(args[1]), args[2])
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(int64(len(v)))
}

func runStrlen(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
		r.err(msg)
		return
	}
	v, _, err := x.store.Get(ctx, string(args[1]), x.consistency)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(int64(len(v)))
}

func runMGet(ctx context.Context, x exec, args [][]byte, r *reply) {
	keys := commands["mget"].keys(args)
	if msg := validateKeys(keys); msg != "" {
		r.err(msg)
		return
	}
	values := make([][]byte, len(keys))
	founds := make([]bool, len(keys))
	var size atomic.Int64
	errTooLarge := errors.New("too large")
	err := forKeys(keys, func(i int, k string) error {
		v, found, err := x.store.Get(ctx, k, x.consistency)
		if errors.Is(err, client.ErrWrongType) {
			found, err = false, nil // MGET answers nil for a key of another type
		}
		values[i], founds[i] = v, found
		if size.Add(int64(len(v))) > ReplySizeMax {
			return errTooLarge
		}
		return err
	})
	switch {
	case errors.Is(err, errTooLarge):
		r.err(fmt.Sprintf("ERR MGET reply would exceed %d bytes: ask for fewer keys", ReplySizeMax))
		return
	case err != nil:
		r.err(errorReply(err))
		return
	}
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[k] = i
	}
	r.array(len(args) - 1)
	for _, a := range args[1:] {
		i := index[string(a)]
		r.value(values[i], founds[i])
	}
}

func runMSet(ctx context.Context, x exec, args [][]byte, r *reply) {
	if len(args)%2 != 1 {
		r.err(wrongArity("mset"))
		return
	}
	// The last value given for a key wins, as in Redis; the others would
	// be overwritten by the same command.
	last := map[string][]byte{}
	for i := 1; i < len(args); i += 2 {
		if msg := invalid(wire.OpPut, args[i], args[i+1]); msg != "" {
			r.err(msg)
			return
		}
		last[string(args[i])] = args[i+1]
	}
	keys := commands["mset"].keys(args)
	err := forKeys(keys, func(_ int, k string) error { return x.store.Put(ctx, k, last[k]) })
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.ok()
}
