package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseByteSize parses a count of bytes with an optional K, M or G
// suffix (powers of 1024; a trailing B or iB is allowed): catena
// backup's -rate, catena-lab bench backup's.
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte count (e.g. 20M)", s)
	}
	return n * mult, nil
}
