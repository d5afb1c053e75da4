package resp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// Keys that expire (docs/adr/0028-expiry.md): SET's EX, PX, EXAT, PXAT
// and KEEPTTL, SETEX, PSETEX, GETEX, EXPIRE and its kin, TTL and its
// kin, PERSIST. A relative time becomes a deadline by the clock of the
// chain's head; TTL and PTTL count what is left by this proxy's clock.

// expireUnits are the expiry options and commands: the unit of their
// argument and whether it is absolute (Unix time).
var expireUnits = map[string]struct {
	unit     time.Duration
	absolute bool
}{
	"EX": {time.Second, false}, "PX": {time.Millisecond, false},
	"EXAT": {time.Second, true}, "PXAT": {time.Millisecond, true},
}

// parseExpireTime parses an expire time given with option opt (EX, PX,
// EXAT, PXAT) to command: an integer, positive unless allowNonPositive
// (EXPIRE's, which deletes the key), and within what a deadline can hold.
func parseExpireTime(opt string, arg []byte, command string, allowNonPositive bool) (client.Expiry, string) {
	invalidTime := fmt.Sprintf("ERR invalid expire time in '%s' command", command)
	n, ok := parseInt(arg)
	if !ok {
		return client.Expiry{}, errNotInteger
	}
	u := expireUnits[opt]
	if n <= 0 && !allowNonPositive {
		return client.Expiry{}, invalidTime
	}
	limit := int64(kv.ExpiresMax) / int64(u.unit)
	if n > limit || n < -limit {
		return client.Expiry{}, invalidTime
	}
	d := time.Duration(n) * u.unit
	if u.absolute {
		return client.Expiry{At: time.Unix(0, max(1, int64(d)))}, ""
	}
	return client.Expiry{TTL: d}, ""
}

// runSetEx is SETEX and PSETEX: SET with EX or PX.
func runSetEx(opt string) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	command := map[string]string{"EX": "setex", "PX": "psetex"}[opt]
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		e, msg := parseExpireTime(opt, args[2], command, false)
		if msg == "" {
			msg = invalid(wire.OpPut, args[1], args[3])
		}
		if msg != "" {
			r.err(msg)
			return
		}
		if err := x.store.Put(ctx, string(args[1]), args[3], client.WithTTL(e.TTL)); err != nil {
			r.err(errorReply(err))
			return
		}
		r.ok()
	}
}

// runExpire is EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT, with Redis 7's
// NX, XX, GT and LT: 1 if the deadline was set, 0 if the key is absent
// or a condition failed. A time not in the future deletes the key.
func runExpire(opt, command string) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
			r.err(msg)
			return
		}
		e, msg := parseExpireTime(opt, args[2], command, true)
		if msg != "" {
			r.err(msg)
			return
		}
		for _, a := range args[3:] {
			switch strings.ToUpper(string(a)) {
			case "NX":
				e.IfNone = true
			case "XX":
				e.IfSome = true
			case "GT":
				e.IfLater = true
			case "LT":
				e.IfEarlier = true
			default:
				r.err("ERR Unsupported option " + truncate(a))
				return
			}
		}
		switch {
		case e.IfNone && (e.IfSome || e.IfLater || e.IfEarlier):
			r.err("ERR NX and XX, GT or LT options at the same time are not compatible")
			return
		case e.IfLater && e.IfEarlier:
			r.err("ERR GT and LT options at the same time are not compatible")
			return
		}
		changed, _, err := x.store.ChangeExpiry(ctx, string(args[1]), e)
		if err != nil {
			r.err(errorReply(err))
			return
		}
		r.int(boolInt(changed))
	}
}

func runPersist(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
		r.err(msg)
		return
	}
	changed, _, err := x.store.ChangeExpiry(ctx, string(args[1]), client.Expiry{Persist: true})
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.int(boolInt(changed))
}

// runGetEx is GETEX: GET, and with an option a change of the deadline
// in the same atomic update.
func runGetEx(ctx context.Context, x exec, args [][]byte, r *reply) {
	if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
		r.err(msg)
		return
	}
	var e *client.Expiry
	for i := 2; i < len(args); i++ {
		switch opt := strings.ToUpper(string(args[i])); opt {
		case "PERSIST":
			if e != nil {
				r.err(errSyntax)
				return
			}
			e = &client.Expiry{Persist: true}
		case "EX", "PX", "EXAT", "PXAT":
			if e != nil || i+1 == len(args) {
				r.err(errSyntax)
				return
			}
			i++
			parsed, msg := parseExpireTime(opt, args[i], "getex", false)
			if msg != "" {
				r.err(msg)
				return
			}
			e = &parsed
		default:
			r.err(errSyntax)
			return
		}
	}
	if e == nil {
		runGet(ctx, x, args[:2], r)
		return
	}
	_, value, err := x.store.ChangeExpiry(ctx, string(args[1]), *e)
	if err != nil {
		r.err(errorReply(err))
		return
	}
	r.value(value, value != nil)
}

// runTTL is TTL, PTTL, EXPIRETIME and PEXPIRETIME: -2 if the key is
// absent, -1 if it has no deadline, else the time left (by this proxy's
// clock; a deadline already past reads as absent) or the deadline.
func runTTL(unit time.Duration, absolute bool) func(ctx context.Context, x exec, args [][]byte, r *reply) {
	return func(ctx context.Context, x exec, args [][]byte, r *reply) {
		if msg := invalid(wire.OpGet, args[1], nil); msg != "" {
			r.err(msg)
			return
		}
		_, deadline, found, err := x.store.Deadline(ctx, string(args[1]), x.consistency)
		switch {
		case err != nil:
			r.err(errorReply(err))
		case !found:
			r.int(-2)
		case deadline.IsZero():
			r.int(-1)
		case absolute:
			r.int(deadline.UnixNano() / int64(unit))
		default:
			left := time.Until(deadline)
			if left <= 0 {
				r.int(-2)
				return
			}
			r.int(int64((left + unit/2) / unit)) // rounded, as Redis does
		}
	}
}

// expiryCommands are the commands of keys that expire; Redis's
// summaries, groups and "since".
var expiryCommands = []*command{
	{name: "setex", arity: 4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom"},
		group: "string", since: "2.0.0", summary: "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", complexity: "O(1)",
		run: runSetEx("EX")},
	{name: "psetex", arity: 4, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "denyoom"},
		group: "string", since: "2.6.0", summary: "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", complexity: "O(1)",
		run: runSetEx("PX")},
	{name: "getex", arity: -2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "string", since: "6.2.0", summary: "Returns the string value of a key after setting its expiration time.", complexity: "O(1)",
		valueReplies: 1, run: runGetEx},
	{name: "expire", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "1.0.0", summary: "Sets the expiration time of a key in seconds.", complexity: "O(1)",
		run: runExpire("EX", "expire")},
	{name: "pexpire", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "2.6.0", summary: "Sets the expiration time of a key in milliseconds.", complexity: "O(1)",
		run: runExpire("PX", "pexpire")},
	{name: "expireat", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "1.2.0", summary: "Sets the expiration time of a key to a Unix timestamp.", complexity: "O(1)",
		run: runExpire("EXAT", "expireat")},
	{name: "pexpireat", arity: -3, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "2.6.0", summary: "Sets the expiration time of a key to a Unix milliseconds timestamp.", complexity: "O(1)",
		run: runExpire("PXAT", "pexpireat")},
	{name: "persist", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"write", "fast"},
		group: "generic", since: "2.2.0", summary: "Removes the expiration time of a key.", complexity: "O(1)",
		run: runPersist},
	{name: "ttl", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "1.0.0", summary: "Returns the expiration time in seconds of a key.", complexity: "O(1)",
		run: runTTL(time.Second, false)},
	{name: "pttl", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "2.6.0", summary: "Returns the expiration time in milliseconds of a key.", complexity: "O(1)",
		run: runTTL(time.Millisecond, false)},
	{name: "expiretime", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "7.0.0", summary: "Returns the expiration time of a key as a Unix timestamp.", complexity: "O(1)",
		run: runTTL(time.Second, true)},
	{name: "pexpiretime", arity: 2, firstKey: 1, lastKey: 1, step: 1, flags: []string{"readonly", "fast"},
		group: "generic", since: "7.0.0", summary: "Returns the expiration time of a key as a Unix milliseconds timestamp.", complexity: "O(1)",
		run: runTTL(time.Millisecond, true)},
}
