// Package mutationtest is for tests that show a checker catches a
// deliberately broken protocol (package mutation).
package mutationtest

import (
	"testing"

	"github.com/catena-kv/catena/internal/mutation"
)

// Require skips t unless the build runs mutations: go test -tags
// catena_unsafe (.ci/run runs these tests so).
func Require(t testing.TB) {
	t.Helper()
	if !mutation.Enabled {
		t.Skip("needs the mutation code: go test -tags catena_unsafe")
	}
}

// Enabled reports whether the build runs mutations, and notes on t when
// it does not: a test that checks the real protocol in every build checks
// that a mutation is caught only where it can.
func Enabled(t testing.TB) bool {
	t.Helper()
	if !mutation.Enabled {
		t.Log("the mutation half of this test needs the mutation code: go test -tags catena_unsafe")
	}
	return mutation.Enabled
}
