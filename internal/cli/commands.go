package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// UnknownCommand reports a command name that is none of names on one
// line, with the names it may be a typo of, and a pointer to the
// binary's help rather than the whole usage; it returns the exit status
// of a usage error, 2. program prefixes the message ("catena", or
// "catena help"); its first word names the binary.
//
//	catena: unknown command "gett"; did you mean "get"?
//	Run 'catena help' for the list of commands.
func UnknownCommand(stderr io.Writer, program, name string, names []string) int {
	fmt.Fprintf(stderr, "%s: unknown command %q", program, name)
	if near := Suggest(name, names); len(near) > 0 {
		quoted := make([]string, len(near))
		for i, n := range near {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		fmt.Fprintf(stderr, "; did you mean %s?", orList(quoted))
	}
	binary, _, _ := strings.Cut(program, " ")
	fmt.Fprintf(stderr, "\nRun '%s help' for the list of commands.\n", binary)
	return 2
}

// Suggest returns the names that name may be a typo of, sorted: those
// nearest to it by edit distance (a transposition counts as one edit)
// within suggestDistanceMax(name), or else those that start with name.
func Suggest(name string, names []string) []string {
	var near []string
	best := suggestDistanceMax(name)
	for _, n := range names {
		switch d := editDistance(name, n); {
		case d > best:
		case len(near) == 0 || d < best:
			best, near = d, []string{n}
		default:
			near = append(near, n)
		}
	}
	if len(near) == 0 && len(name) >= suggestPrefixMin {
		for _, n := range names {
			if strings.HasPrefix(n, name) {
				near = append(near, n)
			}
		}
	}
	slices.Sort(near)
	return near
}

// suggestPrefixMin is the shortest name that Suggest completes as a
// prefix: one letter would match half the commands.
const suggestPrefixMin = 2

// suggestDistanceMax is how many edits Suggest allows: one for a name
// of up to five letters ("gett" suggests "get"), about one per three
// letters for a longer one ("stauts" suggests "status").
func suggestDistanceMax(name string) int {
	return max(1, len(name)/3)
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and transpositions of
// adjacent bytes that turn a into b.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			substitution := 1
			if a[i-1] == b[j-1] {
				substitution = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+substitution)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// orList joins items as "a", "a or b", or "a, b or c".
func orList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
