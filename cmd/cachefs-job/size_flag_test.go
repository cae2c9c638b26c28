package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/cliusage"
)

// TestSizeFlags: --cache-size and --shm-size take the one size grammar
// (units.ParseSize) and refuse 500m, negatives and junk naming the flag,
// before anything is sent. No cluster is needed: the refusals come first.
func TestSizeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cache-size", "500m"}, `invalid argument "500m" for "--cache-size" flag: invalid size "500m": "m" is milli in Kubernetes quantities, not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)`},
		{[]string{"--cache-size", "-1"}, `invalid argument "-1" for "--cache-size" flag: invalid size "-1": negative`},
		{[]string{"--cache-size", "lots"}, `invalid argument "lots" for "--cache-size" flag: invalid size "lots": want a number with an optional unit`},
		{[]string{"--shm-size=-1"}, `invalid argument "-1" for "--shm-size" flag: invalid size "-1": negative (or 0 for the container runtime's own /dev/shm)`},
		{[]string{"--shm-size", "500m"}, `invalid argument "500m" for "--shm-size" flag: invalid size "500m": "m" is milli in Kubernetes quantities`},
		{[]string{"--shm-size", "0.5"}, `invalid argument "0.5" for "--shm-size" flag: invalid size "0.5": must be greater than zero (or 0 for the container runtime's own /dev/shm)`},
	} {
		args := append([]string{"job", "submit", "x", "--image", "i", "--dataset", "d=/data/d:/d", "--dry-run"}, tc.args...)
		_, _, err := runJob(t, args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v\nwant an error starting %s", tc.args, err, tc.want)
		}
		if !cliusage.Is(err) {
			t.Errorf("%v: %v is not a usage error (exit 2)", tc.args, err)
		}
	}
	sub, _, err := newRoot().Find([]string{"job", "submit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cache-size", "shm-size"} {
		if !regexp.MustCompile(`(?m)^\s+--` + name + ` SIZE\s`).MatchString(sub.Flags().FlagUsages()) {
			t.Errorf("job submit --help has no line --%s SIZE:\n%s", name, sub.Flags().FlagUsages())
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

// TestAge: ages read as kubectl prints them (duration.HumanDuration), and
// an object without a creation time (a dry run) is <unknown>.
func TestAge(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0: "0s", 42 * time.Second: "42s", 150 * time.Second: "2m30s", 45 * time.Minute: "45m",
		3*time.Hour + 12*time.Minute: "3h12m", 30 * time.Hour: "30h", 52 * time.Hour: "2d4h", 400 * 24 * time.Hour: "400d",
		-500 * time.Millisecond: "0s", -5 * time.Second: "<invalid>",
	} {
		if got := age(now, metav1.NewTime(now.Add(-d))); got != want {
			t.Errorf("age of %v: %q, want %q", d, got, want)
		}
	}
	if got := age(now, metav1.Time{}); got != "<unknown>" {
		t.Errorf("age of no time: %q", got)
	}
}

// TestLogFlagCompletion: the global --log-format and --log-level complete
// their values (no cluster needed).
func TestLogFlagCompletion(t *testing.T) {
	for words, want := range map[string]string{
		"job list --log-format ": "text\njson\n:4\n",
		"job get x --log-level ": "debug\ninfo\nwarn\nerror\n:4\n",
	} {
		out, _, err := runJob(t, append([]string{"__complete"}, append(strings.Fields(words), "")...)...)
		if err != nil || out != want {
			t.Errorf("__complete %s: %q, %v; want %q", words, out, err, want)
		}
	}
}
