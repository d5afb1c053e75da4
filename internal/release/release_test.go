package release

import "testing"

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
