package main

import (
	"os"
	"strconv"
	"strings"
)

// passthroughExpected reports whether FUSE passthrough is possible here:
// root on a kernel ≥ 6.9.
func passthroughExpected() bool {
	if os.Geteuid() != 0 {
		return false
	}
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	parts := strings.SplitN(strings.TrimSpace(string(b)), ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major > 6 || major == 6 && minor >= 9
}
