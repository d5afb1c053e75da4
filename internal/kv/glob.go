package kv

// MatchGlob reports whether key matches the Redis glob pattern (the
// patterns of KEYS and SCAN MATCH; Redis's stringmatchlen): * any run of
// bytes, ? one byte, [abc] [^abc] [a-z] classes, \x the byte x.
//
// It works on bytes, not runes, and gives the answers of Redis's
// stringmatchlen (src/util.c, case-sensitive) on its edge cases:
//
//   - '*' matches any bytes, '/' included; consecutive '*' collapse.
//   - The empty key is matched only by the empty pattern, not even by "*":
//     stringmatchlen's loop never runs on an empty string. (Redis's KEYS
//     and SCAN special-case the pattern "*" before calling it; a caller
//     that wants that must do the same.)
//   - A class range may be reversed: [z-a] is [a-z]. A range needs three
//     bytes before the pattern's end, and its end byte is taken literally,
//     so in "[a-]" the range is a through ']' and the class is unterminated.
//   - '\' escapes the next byte inside and outside a class. A lone '\' at
//     the pattern's end (or the class's last byte) stands for itself, so it
//     matches a literal backslash.
//   - An unterminated class ends at the pattern's end, keeping the members
//     seen so far: "[abc" matches one of a, b, c; "[" matches nothing;
//     "[^" matches any one byte.
//   - "[]" is an empty class and matches nothing; "[^]" matches any byte.
//
// Range bounds compare as unsigned bytes. (Redis compares C chars, which
// are signed on some platforms, so its ranges over bytes >= 0x80 vary by
// platform.) Redis also gives up, answering no match, on patterns that
// nest its recursion more than 1000 stars deep; MatchGlob has no such
// limit. Instead of recursing it backtracks only to the last '*', so it
// takes O(len(pattern)*len(key)) time at worst.
func MatchGlob(pattern, key string) bool {
	if key == "" {
		return pattern == ""
	}
	p, k := 0, 0
	// star is the index in pattern just after the last run of '*' seen, or
	// -1; starK is where in key the bytes after that run begin.
	star, starK := -1, 0
	for k < len(key) {
		if p < len(pattern) && pattern[p] == '*' {
			for p < len(pattern) && pattern[p] == '*' {
				p++
			}
			if p == len(pattern) {
				return true
			}
			star, starK = p, k
			continue
		}
		if p < len(pattern) {
			if next, ok := matchGlobByte(pattern, p, key[k]); ok {
				p, k = next, k+1
				continue
			}
		}
		// Every element other than '*' matches exactly one byte, so the
		// last '*' swallowing one byte more is the only retry needed.
		if star < 0 {
			return false
		}
		starK++
		p, k = star, starK
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchGlobByte matches the single-byte element of pattern at index p
// (anything but '*') against c. It returns the index just after the
// element and whether c matched it.
func matchGlobByte(pattern string, p int, c byte) (next int, ok bool) {
	switch pattern[p] {
	case '?':
		return p + 1, true
	case '\\':
		if p+1 < len(pattern) {
			p++
		}
		return p + 1, pattern[p] == c
	case '[':
		return matchGlobClass(pattern, p+1, c)
	default:
		return p + 1, pattern[p] == c
	}
}

// matchGlobClass matches the class whose body starts at pattern[i], just
// after its '[', against c. It returns the index just after the class's
// ']' (or len(pattern) if the class is unterminated) and whether c is in
// the class.
func matchGlobClass(pattern string, i int, c byte) (next int, ok bool) {
	negate := i < len(pattern) && pattern[i] == '^'
	if negate {
		i++
	}
	match := false
	for i < len(pattern) {
		switch {
		case pattern[i] == '\\' && i+1 < len(pattern):
			if pattern[i+1] == c {
				match = true
			}
			i += 2
		case pattern[i] == ']':
			return i + 1, match != negate
		case i+2 < len(pattern) && pattern[i+1] == '-':
			lo, hi := pattern[i], pattern[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			if lo <= c && c <= hi {
				match = true
			}
			i += 3
		default:
			if pattern[i] == c {
				match = true
			}
			i++
		}
	}
	return i, match != negate
}
