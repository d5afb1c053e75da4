package cli

import "testing"

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "4K": 4096, "20M": 20 << 20, "1g": 1 << 30, "20MB": 20 << 20, "3MiB": 3 << 20} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-1", "1T", "99999999999G"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", bad)
		}
	}
}
