package kv_test

import (
	"errors"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// The deadline rules of docs/adr/0028 for each write, at the head's time
// now = 1000: which deadline the new object has, and what is answered.
func TestApplyDeadlines(t *testing.T) {
	const now wire.Time = 1000
	live := kv.Object{Value: []byte("5"), Exists: true, Expires: 5000}
	plain := kv.Object{Value: []byte("5"), Exists: true}
	for _, tc := range []struct {
		name        string
		op          wire.Op
		prior       kv.Object
		wantExists  bool
		wantExpires wire.Time
		wantStatus  wire.Status
		wantChanged bool
	}{
		{"put clears a deadline", wire.Op{Kind: wire.OpPut, Value: []byte("v")}, live, true, 0, wire.StatusOK, true},
		{"put with a TTL", wire.Op{Kind: wire.OpPut, Value: []byte("v"), TTL: 10}, live, true, 1010, wire.StatusOK, true},
		{"put with a deadline", wire.Op{Kind: wire.OpPut, Value: []byte("v"), Expires: 7000}, plain, true, 7000, wire.StatusOK, true},
		{"put keeping the deadline", wire.Op{Kind: wire.OpPut, Value: []byte("v"), Expiry: wire.ExpiryKeep}, live, true, 5000, wire.StatusOK, true},
		{"put with a deadline past deletes", wire.Op{Kind: wire.OpPut, Value: []byte("v"), Expires: 900}, live, false, 0, wire.StatusOK, true},
		{"swap clears", wire.Op{Kind: wire.OpSwap, Value: []byte("v")}, live, true, 0, wire.StatusOK, true},
		{"increment keeps", wire.Op{Kind: wire.OpIncrement, Delta: 1}, live, true, 5000, wire.StatusOK, true},
		{"append keeps", wire.Op{Kind: wire.OpAppend, Value: []byte("x")}, live, true, 5000, wire.StatusOK, true},
		{"expire sets", wire.Op{Kind: wire.OpExpire, TTL: 100}, plain, true, 1100, wire.StatusOK, true},
		{"expire on an absent key", wire.Op{Kind: wire.OpExpire, TTL: 100}, kv.Object{}, false, 0, wire.StatusCompareFailed, false},
		{"expire in the past deletes", wire.Op{Kind: wire.OpExpire, TTL: -1}, live, false, 0, wire.StatusOK, true},
		{"expire NX with a deadline", wire.Op{Kind: wire.OpExpire, TTL: 100, Expiry: wire.ExpiryNX}, live, true, 5000, wire.StatusCompareFailed, false},
		{"expire NX without", wire.Op{Kind: wire.OpExpire, TTL: 100, Expiry: wire.ExpiryNX}, plain, true, 1100, wire.StatusOK, true},
		{"expire XX without", wire.Op{Kind: wire.OpExpire, TTL: 100, Expiry: wire.ExpiryXX}, plain, true, 0, wire.StatusCompareFailed, false},
		{"expire GT later", wire.Op{Kind: wire.OpExpire, Expires: 6000, Expiry: wire.ExpiryGT}, live, true, 6000, wire.StatusOK, true},
		{"expire GT earlier", wire.Op{Kind: wire.OpExpire, Expires: 2000, Expiry: wire.ExpiryGT}, live, true, 5000, wire.StatusCompareFailed, false},
		{"expire GT without (infinite)", wire.Op{Kind: wire.OpExpire, Expires: 6000, Expiry: wire.ExpiryGT}, plain, true, 0, wire.StatusCompareFailed, false},
		{"expire LT without (infinite)", wire.Op{Kind: wire.OpExpire, Expires: 6000, Expiry: wire.ExpiryLT}, plain, true, 6000, wire.StatusOK, true},
		{"expire LT later", wire.Op{Kind: wire.OpExpire, Expires: 6000, Expiry: wire.ExpiryLT}, live, true, 5000, wire.StatusCompareFailed, false},
		{"persist", wire.Op{Kind: wire.OpExpire, Expiry: wire.ExpiryPersist}, live, true, 0, wire.StatusOK, true},
		{"persist without a deadline", wire.Op{Kind: wire.OpExpire, Expiry: wire.ExpiryPersist}, plain, true, 0, wire.StatusCompareFailed, false},
	} {
		op := kv.Resolve(tc.op, now)
		op.Key = "k"
		if err := kv.Validate(tc.op); err != nil && tc.op.Key != "" {
			t.Errorf("%s: %v", tc.name, err)
		}
		next, changed, result := kv.Apply(op, tc.prior, now)
		if next.Exists != tc.wantExists || next.Expires != tc.wantExpires || result.Status != tc.wantStatus ||
			changed != tc.wantChanged || result.Expires != tc.wantExpires {
			t.Errorf("%s: next %+v changed %v result %+v", tc.name, next, changed, result)
		}
	}
}

// A key read at or after its deadline is absent; before, present.
func TestLive(t *testing.T) {
	o := kv.Object{Value: []byte("v"), Exists: true, Expires: 100}
	if !kv.Live(o, 99).Exists || kv.Live(o, 100).Exists || !kv.Live(kv.Object{Exists: true}, 1<<62).Exists {
		t.Error("Live decides on the wrong side of the deadline")
	}
}

func TestValidateExpiry(t *testing.T) {
	for _, tc := range []struct {
		op wire.Op
		ok bool
	}{
		{wire.Op{Kind: wire.OpPut, TTL: 5}, true},
		{wire.Op{Kind: wire.OpPut, TTL: -5}, false},
		{wire.Op{Kind: wire.OpPut, TTL: 5, Expires: 9}, false},
		{wire.Op{Kind: wire.OpPut, Expires: kv.ExpiresMax + 1}, false},
		{wire.Op{Kind: wire.OpPut, TTL: 5, Expiry: wire.ExpiryKeep}, false},
		{wire.Op{Kind: wire.OpPut, Expiry: wire.ExpiryNX}, false},
		{wire.Op{Kind: wire.OpPut, Expiry: 1 << 7}, false},
		{wire.Op{Kind: wire.OpIncrement, TTL: 5}, false},
		{wire.Op{Kind: wire.OpGet, TTL: 5}, false},
		{wire.Op{Kind: wire.OpDelete, Expiry: wire.ExpiryKeep}, false},
		{wire.Op{Kind: wire.OpExpire}, false},
		{wire.Op{Kind: wire.OpExpire, TTL: -5}, true},
		{wire.Op{Kind: wire.OpExpire, Expiry: wire.ExpiryPersist}, true},
		{wire.Op{Kind: wire.OpExpire, Expiry: wire.ExpiryPersist, TTL: 3}, false},
		{wire.Op{Kind: wire.OpExpire, TTL: 3, Expiry: wire.ExpiryNX | wire.ExpiryGT}, false},
		{wire.Op{Kind: wire.OpExpire, TTL: 3, Expiry: wire.ExpiryGT | wire.ExpiryLT}, false},
		{wire.Op{Kind: wire.OpExpire, TTL: 3, Expiry: wire.ExpiryGT | wire.ExpiryXX}, true},
	} {
		tc.op.Key = "k"
		err := kv.Validate(tc.op)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, kv.ErrBadOp) {
			t.Errorf("Validate(%+v) = %v", tc.op, err)
		}
	}
}
