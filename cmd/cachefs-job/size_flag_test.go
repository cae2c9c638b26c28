package main

import (
	"strings"
	"testing"
)

// TestSizeFlags: --cache-size and --shm-size take the one size grammar
// (units.ParseSize) and refuse 500m, negatives and junk naming the flag,
// before anything is sent. No cluster is needed: the refusals come first.
func TestSizeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cache-size", "500m"}, `--cache-size: invalid size "500m": "m" is milli in Kubernetes quantities, not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)`},
		{[]string{"--cache-size", "-1"}, `--cache-size: invalid size "-1": negative`},
		{[]string{"--cache-size", "lots"}, `--cache-size: invalid size "lots": want a number with an optional unit`},
		{[]string{"--shm-size=-1"}, `--shm-size: invalid size "-1": negative (or 0 for the container runtime's own /dev/shm)`},
		{[]string{"--shm-size", "500m"}, `--shm-size: invalid size "500m": "m" is milli in Kubernetes quantities`},
		{[]string{"--shm-size", "0.5"}, `--shm-size: invalid size "0.5": must be greater than zero (or 0 for the container runtime's own /dev/shm)`},
	} {
		args := append([]string{"job", "submit", "x", "--image", "i", "--dataset", "d=/data/d:/d", "--dry-run"}, tc.args...)
		_, _, err := runJob(t, args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v\nwant an error starting %s", tc.args, err, tc.want)
		}
	}
	// Accepted spellings, stored as Kubernetes writes them.
	for in, want := range map[string]string{"2GiB": "2Gi", "2Gi": "2Gi", "2 GiB": "2Gi", "1.5Gi": "1536Mi", "500M": "500M", "0": "0", "1073741824": "1Gi"} {
		q, err := parseShmSizeFlag(in)
		if err != nil || q.String() != want {
			t.Errorf("--shm-size %q: %v %v, want %s", in, q, err, want)
		}
	}
	for _, in := range []string{"50Gi", "500G", "1.5Ti", "50GiB"} {
		out, _, err := runJob(t, "job", "submit", "x", "--image", "i", "--dataset", "d=/data/d:/d", "--cache-size", in, "--dry-run")
		if err != nil || !strings.Contains(out, "cacheSize: "+in) {
			t.Errorf("--cache-size %s: %v\n%s", in, err, out)
		}
	}
}
