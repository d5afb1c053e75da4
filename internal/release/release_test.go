package release

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		a, b   Range
		common uint32
	}{
		{Range{1, 1}, Range{1, 1}, 1},
		{Range{1, 2}, Range{1, 1}, 1},
		{Range{1, 2}, Range{2, 3}, 2},
		{Range{2, 3}, Range{1, 1}, 0},
		{Range{3, 4}, Range{1, 2}, 0},
	} {
		if got := tc.a.Common(tc.b); got != tc.common {
			t.Errorf("%v with %v: common %d, want %d", tc.a, tc.b, got, tc.common)
		}
		if got := tc.b.Common(tc.a); got != tc.common {
			t.Errorf("%v with %v: common %d, want %d", tc.b, tc.a, got, tc.common)
		}
		if tc.a.Meets(tc.b) != (tc.common != 0) {
			t.Errorf("%v meets %v: %v", tc.a, tc.b, tc.a.Meets(tc.b))
		}
	}
	if !Speaks.Valid() || (Range{0, 1}).Valid() || (Range{2, 1}).Valid() {
		t.Errorf("Valid: wrong answer")
	}
	if got := (Range{1, 2}).String(); got != "1-2" {
		t.Errorf("String = %q", got)
	}
}

// base.txt names the base release, the one every later release
// upgrades from: its semantic version and its commit (docs/upgrades.md).
func TestBaseReleaseNamed(t *testing.T) {
	b, err := os.ReadFile("base.txt")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 || !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(fields[0]) || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(fields[1]) {
		t.Fatalf("base.txt holds %q, want one line: <semver> <40-hex commit>", b)
	}
	if fields[0] != "0.1.0" {
		t.Errorf("the base release is %s; this test names 0.1.0, the first versioned one", fields[0])
	}
}
