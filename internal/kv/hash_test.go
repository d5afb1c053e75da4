package kv_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

func fields(pairs ...string) []byte {
	var fs []kv.Field
	for i := 0; i+1 < len(pairs); i += 2 {
		fs = append(fs, kv.Field{Name: pairs[i], Value: []byte(pairs[i+1])})
	}
	return kv.EncodeFields(fs)
}

func names(ns ...string) []byte {
	var fs []kv.Field
	for _, n := range ns {
		fs = append(fs, kv.Field{Name: n})
	}
	return kv.EncodeFields(fs)
}

func hash(pairs ...string) kv.Object {
	return kv.Object{Value: fields(pairs...), Exists: true, Type: wire.TypeHash}
}

// Each hash operation on a hash, an absent key and a string: what it
// answers and the hash it leaves (canonical: sorted by field).
func TestApplyHash(t *testing.T) {
	str := kv.Object{Value: []byte("5"), Exists: true}
	for _, tc := range []struct {
		name       string
		op         wire.Op
		prior      kv.Object
		wantStatus wire.Status
		wantValue  string // the answer's
		want       kv.Object
	}{
		{"hset creates", wire.Op{Kind: wire.OpHashSet, Value: fields("b", "2", "a", "1")}, kv.Object{}, wire.StatusOK, "2", hash("a", "1", "b", "2")},
		{"hset adds and updates", wire.Op{Kind: wire.OpHashSet, Value: fields("b", "3", "c", "4")}, hash("a", "1", "b", "2"), wire.StatusOK, "1", hash("a", "1", "b", "3", "c", "4")},
		{"hsetnx absent field", wire.Op{Kind: wire.OpHashSetNX, Value: fields("c", "9")}, hash("a", "1"), wire.StatusOK, "1", hash("a", "1", "c", "9")},
		{"hsetnx present field", wire.Op{Kind: wire.OpHashSetNX, Value: fields("a", "9")}, hash("a", "1"), wire.StatusOK, "0", hash("a", "1")},
		{"hdel some", wire.Op{Kind: wire.OpHashDelete, Value: names("a", "z")}, hash("a", "1", "b", "2"), wire.StatusOK, "1", hash("b", "2")},
		{"hdel none", wire.Op{Kind: wire.OpHashDelete, Value: names("z")}, hash("a", "1"), wire.StatusOK, "0", hash("a", "1")},
		{"hdel the last deletes the key", wire.Op{Kind: wire.OpHashDelete, Value: names("a")}, hash("a", "1"), wire.StatusOK, "1", kv.Object{}},
		{"hincrby new", wire.Op{Kind: wire.OpHashIncrement, Value: names("n"), Delta: 5}, kv.Object{}, wire.StatusOK, "5", hash("n", "5")},
		{"hincrby", wire.Op{Kind: wire.OpHashIncrement, Value: names("n"), Delta: -7}, hash("n", "5"), wire.StatusOK, "-2", hash("n", "-2")},
		{"hincrby not a number", wire.Op{Kind: wire.OpHashIncrement, Value: names("a"), Delta: 1}, hash("a", "x"), wire.StatusNotInteger, "", hash("a", "x")},
		{"hset on a string", wire.Op{Kind: wire.OpHashSet, Value: fields("a", "1")}, str, wire.StatusWrongType, "", str},
		{"hdel on a string", wire.Op{Kind: wire.OpHashDelete, Value: names("a")}, str, wire.StatusWrongType, "", str},
	} {
		tc.op.Key = "k"
		if err := kv.Validate(tc.op); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		next, _, result := kv.Apply(tc.op, tc.prior, 0)
		if result.Status != tc.wantStatus || string(result.Value) != tc.wantValue || fmt.Sprint(next) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v %q, leaving %+v; want %v %q, %+v", tc.name, result.Status, result.Value, next, tc.wantStatus, tc.wantValue, tc.want)
		}
	}
}

// The WRONGTYPE matrix: a string's operations on a hash change nothing
// and answer StatusWrongType, but SET, DEL and EXPIRE, which take any key.
func TestStringOperationsOnAHash(t *testing.T) {
	h := hash("a", "1")
	for _, op := range []wire.Op{
		{Kind: wire.OpIncrement, Delta: 1}, {Kind: wire.OpAppend, Value: []byte("x")},
		{Kind: wire.OpSwap, Value: []byte("x")}, {Kind: wire.OpReplace, Value: []byte("x")},
		{Kind: wire.OpCompareAndSet, Expected: []byte("x"), Value: []byte("y")},
	} {
		op.Key = "k"
		next, changed, result := kv.Apply(op, h, 0)
		if result.Status != wire.StatusWrongType || changed || next.Type != wire.TypeHash {
			t.Errorf("%v on a hash: %v, changed %v", op.Kind, result.Status, changed)
		}
	}
	if next, _, r := kv.Apply(wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}, h, 0); r.Status != wire.StatusOK || next.Type != wire.TypeString {
		t.Errorf("SET over a hash: %v, type %v", r.Status, next.Type)
	}
	if next, _, r := kv.Apply(wire.Op{Kind: wire.OpExpire, Key: "k", Expires: 50}, h, 0); r.Status != wire.StatusOK || next.Type != wire.TypeHash || next.Expires != 50 {
		t.Errorf("EXPIRE of a hash: %v, %+v", r.Status, next)
	}
	if r := kv.Read(wire.Op{Kind: wire.OpGet, Key: "k"}, h); r.Type != wire.TypeHash {
		t.Errorf("a read of a hash reports type %v", r.Type)
	}
	if r := kv.Read(wire.Op{Kind: wire.OpHashGet, Key: "k", Value: names("a")}, kv.Object{Value: []byte("s"), Exists: true}); r.Status != wire.StatusWrongType {
		t.Errorf("HGET of a string: %v", r.Status)
	}
}

func TestReadHashFields(t *testing.T) {
	h := hash("a", "1", "b", "2", "c", "3")
	for _, tc := range []struct {
		ask  []byte
		want []byte
	}{
		{names("c", "z", "a"), fields("c", "3", "a", "1")},
		{names(), fields("a", "1", "b", "2", "c", "3")},
	} {
		r := kv.Read(wire.Op{Kind: wire.OpHashGet, Key: "k", Value: tc.ask}, h)
		if r.Status != wire.StatusOK || !r.Found || string(r.Value) != string(tc.want) {
			t.Errorf("HGET %q: %+v", tc.ask, r)
		}
	}
	if r := kv.Read(wire.Op{Kind: wire.OpHashGet, Key: "k", Value: names("a")}, kv.Object{}); r.Found || r.Status != wire.StatusOK {
		t.Errorf("HGET of an absent key: %+v", r)
	}
}

// Bad hash arguments are refused; a hash that would grow past the value
// limit is refused and left as it was.
func TestHashLimits(t *testing.T) {
	for _, op := range []wire.Op{
		{Kind: wire.OpHashSet, Value: []byte("garbage")},
		{Kind: wire.OpHashSet, Value: fields()},
		{Kind: wire.OpHashSetNX, Value: fields("a", "1", "b", "2")},
		{Kind: wire.OpHashIncrement, Value: names("a", "b"), Delta: 1},
		{Kind: wire.OpHashSet, Value: fields(strings.Repeat("f", kv.KeySizeMax+1), "v")},
		{Kind: wire.OpHashSet, Value: fields("a", "1"), TTL: wire.Second},
		{Kind: wire.OpHashDelete, Value: names("a"), Delta: 3},
	} {
		op.Key = "k"
		if err := kv.Validate(op); err == nil {
			t.Errorf("Validate(%v %q) accepted it", op.Kind, op.Value)
		}
	}
	big := hash("a", strings.Repeat("v", kv.ValueSizeMax-20))
	op := wire.Op{Kind: wire.OpHashSet, Key: "k", Value: fields("b", strings.Repeat("w", 100))}
	next, changed, r := kv.Apply(op, big, 0)
	if r.Status != wire.StatusValueTooLarge || changed || string(next.Value) != string(big.Value) {
		t.Errorf("a hash grown past the limit: %v, changed %v", r.Status, changed)
	}
	if _, err := kv.DecodeFields(append(fields("a", "1"), 0)); err == nil {
		t.Error("trailing bytes after the fields decoded")
	}
}
