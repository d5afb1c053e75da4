package client

import (
	"context"
	"strconv"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Hashes (docs/adr/0029-hashes.md): a key may hold fields and their
// values, as a Redis hash does. Every operation on one is atomic, one
// update computed at the chain's head; a string's operations on a hash,
// and a hash's on a string, fail with ErrWrongType. A hash is at most
// kv.ValueSizeMax bytes encoded (a growth past it fails with
// ErrValueTooLarge), a field name at most kv.KeySizeMax. Hashes need the
// cluster at protocol version 2, and keyspaces of one site.

// Field is one field of a hash and its value.
type Field = kv.Field

// HashSet sets each field to its value, in one atomic update, and
// returns how many of them the hash did not have (Redis HSET). A field
// named twice takes its last value.
func (c *Client) HashSet(ctx context.Context, key string, fields ...Field) (added int64, err error) {
	r, err := c.do(ctx, hashSetOp(key, fields), Strong)
	if err != nil {
		return 0, err
	}
	return hashSetAdded(r)
}

// hashSetOp is HashSet's operation (Start's CallHashSet too).
func hashSetOp(key string, fields []Field) wire.Op {
	return wire.Op{Kind: wire.OpHashSet, Key: key, Value: kv.EncodeFields(lastOfEach(fields))}
}

// hashSetAdded is HashSet's answer: the fields added.
func hashSetAdded(r wire.Result) (int64, error) { return strconv.ParseInt(string(r.Value), 10, 64) }

// hashGetOp is HashGet's operation (Start's CallHashGet too).
func hashGetOp(key string, names []string) wire.Op {
	return wire.Op{Kind: wire.OpHashGet, Key: key, Value: kv.EncodeNames(names)}
}

// HashSetIfAbsent sets the field only if the hash does not have it, and
// reports whether it did (Redis HSETNX).
func (c *Client) HashSetIfAbsent(ctx context.Context, key, field string, value []byte) (bool, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpHashSetNX, Key: key, Value: kv.EncodeFields([]Field{{Name: field, Value: value}})}, Strong)
	return err == nil && string(r.Value) == "1", err
}

// HashDelete removes the fields and returns how many the hash had
// (Redis HDEL); removing its last field deletes the key.
func (c *Client) HashDelete(ctx context.Context, key string, fields ...string) (int64, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpHashDelete, Key: key, Value: kv.EncodeNames(fields)}, Strong)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(r.Value), 10, 64)
}

// HashIncrement adds delta to the field's decimal integer (absent
// counts as 0) and returns the new value (Redis HINCRBY).
func (c *Client) HashIncrement(ctx context.Context, key, field string, delta int64) (int64, error) {
	r, err := c.do(ctx, wire.Op{Kind: wire.OpHashIncrement, Key: key, Value: kv.EncodeNames([]string{field}), Delta: delta}, Strong)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(r.Value), 10, 64)
}

// HashGet returns the fields named that the hash has, in the order named
// (every field, sorted by name, if none is named), and whether the key
// exists: one read, decoded where it is read, so only the fields asked
// for travel (Redis HGET, HMGET, HGETALL).
func (c *Client) HashGet(ctx context.Context, key string, fields []string, opts ...ReadOption) (found []Field, exists bool, err error) {
	ro := readOptions{consistency: c.opts.Consistency}
	for _, o := range opts {
		o.applyRead(&ro)
	}
	r, err := c.do(ctx, hashGetOp(key, fields), ro.consistency)
	if err != nil {
		return nil, false, err
	}
	found, err = kv.DecodeFields(r.Value)
	if err != nil {
		return nil, false, err
	}
	return found, r.Found, nil
}

// TypeOf returns the type of key's value: "string", "hash", or "none"
// if the key does not exist (Redis TYPE).
func (c *Client) TypeOf(ctx context.Context, key string, opts ...ReadOption) (string, error) {
	ro := readOptions{consistency: c.opts.Consistency}
	for _, o := range opts {
		o.applyRead(&ro)
	}
	r, err := c.do(ctx, wire.Op{Kind: wire.OpGet, Key: key}, ro.consistency)
	switch {
	case err != nil:
		return "", err
	case !r.Found:
		return "none", nil
	}
	return r.Type.String(), nil
}

// lastOfEach returns fields with each name once, with its last value,
// in the order of their first mention.
func lastOfEach(fields []Field) []Field {
	at := make(map[string]int, len(fields))
	out := make([]Field, 0, len(fields))
	for _, f := range fields {
		if i, ok := at[f.Name]; ok {
			out[i].Value = f.Value
			continue
		}
		at[f.Name] = len(out)
		out = append(out, f)
	}
	return out
}
