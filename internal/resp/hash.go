package resp

import (
	"context"
	"errors"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Hashes (docs/adr/0029-hashes.md): HSET, HMSET, HSETNX, HGET, HMGET,
// HGETALL, HKEYS, HVALS, HLEN, HEXISTS, HSTRLEN, HDEL, HINCRBY. Each is
// one Catena operation on its key: atomic; the reads take only the
// fields asked for from the member that answers.

// errWrongType is Redis's reply to an operation on a key of another type.
const errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// invalidHash checks a hash operation's key and fields against Catena's
// limits, as invalid does.
func invalidHash(kind wire.OpKind, key []byte, fields []client.Field) string {
	return invalid(kind, key, kv.EncodeFields(fields))
}

// fieldPairs returns the field-value pairs of args from index 2 on.
func fieldPairs(args [][]byte) []client.Field {
	fields := make([]client.Field, 0, (len(args)-2)/2)
	for i := 2; i+1 < len(args); i += 2 {
		fields = append(fields, client.Field{Name: string(args[i]), Value: args[i+1]})
	}
	return fields
}

// fieldNames returns args from index from on as names.
func fieldNames(args [][]byte, from int) []string {
	names := make([]string, 0, len(args)-from)
	for _, a := range args[from:] {
		names = append(names, string(a))
	}
	return names
}

// runHashSet is HSET (the number of fields added) and HMSET (OK).
func runHashSet(name string) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		if len(args)%2 != 0 {
			r.err(wrongArity(name))
			return
		}
		fields := fieldPairs(args)
		if msg := invalidHash(wire.OpHashSet, args[1], fields); msg != "" {
			r.err(msg)
			return
		}
		n, err := x.store.HashSet(ctx, string(args[1]), fields...)
		switch {
		case err != nil:
			r.err(errorReply(err))
		case name == "hmset":
			r.ok()
		default:
			r.int(n)
		}
	}
}

func runHashSetNX(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalidHash(wire.OpHashSetNX, args[1], fieldPairs(args)); msg != "" {
		r.err(msg)
		return
	}
	set, err := x.store.HashSetIfAbsent(ctx, string(args[1]), string(args[2]), args[3])
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(boolInt(set))
}

func runHashDelete(ctx context.Context, x exec, args [][]byte, r *reply) {
	names := fieldNames(args, 2)
	if msg := invalid(wire.OpHashDelete, args[1], kv.EncodeNames(names)); msg != "" {
		r.err(msg)
		return
	}
	n, err := x.store.HashDelete(ctx, string(args[1]), names...)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(n)
}

func runHashIncrement(ctx context.Context, x exec, args [][]byte, r *reply) {
	delta, ok := parseInt(args[3])
	if !ok {
		r.err(errNotInteger)
		return
	}
	if msg := invalid(wire.OpHashIncrement, args[1], kv.EncodeNames([]string{string(args[2])})); msg != "" {
		r.err(msg)
		return
	}
	n, err := x.store.HashIncrement(ctx, string(args[1]), string(args[2]), delta)
	switch {
	case errors.Is(err, client.ErrNotInteger):
		r.err("ERR hash value is not an integer")
	case err != nil:
		r.err(errorReply(err))
	default:
		r.int(n)
	}
}

// hashRead reads the fields named (all if none) and writes the reply
// with answer; it writes the error itself.
func hashRead(ctx context.Context, x exec, args [][]byte, names []string, r *reply, answer func(fields []client.Field, exists bool)) {
	if msg := invalid(wire.OpHashGet, args[1], kv.EncodeNames(names)); msg != "" {
		r.err(msg)
		return
	}
	fields, exists, err := x.store.HashGet(ctx, string(args[1]), names, x.consistency)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	answer(fields, exists)
}

func runHashGet(ctx context.Context, x exec, args [][]byte, r *reply) {
	hashRead(ctx, x, args, fieldNames(args, 2), r, func(fields []client.Field, _ bool) {
		if len(fields) == 0 {
			r.null()
			return
		}
		r.bulk(fields[0].Value)
	})
}

func runHashMGet(ctx context.Context, x exec, args [][]byte, r *reply) {
	names := fieldNames(args, 2)
	hashRead(ctx, x, args, names, r, func(fields []client.Field, _ bool) {
		byName := make(map[string][]byte, len(fields))
		for _, f := range fields {
			byName[f.Name] = f.Value
		}
		r.array(len(names))
		for _, n := range names {
			v, ok := byName[n]
			r.value(v, ok)
		}
	})
}

// runHashAll is HGETALL, HKEYS and HVALS.
func runHashAll(what string) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		hashRead(ctx, x, args, nil, r, func(fields []client.Field, _ bool) {
			switch what {
			case "hgetall":
				r.mapOf(len(fields))
			default:
				r.array(len(fields))
			}
			for _, f := range fields {
				if what != "hvals" {
					r.bulkString(f.Name)
				}
				if what != "hkeys" {
					r.bulk(f.Value)
				}
			}
		})
	}
}

func runHashLen(ctx context.Context, x exec, args [][]byte, r *reply) {
	hashRead(ctx, x, args, nil, r, func(fields []client.Field, _ bool) { r.int(int64(len(fields))) })
}

func runHashExists(ctx context.Context, x exec, args [][]byte, r *reply) {
	hashRead(ctx, x, args, fieldNames(args, 2), r, func(fields []client.Field, _ bool) { r.int(boolInt(len(fields) > 0)) })
}

func runHashStrlen(ctx context.Context, x exec, args [][]byte, r *reply) {
	hashRead(ctx, x, args, fieldNames(args, 2), r, func(fields []client.Field, _ bool) {
		if len(fields) == 0 {
			r.int(0)
			return
		}
		r.int(int64(len(fields[0].Value)))
	})
}

// hashCommands are the hash commands; Redis's summaries, groups and
// "since".
var hashCommands = []*command{
	{name: "hset", arity: -4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Creates or modifies the value of a field in a hash.", complexity: "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.",
		run: runHashSet("hset")},
	{name: "hmset", arity: -4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Sets the values of multiple fields.", complexity: "O(N) where N is the number of fields being set.",
		run: runHashSet("hmset")},
	{name: "hsetnx", arity: 4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Sets the value of a field in a hash only when the field doesn't exist.", complexity: "O(1)",
		run: runHashSetNX},
	{name: "hdel", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "hash", since: "2.0.0", summary: "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", complexity: "O(N) where N is the number of fields to be removed.",
		run: runHashDelete},
	{name: "hincrby", arity: 4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", complexity: "O(1)",
		run: runHashIncrement},
	{name: "hget", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Returns the value of a field in a hash.", complexity: "O(1)",
		valueReplies: 1, run: runHashGet},
	{name: "hmget", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Returns the values of all fields in a hash.", complexity: "O(N) where N is the number of fields being requested.",
		valueReplies: 1, run: runHashMGet},
	{name: "hgetall", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all fields and values in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: runHashAll("hgetall")},
	{name: "hkeys", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all fields in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: runHashAll("hkeys")},
	{name: "hvals", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all values in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: runHashAll("hvals")},
	{name: "hlen", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Returns the number of fields in a hash.", complexity: "O(1)",
		run: runHashLen},
	{name: "hexists", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Determines whether a field exists in a hash.", complexity: "O(1)",
		run: runHashExists},
	{name: "hstrlen", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "3.2.0", summary: "Returns the length of the value of a field.", complexity: "O(1)",
		run: runHashStrlen},
}
