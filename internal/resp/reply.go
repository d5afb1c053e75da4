package resp

import (
	"slices"
	"strconv"

	"github.com/tidwall/redcon"
)

// reply builds one command's reply in RESP2, or RESP3 after HELLO 3. The
// value types are redcon's encoders; RESP3 changes only the null and the
// map here, the two types this front end sends differently.
type reply struct {
	b     []byte
	resp3 bool
}

func (r *reply) ok()                 { r.b = redcon.AppendOK(r.b) }
func (r *reply) status(s string)     { r.b = redcon.AppendString(r.b, s) }
func (r *reply) int(n int64)         { r.b = redcon.AppendInt(r.b, n) }
func (r *reply) bulk(v []byte)       { r.b = redcon.AppendBulk(r.b, v) }
func (r *reply) bulkString(s string) { r.b = redcon.AppendBulkString(r.b, s) }
func (r *reply) array(n int)         { r.b = redcon.AppendArray(r.b, n) }

// err writes an error reply. msg starts with its code: "ERR ...",
// "NOPROTO ...".
// grow makes room for n more bytes of reply, so a reply of many values
// is not copied as it grows.
func (r *reply) grow(n int) { r.b = slices.Grow(r.b, n) }

func (r *reply) err(msg string) { r.b = redcon.AppendError(r.b, msg) }

// errBytes returns an error reply.
func (r *reply) errBytes(msg string) []byte { r.err(msg); return r.b }

// null writes the null reply: RESP2's null bulk string, or RESP3's null.
func (r *reply) null() {
	if r.resp3 {
		r.b = append(r.b, "_\r\n"...)
		return
	}
	r.b = redcon.AppendNull(r.b)
}

// value writes v as a bulk string, or null when the key is absent.
func (r *reply) value(v []byte, found bool) {
	if !found {
		r.null()
		return
	}
	r.bulk(v)
}

// mapOf starts a map of n pairs: RESP3's map, or in RESP2 an array of 2n
// elements, keys and values alternating, as Redis sends it.
func (r *reply) mapOf(n int) {
	if r.resp3 {
		r.b = append(r.b, '%')
		r.b = strconv.AppendInt(r.b, int64(n), 10)
		r.b = append(r.b, '\r', '\n')
		return
	}
	r.array(2 * n)
}
