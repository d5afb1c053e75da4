package kv_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
)

func TestMatchGlob(t *testing.T) {
	as := strings.Repeat("a", 10000)
	tests := []struct {
		pattern, key string
		want         bool
	}{
		// Empty pattern and empty key. Redis's stringmatchlen matches the
		// empty key only with the empty pattern, not even with "*".
		{"", "", true},
		{"", "a", false},
		{"a", "", false},
		{"*", "", false},
		{"**", "", false},
		{"?", "", false},
		{"[^]", "", false},

		// Literals.
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"abc", "ab", false},
		{"ab", "abc", false},

		// '*'.
		{"*", "a", true},
		{"*", "a/b/c", true},
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*c", "abc", true},
		{"*c", "abd", false},
		{"a*c", "ac", true},
		{"a*c", "a/b/c", true},
		{"a**c", "abbc", true},
		{"a***", "a", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"h*llo", "heeeello", true},
		{"*ab*cd", "xabyabcd", true},
		{"*ab*cd", "xabycd", true},
		{"*ab*cd", "xaybcd", false},

		// '?'.
		{"?", "a", true},
		{"?", "ab", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"h?llo", "hello", true},
		{"*?", "a", true},
		{"*??", "a", false},
		{"?*?", "ab", true},

		// Classes.
		{"h[ae]llo", "hello", true},
		{"h[ae]llo", "hillo", false},
		{"[abc]", "b", true},
		{"[abc]", "d", false},
		{"[abc]", "ab", false},
		{"[^abc]", "d", true},
		{"[^abc]", "a", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"[a-c]x", "bx", true},
		{"[a-c]", "d", false},
		{"[a-c]", "a", true},
		{"[a-c]", "c", true},
		{"[c-a]", "b", true}, // a reversed range is the same range
		{"[c-a]", "d", false},
		{"[^a-c]", "b", false},
		{"[^a-c]", "d", true},
		{"[a-cx-z]", "y", true},
		{"[a-cx-z]", "m", false},
		{"[*]", "*", true},
		{"[*]", "a", false},
		{"[?]", "a", false},
		{"[]", "a", false},     // an empty class matches nothing
		{"[]a]", "]a]", false}, // ... so "]" cannot be a first member
		{"[]a]", "a]", false},
		{"[^]", "x", true}, // an empty negated class matches any byte
		{"[-a]", "-", true},
		{"[a-]", "]", true}, // "a-]" is a range, leaving the class unterminated
		{"[a-]", "_", true},
		{"[a-]", "-", false},
		{"[a-", "-", true},
		{"[a-", "a", true},
		{"[a-", "b", false},

		// Unterminated classes end at the end of the pattern.
		{"[abc", "b", true},
		{"[abc", "d", false},
		{"[abc", "[abc", false},
		{"x[^ab", "xc", true},
		{"x[^ab", "xa", false},
		{"[", "[", false},
		{"[", "", false},
		{"[^", "x", true},
		{"[^", "xy", false},

		// Backslash escapes outside classes.
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`\?`, "?", true},
		{`\?`, "x", false},
		{`\[a]`, "[a]", true},
		{`\[a]`, "a", false},
		{`\a`, "a", true},
		{`\\`, `\`, true},
		{`*\*`, "abc*", true},
		{`*\*`, "abc", false},
		{`a\*b`, "axb", false},

		// A lone trailing backslash is a literal backslash.
		{`\`, `\`, true},
		{`\`, "a", false},
		{`a\`, `a\`, true},
		{`a\`, "a", false},

		// Backslash escapes inside classes.
		{`[\]]`, "]", true},
		{`[\]a]`, "a", true},
		{`[\^a]`, "^", true},
		{`[^\^]`, "^", false},
		{`[\-]`, "-", true},
		{`[a\-z]`, "-", true},
		{`[a\-z]`, "b", false}, // an escaped '-' makes no range
		{`[a\-z]`, "z", true},
		{`[\\]`, `\`, true},
		{`[\]`, "]", true}, // `\]` is an escaped ']', so the class is unterminated
		{`[\]`, `\`, false},
		{`[\`, `\`, true},    // a class's lone trailing backslash is literal
		{`[a-\]`, "_", true}, // the range is '\' through 'a'; ']' closes the class
		{`[a-\]`, "b", false},

		// Bytes, not runes.
		{"é", "é", true},
		{"?", "é", false},
		{"??", "é", true},
		{"\xff?", "\xff\x00", true},
		{"[\x80-\xff]", "\xc3", true},
		{"[\x80-\xff]", "a", false},
		{"[a\x00]", "\x00", true},

		// Patterns that take naive backtracking exponential time.
		{"*a*a*a*a*a*a*a*a*a*a*b", as, false},
		{"*a*a*a*a*a*a*a*a*a*a*a", as, true},
		{"a*a*a*a*a*a*b", as, false},
		{"*?*?*?*?*?*?*?*?*?*?*b", as, false},
		{"*[a]*[a]*[a]*[a]*[a]*[a]*[a]*[a]*c", as, false},
	}
	for _, tc := range tests {
		if got := kv.MatchGlob(tc.pattern, tc.key); got != tc.want {
			t.Errorf("MatchGlob(%q, %.20q) = %v, want %v", tc.pattern, tc.key, got, tc.want)
		}
		if got := redisStringMatch(tc.pattern, tc.key); got != tc.want {
			t.Errorf("reference stringmatchlen(%q, %.20q) = %v, want %v", tc.pattern, tc.key, got, tc.want)
		}
	}
}

// TestMatchGlobAgainstRedis compares MatchGlob with a line-by-line port of
// Redis's stringmatchlen on every short pattern and key over small
// alphabets, and on random longer ones.
func TestMatchGlobAgainstRedis(t *testing.T) {
	patterns := globStrings("ab*?[]^-\\", 4)
	keys := globStrings("ab]\\", 4)
	for _, p := range patterns {
		for _, k := range keys {
			if got, want := kv.MatchGlob(p, k), redisStringMatch(p, k); got != want {
				t.Fatalf("MatchGlob(%q, %q) = %v, Redis says %v", p, k, got, want)
			}
		}
	}

	const patAlphabet = "ab\x00\xff*?[]^-\\"
	const keyAlphabet = "ab\x00\xff]^-\\*"
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(alphabet string, n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 200000 {
		p, k := random(patAlphabet, 12), random(keyAlphabet, 12)
		if got, want := kv.MatchGlob(p, k), redisStringMatch(p, k); got != want {
			t.Fatalf("MatchGlob(%q, %q) = %v, Redis says %v", p, k, got, want)
		}
	}
}

func FuzzMatchGlob(f *testing.F) {
	f.Add("*", "")
	f.Add("h[^e]llo", "hallo")
	f.Add(`[a-\`, `a\b`)
	f.Add("[^", "x")
	f.Add(`\`, `\`)
	f.Add("*a*?*[a-z]*b", "aXbcab")
	f.Fuzz(func(t *testing.T, pattern, key string) {
		kv.MatchGlob(pattern, key) // must not panic
		if e := globEscape(key); !kv.MatchGlob(e, key) {
			t.Errorf("MatchGlob(%q, %q) = false, want true", e, key)
		}
	})
}

// globEscape backslash-escapes every byte of s, giving a pattern that
// matches exactly s.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte('\\')
		b.WriteByte(s[i])
	}
	return b.String()
}

// globStrings returns every string of at most n bytes from alphabet.
func globStrings(alphabet string, n int) []string {
	all := []string{""}
	level := []string{""}
	for range n {
		var next []string
		for _, s := range level {
			for i := 0; i < len(alphabet); i++ {
				next = append(next, s+alphabet[i:i+1])
			}
		}
		all = append(all, next...)
		level = next
	}
	return all
}

// redisStringMatch is a line-by-line port of stringmatchlen from Redis's
// src/util.c (case-sensitive), the reference MatchGlob must agree with.
// Like Redis's sds strings, the pattern gets a NUL terminator, which the C
// code reads. Range bounds compare as unsigned bytes, as MatchGlob
// documents.
func redisStringMatch(pattern, key string) bool {
	p := append([]byte(pattern), 0)
	skipLongerMatches := false
	return redisStringMatchImpl(p, 0, len(pattern), []byte(key), 0, len(key), &skipLongerMatches, 0)
}

func redisStringMatchImpl(p []byte, pi, plen int, s []byte, si, slen int, skipLongerMatches *bool, nesting int) bool {
	if nesting > 1000 {
		return false
	}
	for plen > 0 && slen > 0 {
		switch p[pi] {
		case '*':
			for plen > 0 && p[pi+1] == '*' {
				pi++
				plen--
			}
			if plen == 1 {
				return true
			}
			for slen > 0 {
				if redisStringMatchImpl(p, pi+1, plen-1, s, si, slen, skipLongerMatches, nesting+1) {
					return true
				}
				if *skipLongerMatches {
					return false
				}
				si++
				slen--
			}
			*skipLongerMatches = true
			return false
		case '?':
			si++
			slen--
		case '[':
			pi++
			plen--
			not := p[pi] == '^'
			if not {
				pi++
				plen--
			}
			match := false
			for {
				if p[pi] == '\\' && plen >= 2 {
					pi++
					plen--
					if p[pi] == s[si] {
						match = true
					}
				} else if p[pi] == ']' {
					break
				} else if plen == 0 {
					pi--
					plen++
					break
				} else if plen >= 3 && p[pi+1] == '-' {
					start, end, c := p[pi], p[pi+2], s[si]
					if start > end {
						start, end = end, start
					}
					pi += 2
					plen -= 2
					if c >= start && c <= end {
						match = true
					}
				} else if p[pi] == s[si] {
					match = true
				}
				pi++
				plen--
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			si++
			slen--
		case '\\':
			if plen >= 2 {
				pi++
				plen--
			}
			fallthrough
		default:
			if p[pi] != s[si] {
				return false
			}
			si++
			slen--
		}
		pi++
		plen--
		if slen == 0 {
			for p[pi] == '*' {
				pi++
				plen--
			}
			break
		}
	}
	return plen == 0 && slen == 0
}
