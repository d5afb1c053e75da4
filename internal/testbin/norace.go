//go:build !race

package testbin

// raceEnabled reports whether this test binary runs under the race
// detector (go test -race).
const raceEnabled = false
