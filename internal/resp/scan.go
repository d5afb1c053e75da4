package resp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// SCAN's cursors. Redis's cursor is a number the client hands back; a
// Catena scan resumes at a volume and a key (client.Cursor), which no
// number can hold. The front end therefore keeps the scans in progress
// in a table shared by its connections (clients such as go-redis send a
// scan's pages on whichever pooled connection is free) under random
// numbers: a number it did not hand out, or one forgotten, is refused
// with "ERR invalid cursor". It forgets a cursor once its page was
// answered (the next page gets a new one; a page that failed may be asked
// for again), after cursorTTL unused, and the oldest beyond cursorsMax. A proxy that restarts forgets them all: a client starts
// its scan again.

const (
	cursorsMax = 10_000
	cursorTTL  = 10 * time.Minute
)

type savedCursor struct {
	cursor client.Cursor
	at     time.Time
}

// cursorTable holds the scans in progress, by the number handed out.
type cursorTable struct {
	mu      sync.Mutex
	cursors map[uint64]savedCursor
	order   []uint64 // numbers in the order handed out, for eviction
}

func newCursorTable() *cursorTable { return &cursorTable{cursors: map[uint64]savedCursor{}} }

// save stores cur and returns its number (never 0, which Redis reserves
// for the start and end of a scan).
func (t *cursorTable) save(cur client.Cursor, now time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.cursors) >= cursorsMax && len(t.order) > 0 {
		delete(t.cursors, t.order[0])
		t.order = t.order[1:]
	}
	var n uint64
	for n == 0 || t.has(n) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		n = binary.LittleEndian.Uint64(b[:]) >> 1 // within int64: clients parse it as one
	}
	t.cursors[n] = savedCursor{cursor: cur, at: now}
	t.order = append(t.order, n)
	return n
}

func (t *cursorTable) has(n uint64) bool { _, ok := t.cursors[n]; return ok }

// get returns the cursor numbered n; false if it is unknown or expired.
func (t *cursorTable) get(n uint64, now time.Time) (client.Cursor, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.cursors[n]
	if !ok || now.Sub(c.at) > cursorTTL {
		return client.Cursor{}, false
	}
	return c.cursor, true
}

// forget drops the cursor numbered n: its page was answered.
func (t *cursorTable) forget(n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.cursors[n]; !ok {
		return
	}
	delete(t.cursors, n)
	if i := indexOf(t.order, n); i >= 0 {
		t.order = append(t.order[:i], t.order[i+1:]...)
	}
}

func indexOf(s []uint64, n uint64) int {
	for i, v := range s {
		if v == n {
			return i
		}
	}
	return -1
}

// scanArgs are SCAN's options after the cursor.
type scanArgs struct {
	match string
	count int
	// typ is TYPE's type, lower case ("": any): a page then holds the
	// keys of that type, each key's type read (string and hash are the
	// types Catena has; another lists nothing).
	typ string
}

// parseScanArgs reads [MATCH pattern] [COUNT count] [TYPE type], or
// returns Redis's error reply.
func parseScanArgs(args [][]byte) (scanArgs, string) {
	a := scanArgs{count: client.DefaultScanCount}
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return a, errSyntax
		}
		v := args[i+1]
		switch strings.ToLower(string(args[i])) {
		case "match":
			var msg string
			if a.match, msg = scanPattern(v); msg != "" {
				return a, msg
			}
		case "count":
			n, ok := parseInt(v)
			if !ok {
				return a, errNotInteger
			}
			if n < 1 {
				return a, errSyntax
			}
			a.count = int(min(n, wire.ScanCountMax))
		case "type":
			a.typ = strings.ToLower(string(v))
		default:
			return a, errSyntax
		}
	}
	return a, ""
}

// scanPattern checks a MATCH or KEYS pattern: the reply for one too long,
// else the pattern ("*", every key, as none: no key is empty).
func scanPattern(v []byte) (string, string) {
	switch {
	case len(v) > wire.ScanPatternMax:
		return "", "ERR pattern too long"
	case string(v) == "*":
		return "", ""
	}
	return string(v), ""
}

func runScan(ctx context.Context, x exec, args [][]byte, r *reply) {
	n, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		r.err("ERR invalid cursor")
		return
	}
	a, msg := parseScanArgs(args[2:])
	if msg != "" {
		r.err(msg)
		return
	}
	cur := client.Cursor{}
	if n != 0 {
		var ok bool
		if cur, ok = x.cursors.get(n, time.Now()); !ok {
			r.err("ERR invalid cursor")
			return
		}
	}
	keys, next, err := x.store.Scan(ctx, cur, a.match, a.count)
	if err != nil {
		r.err(errorReply(err)) // the cursor stays good: the page may be asked for again
		return
	}
	if n != 0 {
		x.cursors.forget(n)
	}
	if a.typ != "" {
		if keys, err = keysOfType(ctx, x, keys, a.typ); err != nil {
			r.err(errorReply(err))
			return
		}
	}
	out := "0"
	if !next.Done() {
		out = strconv.FormatUint(x.cursors.save(next, time.Now()), 10)
	}
	r.array(2)
	r.bulk([]byte(out))
	r.array(len(keys))
	for _, k := range keys {
		r.bulk([]byte(k))
	}
}

// keysOfType returns those of keys that hold a value of type typ (a key
// deleted meanwhile is left out).
func keysOfType(ctx context.Context, x exec, keys []string, typ string) ([]string, error) {
	if typ != "string" && typ != "hash" {
		return nil, nil
	}
	types := make([]string, len(keys))
	err := forKeys(keys, func(i int, k string) error {
		t, err := x.store.TypeOf(ctx, k, x.consistency)
		types[i] = t
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for i, k := range keys {
		if types[i] == typ {
			out = append(out, k)
		}
	}
	return out, nil
}

// scanAll walks every key that matches pattern, a page at a time.
func scanAll(ctx context.Context, store Store, pattern string, f func(keys []string)) error {
	for cur := (client.Cursor{}); !cur.Done(); {
		keys, next, err := store.Scan(ctx, cur, pattern, 1000)
		if err != nil {
			return err
		}
		f(keys)
		cur = next
	}
	return nil
}

func runKeys(ctx context.Context, x exec, args [][]byte, r *reply) {
	pattern, msg := scanPattern(args[1])
	if msg != "" {
		r.err(msg)
		return
	}
	var all []string
	if err := scanAll(ctx, x.store, pattern, func(keys []string) { all = append(all, keys...) }); err != nil {
		r.err(errorReply(err))
		return
	}
	r.array(len(all))
	for _, k := range all {
		r.bulk([]byte(k))
	}
}

func runDBSize(ctx context.Context, x exec, _ [][]byte, r *reply) {
	var n int64
	if err := scanAll(ctx, x.store, "", func(keys []string) { n += int64(len(keys)) }); err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(n)
}

// runRandomKey returns a key drawn from the first page of keys a scan
// finds (up to 100): a sample, as Redis users use RANDOMKEY, but not
// uniform over every key (Catena keeps no count per volume to draw
// from).
func runRandomKey(ctx context.Context, x exec, _ [][]byte, r *reply) {
	for cur := (client.Cursor{}); !cur.Done(); {
		keys, next, err := x.store.Scan(ctx, cur, "", 100)
		if err != nil {
			r.err(errorReply(err))
			return
		}
		if len(keys) > 0 {
			var b [8]byte
			_, _ = rand.Read(b[:])
			r.bulk([]byte(keys[binary.LittleEndian.Uint64(b[:])%uint64(len(keys))]))
			return
		}
		cur = next
	}
	r.null()
}
