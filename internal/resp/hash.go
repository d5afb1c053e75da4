package resp

import (
	"context"
	"encoding/binary"
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

// hashSetFields parses HSET's and HMSET's field-value pairs, or says
// what is wrong with them.
func hashSetFields(name string, args [][]byte) ([]client.Field, string) {
	if len(args)%2 != 0 {
		return nil, wrongArity(name)
	}
	fields := fieldPairs(args)
	return fields, invalidHash(wire.OpHashSet, args[1], fields)
}

// hashSetReply is HSET's reply (the number of fields added) or HMSET's
// (OK).
func hashSetReply(name string, r *reply, added int64) {
	if name == "hmset" {
		r.ok()
		return
	}
	r.int(added)
}

// startHashSet is HSET's and HMSET's startFunc.
func startHashSet(name string) startFunc {
	return func(args [][]byte, keys []string, _ client.Consistency) (client.Call, func(*job, client.CallResult), bool) {
		fields, msg := hashSetFields(name, args)
		if msg != "" {
			return client.Call{}, nil, false
		}
		return client.Call{Kind: client.CallHashSet, Key: keys[0], Fields: fields},
			func(j *job, res client.CallResult) { hashSetReply(name, &j.r, res.Added) }, true
	}
}

// runHashSet is HSET and HMSET.
func runHashSet(name string) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		fields, msg := hashSetFields(name, args)
		if msg != "" {
			r.err(msg)
			return
		}
		n, err := x.store.HashSet(ctx, string(args[1]), fields...)
		if err != nil {
			r.err(errorReply(err))
			return
		}
		hashSetReply(name, r, n)
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

// A hashRead is a hash read command (HGET, HMGET, HGETALL, ...): the
// fields it names (nil: every field) and how its reply is made from
// those the hash has. Its run and start read them the same way.
type hashRead struct {
	names  func(args [][]byte) []string
	answer func(r *reply, names []string, fields []client.Field)
}

// run reads the fields through the store and writes the reply, or the
// error.
func (h hashRead) run(ctx context.Context, x exec, args [][]byte, r *reply) {
	names := h.names(args)
	if msg := invalid(wire.OpHashGet, args[1], kv.EncodeNames(names)); msg != "" {
		r.err(msg)
		return
	}
	fields, _, err := x.store.HashGet(ctx, string(args[1]), names, x.consistency)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	h.answer(r, names, fields)
}

// start is the read as a Starter's call.
func (h hashRead) start(args [][]byte, keys []string, consistency client.Consistency) (client.Call, func(*job, client.CallResult), bool) {
	names := h.names(args)
	if !namesFit(keys[0], names) {
		return client.Call{}, nil, false
	}
	return client.Call{Kind: client.CallHashGet, Key: keys[0], Names: names, Consistency: consistency},
		func(j *job, res client.CallResult) { h.answer(&j.r, names, res.Fields) }, true
}

// namesFit reports whether a hash read of names on key is surely within
// Catena's limits (what invalid checks of its OpHashGet), without
// encoding the names; start leaves a read it cannot vouch for to run,
// which writes the error.
func namesFit(key string, names []string) bool {
	if kv.Validate(wire.Op{Kind: wire.OpGet, Key: key}) != nil {
		return false
	}
	size := binary.MaxVarintLen64 // an upper bound of kv.EncodeNames's length
	for _, n := range names {
		if len(n) > kv.KeySizeMax {
			return false
		}
		size += 2*binary.MaxVarintLen32 + len(n)
	}
	return size <= kv.ValueSizeMax
}

// fieldsSize bounds the bytes of a reply that holds fields' names and
// values, for growing its buffer once.
func fieldsSize(fields []client.Field) int {
	n := 16
	for _, f := range fields {
		n += 2*24 + len(f.Name) + len(f.Value)
	}
	return n
}

// namesFrom names the arguments from index i on; everyField names none.
func namesFrom(i int) func(args [][]byte) []string {
	return func(args [][]byte) []string { return fieldNames(args, i) }
}

func everyField([][]byte) []string { return nil }

// The hash reads.
var (
	hashGet = hashRead{names: namesFrom(2), answer: func(r *reply, _ []string, fields []client.Field) {
		if len(fields) == 0 {
			r.null()
			return
		}
		r.bulk(fields[0].Value)
	}}
	hashMGet = hashRead{names: namesFrom(2), answer: func(r *reply, names []string, fields []client.Field) {
		// fields are those of names the hash has, in names' order.
		r.grow(fieldsSize(fields) + 8*len(names))
		r.array(len(names))
		for _, n := range names {
			if len(fields) > 0 && fields[0].Name == n {
				r.bulk(fields[0].Value)
				fields = fields[1:]
				continue
			}
			r.value(nil, false)
		}
	}}
	hashGetAll = hashRead{names: everyField, answer: func(r *reply, _ []string, fields []client.Field) {
		r.grow(fieldsSize(fields))
		r.mapOf(len(fields))
		for _, f := range fields {
			r.bulkString(f.Name)
			r.bulk(f.Value)
		}
	}}
	hashKeys = hashRead{names: everyField, answer: func(r *reply, _ []string, fields []client.Field) {
		r.array(len(fields))
		for _, f := range fields {
			r.bulkString(f.Name)
		}
	}}
	hashValues = hashRead{names: everyField, answer: func(r *reply, _ []string, fields []client.Field) {
		r.array(len(fields))
		for _, f := range fields {
			r.bulk(f.Value)
		}
	}}
	hashLen    = hashRead{names: everyField, answer: func(r *reply, _ []string, fields []client.Field) { r.int(int64(len(fields))) }}
	hashExists = hashRead{names: namesFrom(2), answer: func(r *reply, _ []string, fields []client.Field) { r.int(boolInt(len(fields) > 0)) }}
	hashStrlen = hashRead{names: namesFrom(2), answer: func(r *reply, _ []string, fields []client.Field) {
		if len(fields) == 0 {
			r.int(0)
			return
		}
		r.int(int64(len(fields[0].Value)))
	}}
)

// hashCommands are the hash commands; Redis's summaries, groups and
// "since".
var hashCommands = []*command{
	{name: "hset", arity: -4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Creates or modifies the value of a field in a hash.", complexity: "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.",
		run: runHashSet("hset"), start: startHashSet("hset")},
	{name: "hmset", arity: -4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom", "fast"},
		group: "hash", since: "2.0.0", summary: "Sets the values of multiple fields.", complexity: "O(N) where N is the number of fields being set.",
		run: runHashSet("hmset"), start: startHashSet("hmset")},
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
		valueReplies: 1, run: hashGet.run, start: hashGet.start},
	{name: "hmget", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Returns the values of all fields in a hash.", complexity: "O(N) where N is the number of fields being requested.",
		valueReplies: 1, run: hashMGet.run, start: hashMGet.start},
	{name: "hgetall", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all fields and values in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: hashGetAll.run, start: hashGetAll.start},
	{name: "hkeys", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all fields in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: hashKeys.run, start: hashKeys.start},
	{name: "hvals", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly"},
		group: "hash", since: "2.0.0", summary: "Returns all values in a hash.", complexity: "O(N) where N is the size of the hash.",
		valueReplies: 1, run: hashValues.run, start: hashValues.start},
	{name: "hlen", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Returns the number of fields in a hash.", complexity: "O(1)",
		run: hashLen.run, start: hashLen.start},
	{name: "hexists", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "2.0.0", summary: "Determines whether a field exists in a hash.", complexity: "O(1)",
		run: hashExists.run, start: hashExists.start},
	{name: "hstrlen", arity: 3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "hash", since: "3.2.0", summary: "Returns the length of the value of a field.", complexity: "O(1)",
		run: hashStrlen.run, start: hashStrlen.start},
}
