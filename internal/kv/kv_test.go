package kv_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

func present(v string) kv.Object { return kv.Object{Value: []byte(v), Exists: true} }

var absent = kv.Object{}

func TestApply(t *testing.T) {
	const maxInt = "9223372036854775807"
	const minInt = "-9223372036854775808"
	nearlyFull := kv.Object{Value: bytes.Repeat([]byte("a"), kv.ValueSizeMax-1), Exists: true}
	full := kv.Object{Value: bytes.Repeat([]byte("a"), kv.ValueSizeMax), Exists: true}

	tests := []struct {
		name        string
		op          wire.Op
		prior       kv.Object
		wantNext    kv.Object
		wantChanged bool
		wantResult  wire.Result
	}{
		// put: Found reports the key exists after the put.
		{"put absent", wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}, absent,
			present("v"), true, wire.Result{Status: wire.StatusOK, Found: true}},
		{"put overwrites", wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("new")}, present("old"),
			present("new"), true, wire.Result{Status: wire.StatusOK, Found: true}},
		{"put empty value", wire.Op{Kind: wire.OpPut, Key: "k"}, absent,
			present(""), true, wire.Result{Status: wire.StatusOK, Found: true}},

		// delete: Found reports the key existed before.
		{"delete present", wire.Op{Kind: wire.OpDelete, Key: "k"}, present("v"),
			absent, true, wire.Result{Status: wire.StatusOK, Found: true}},
		{"delete absent", wire.Op{Kind: wire.OpDelete, Key: "k"}, absent,
			absent, false, wire.Result{Status: wire.StatusOK, Found: false}},

		// compare-and-set with an expected value.
		{"cas match", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: []byte("a"), Value: []byte("b")}, present("a"),
			present("b"), true, wire.Result{Status: wire.StatusOK, Found: true}},
		{"cas mismatch returns current", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: []byte("a"), Value: []byte("b")}, present("z"),
			present("z"), false, wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("z")}},
		{"cas expected on absent", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: []byte("a"), Value: []byte("b")}, absent,
			absent, false, wire.Result{Status: wire.StatusCompareFailed, Found: false}},
		{"cas empty expected on absent", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Value: []byte("b")}, absent,
			absent, false, wire.Result{Status: wire.StatusCompareFailed, Found: false}},
		{"cas empty expected matches empty value", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Value: []byte("b")}, present(""),
			present("b"), true, wire.Result{Status: wire.StatusOK, Found: true}},

		// compare-and-set with ExpectAbsent.
		{"cas absent on absent", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", ExpectAbsent: true, Value: []byte("b")}, absent,
			present("b"), true, wire.Result{Status: wire.StatusOK, Found: false}},
		{"cas absent on present", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", ExpectAbsent: true, Value: []byte("b")}, present("a"),
			present("a"), false, wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("a")}},
		{"cas absent ignores expected", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", ExpectAbsent: true, Expected: []byte("a"), Value: []byte("b")}, present("a"),
			present("a"), false, wire.Result{Status: wire.StatusCompareFailed, Found: true, Value: []byte("a")}},

		// swap: sets, and returns what was there before.
		{"swap absent", wire.Op{Kind: wire.OpSwap, Key: "k", Value: []byte("v")}, absent,
			present("v"), true, wire.Result{Status: wire.StatusOK, Found: false}},
		{"swap present", wire.Op{Kind: wire.OpSwap, Key: "k", Value: []byte("new")}, present("old"),
			present("new"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("old")}},
		{"swap empty prior", wire.Op{Kind: wire.OpSwap, Key: "k", Value: []byte("new")}, present(""),
			present("new"), true, wire.Result{Status: wire.StatusOK, Found: true}},

		// replace: sets only an existing key, and returns its prior value.
		{"replace absent", wire.Op{Kind: wire.OpReplace, Key: "k", Value: []byte("v")}, absent,
			absent, false, wire.Result{Status: wire.StatusOK, Found: false}},
		{"replace present", wire.Op{Kind: wire.OpReplace, Key: "k", Value: []byte("new")}, present("old"),
			present("new"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("old")}},
		{"replace with empty", wire.Op{Kind: wire.OpReplace, Key: "k"}, present("old"),
			present(""), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("old")}},

		// increment: the new value is returned; absent counts as 0.
		{"incr absent", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 5}, absent,
			present("5"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("5")}},
		{"incr present", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 3}, present("39"),
			present("42"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("42")}},
		{"incr negative delta", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: -10}, present("3"),
			present("-7"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("-7")}},
		{"incr not integer", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("abc"),
			present("abc"), false, wire.Result{Status: wire.StatusNotInteger, Found: true}},
		{"incr empty value", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present(""),
			present(""), false, wire.Result{Status: wire.StatusNotInteger, Found: true}},
		{"incr overflow", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present(maxInt),
			present(maxInt), false, wire.Result{Status: wire.StatusOverflow, Found: true}},
		{"incr underflow", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: -1}, present(minInt),
			present(minInt), false, wire.Result{Status: wire.StatusOverflow, Found: true}},
		{"incr to max", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("9223372036854775806"),
			present(maxInt), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte(maxInt)}},
		{"incr absent by min int", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: -1 << 63}, absent,
			present(minInt), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte(minInt)}},
		{"incr value above int64", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("9223372036854775808"),
			present("9223372036854775808"), false, wire.Result{Status: wire.StatusOverflow, Found: true}},
		{"incr value below int64", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("-9223372036854775809"),
			present("-9223372036854775809"), false, wire.Result{Status: wire.StatusOverflow, Found: true}},
		{"incr not integer despite digits", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("99999999999999999999x"),
			present("99999999999999999999x"), false, wire.Result{Status: wire.StatusNotInteger, Found: true}},

		// append: the new value is returned.
		{"append absent", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("xy")}, absent,
			present("xy"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("xy")}},
		{"append present", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("cd")}, present("ab"),
			present("abcd"), true, wire.Result{Status: wire.StatusOK, Found: true, Value: []byte("abcd")}},
		{"append up to limit", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("a")}, nearlyFull,
			full, true, wire.Result{Status: wire.StatusOK, Found: true, Value: full.Value}},
		{"append over limit", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("aa")}, nearlyFull,
			nearlyFull, false, wire.Result{Status: wire.StatusValueTooLarge, Found: true}},
		{"append over limit on absent", wire.Op{Kind: wire.OpAppend, Key: "k", Value: bytes.Repeat([]byte("a"), kv.ValueSizeMax+1)}, absent,
			absent, false, wire.Result{Status: wire.StatusValueTooLarge, Found: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, changed, result := kv.Apply(tt.op, tt.prior, 0)
			if next.Exists != tt.wantNext.Exists || !bytes.Equal(next.Value, tt.wantNext.Value) {
				t.Errorf("next = %s, want %s", describe(next), describe(tt.wantNext))
			}
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if result.Status != tt.wantResult.Status || result.Found != tt.wantResult.Found ||
				!bytes.Equal(result.Value, tt.wantResult.Value) || result.SN != 0 {
				t.Errorf("result = {%v found=%v %q sn=%d}, want {%v found=%v %q sn=0}",
					result.Status, result.Found, abbrev(result.Value), result.SN,
					tt.wantResult.Status, tt.wantResult.Found, abbrev(tt.wantResult.Value))
			}
		})
	}
}

// A query is not an update: Apply refuses it.
func TestApplyPanicsOnQuery(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Apply(get) did not panic")
		}
	}()
	kv.Apply(wire.Op{Kind: wire.OpGet, Key: "k"}, absent, 0)
}

// Apply must copy op.Value (and prior.Value): the head keeps the returned
// object while the request buffer may be reused.
func TestApplyDoesNotAliasInputs(t *testing.T) {
	tests := []struct {
		name  string
		op    wire.Op
		prior kv.Object
		want  string
	}{
		{"put", wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("value")}, absent, "value"},
		{"cas", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", ExpectAbsent: true, Value: []byte("value")}, absent, "value"},
		{"append absent", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("value")}, absent, "value"},
		{"append present", wire.Op{Kind: wire.OpAppend, Key: "k", Value: []byte("ue")}, present("val"), "value"},
		{"incr", wire.Op{Kind: wire.OpIncrement, Key: "k", Delta: 1}, present("41"), "42"},
		{"swap", wire.Op{Kind: wire.OpSwap, Key: "k", Value: []byte("value")}, present("old"), "value"},
		{"replace", wire.Op{Kind: wire.OpReplace, Key: "k", Value: []byte("value")}, present("old"), "value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, _, result := kv.Apply(tt.op, tt.prior, 0)
			for i := range tt.op.Value {
				tt.op.Value[i] = 'X'
			}
			for i := range tt.prior.Value {
				tt.prior.Value[i] = 'Y'
			}
			if string(next.Value) != tt.want {
				t.Errorf("next.Value = %q after mutating the inputs, want %q", next.Value, tt.want)
			}
			// The result handed to the client must not share the stored value either.
			if len(result.Value) > 0 {
				result.Value[0] = 'Z'
				if string(next.Value) != tt.want {
					t.Errorf("next.Value = %q after mutating result.Value, want %q", next.Value, tt.want)
				}
			}
		})
	}
}

// The value a failed compare-and-set reports must not share the stored value.
func TestApplyCompareFailedResultIsACopy(t *testing.T) {
	prior := present("current")
	_, _, result := kv.Apply(wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: []byte("other"), Value: []byte("v")}, prior, 0)
	result.Value[0] = 'X'
	if string(prior.Value) != "current" {
		t.Errorf("prior.Value = %q after mutating result.Value, want %q", prior.Value, "current")
	}
}

// The prior value swap and replace report must not share the stored value.
func TestApplyPriorValueResultIsACopy(t *testing.T) {
	for _, kind := range []wire.OpKind{wire.OpSwap, wire.OpReplace} {
		prior := present("current")
		_, _, result := kv.Apply(wire.Op{Kind: kind, Key: "k", Value: []byte("v")}, prior, 0)
		result.Value[0] = 'X'
		if string(prior.Value) != "current" {
			t.Errorf("%v: prior.Value = %q after mutating result.Value, want %q", kind, prior.Value, "current")
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		op      wire.Op
		wantErr string // substring of the error; "" for a valid op
	}{
		{"valid put", wire.Op{Kind: wire.OpPut, Key: "k", Value: []byte("v")}, ""},
		{"valid get", wire.Op{Kind: wire.OpGet, Key: "k"}, ""},
		{"key at limit", wire.Op{Kind: wire.OpPut, Key: strings.Repeat("k", kv.KeySizeMax)}, ""},
		{"value at limit", wire.Op{Kind: wire.OpPut, Key: "k", Value: make([]byte, kv.ValueSizeMax)}, ""},
		{"expected at limit", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: make([]byte, kv.ValueSizeMax)}, ""},
		{"empty key", wire.Op{Kind: wire.OpPut, Value: []byte("v")}, "empty key"},
		{"reserved key", wire.Op{Kind: wire.OpPut, Key: wire.ReservedKeyPrefix + "ctl/ballot"}, "reserved byte"},
		{"key over limit", wire.Op{Kind: wire.OpGet, Key: strings.Repeat("k", kv.KeySizeMax+1)}, "key of " + strconv.Itoa(kv.KeySizeMax+1) + " bytes"},
		{"value over limit", wire.Op{Kind: wire.OpAppend, Key: "k", Value: make([]byte, kv.ValueSizeMax+1)}, "value of " + strconv.Itoa(kv.ValueSizeMax+1) + " bytes"},
		{"expected over limit", wire.Op{Kind: wire.OpCompareAndSet, Key: "k", Expected: make([]byte, kv.ValueSizeMax+1)}, "expected value of"},
		{"unknown kind", wire.Op{Kind: wire.OpKind(99), Key: "k"}, "unknown operation 99"},
		{"zero kind", wire.Op{Key: "k"}, "unknown operation 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kv.Validate(tt.op)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, kv.ErrBadOp) {
				t.Errorf("Validate = %v, which does not wrap ErrBadOp", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// An OpWatch names a prefix (empty: every key) or, with
// wire.WatchExactKey, one key; a revision from wire.WatchFromNow up; a
// hold time up to wire.WatchHoldMax; and nothing else.
func TestValidateWatch(t *testing.T) {
	exact := []byte{wire.WatchExactKey}
	watch := func(key string, flags []byte, from int64, hold wire.Time) wire.Op {
		return wire.Op{Kind: wire.OpWatch, Key: key, Value: flags, Delta: from, TTL: hold}
	}
	tests := []struct {
		name    string
		op      wire.Op
		wantErr string // substring of the error; "" for a valid op
	}{
		{"every key from now", watch("", nil, wire.WatchFromNow, 0), ""},
		{"a prefix from a revision, held", watch("cfg/", nil, 77, wire.Second), ""},
		{"one key", watch("cfg/a", exact, 0, wire.WatchHoldMax), ""},
		{"no flags", watch("cfg/", []byte{0}, 0, 0), ""},
		{"every key, no flags", watch("", []byte{0}, 0, 0), ""},
		{"empty flags", watch("cfg/", []byte{}, 0, 0), ""},
		{"the last revision", watch("k", nil, math.MaxInt64, 0), ""},
		{"key at limit", watch(strings.Repeat("k", kv.KeySizeMax), exact, 0, 0), ""},
		{"key over limit", watch(strings.Repeat("k", kv.KeySizeMax+1), nil, 0, 0), "watched key or prefix of " + strconv.Itoa(kv.KeySizeMax+1) + " bytes"},
		{"reserved prefix", watch(wire.ReservedKeyPrefix, nil, 0, 0), "reserved byte"},
		{"reserved key", watch(wire.ReservedKeyPrefix+"ctl/ballot", exact, 0, 0), "reserved byte"},
		{"unknown flag", watch("k", []byte{2}, 0, 0), "unknown watch flags 02"},
		{"unknown flag beside exact", watch("k", []byte{wire.WatchExactKey | 0x80}, 0, 0), "unknown watch flags"},
		{"two flag bytes", watch("k", []byte{wire.WatchExactKey, 0}, 0, 0), "unknown watch flags"},
		{"one key without the key", watch("", exact, 0, 0), "needs the key"},
		{"revision below from-now", watch("k", nil, wire.WatchFromNow-1, 0), "watch from revision -2"},
		{"the lowest revision", watch("k", nil, math.MinInt64, 0), "watch from revision"},
		{"held too long", watch("k", nil, 0, wire.WatchHoldMax+1), "held for at most 2s"},
		{"negative hold", watch("k", nil, 0, -1), "held for at most"},
		{"an expected value", wire.Op{Kind: wire.OpWatch, Key: "k", Expected: []byte("v")}, "only a key or prefix"},
		{"expect absent", wire.Op{Kind: wire.OpWatch, Key: "k", ExpectAbsent: true}, "only a key or prefix"},
		{"a deadline", wire.Op{Kind: wire.OpWatch, Key: "k", Expires: 9}, "only a key or prefix"},
		{"expiry flags", wire.Op{Kind: wire.OpWatch, Key: "k", Expiry: wire.ExpiryKeep}, "only a key or prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kv.Validate(tt.op)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, kv.ErrBadOp) {
				t.Errorf("Validate = %v, which does not wrap ErrBadOp", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestRead(t *testing.T) {
	obj := present("v")
	got := kv.Read(wire.Op{Kind: wire.OpGet, Key: "k"}, obj)
	if got.Status != wire.StatusOK || !got.Found || string(got.Value) != "v" {
		t.Errorf("Read(present) = %+v, want ok found \"v\"", got)
	}
	got.Value[0] = 'X'
	if string(obj.Value) != "v" {
		t.Errorf("object changed to %q through the read result", obj.Value)
	}
	if got := kv.Read(wire.Op{Kind: wire.OpGet, Key: "k"}, absent); got.Found || got.Value != nil {
		t.Errorf("Read(absent) = %+v, want not found", got)
	}
}

func describe(o kv.Object) string {
	if !o.Exists {
		return "absent(" + strconv.Quote(abbrev(o.Value)) + ")"
	}
	return strconv.Quote(abbrev(o.Value))
}

// abbrev shortens megabyte values in failure messages.
func abbrev(b []byte) string {
	if len(b) <= 32 {
		return string(b)
	}
	return string(b[:16]) + "…(" + strconv.Itoa(len(b)) + " bytes)"
}

// An operation whose kind does not read the prior object must come out the
// same whatever the prior object: the head skips the read for it.
func TestApplyIgnoresPriorWhenReadsPriorIsFalse(t *testing.T) {
	priors := []kv.Object{absent, {Value: []byte("7"), Exists: true}, {Value: []byte("other"), Exists: true}}
	for k := wire.OpKind(0); k < 255; k++ {
		if !k.Valid() || k.IsQuery() || kv.ReadsPrior(wire.Op{Kind: k}) {
			continue
		}
		op := wire.Op{Kind: k, Key: "k", Value: []byte("v"), Delta: 1, Expected: []byte("7")}
		next0, changed0, result0 := kv.Apply(op, absent, 0)
		for _, prior := range priors {
			next, changed, result := kv.Apply(op, prior, 0)
			if !reflect.DeepEqual(next, next0) || changed != changed0 || !reflect.DeepEqual(result, result0) {
				t.Errorf("%v on %+v = %+v %v %+v, on an absent key %+v %v %+v: it reads the prior object", k, prior, next, changed, result, next0, changed0, result0)
			}
		}
	}
	if kv.ReadsPrior(wire.Op{Kind: wire.OpPut}) {
		t.Error("a blind Put reads the prior object")
	}
}
