package sourcepolicy

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckLexically: the job controller's check, which cannot see the
// node's file system, refuses by name what the node would refuse.
func TestCheckLexically(t *testing.T) {
	c, err := New(Policy{
		AllowedLocalRoots: []string{"/data/datasets"},
		Forbidden:         []string{"/data/state"},
		Network:           []string{"s3://datasets?endpoint=http://minio:9000", "nfs://filer/exports"},
	})
	if err != nil {
		t.Fatal(err)
	}
	none, err := New(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    *Checker
		src  string
		err  string // substring of the refusal; "" when allowed
	}{
		{"under-root-missing-on-this-host", c, "/data/datasets/imagenet/train", ""},
		{"root-itself", c, "/data/datasets", ""},
		{"file-url", c, "file:///data/datasets/x", ""},
		{"root-fs", c, "/", "the node's whole file system"},
		{"etc", c, "/etc", "not under an allowed local root"},
		{"dotdot-escape", c, "/data/datasets/../../etc", "not under an allowed local root"},
		{"sibling-prefix", c, "/data/datasets-other", "not under an allowed local root"},
		{"proc-root", c, "/proc/1/root", "overlaps /proc"},
		{"proc-root-in-mirror", c, "mirror:/data/datasets/a,/proc/1/root/data", "mirror replica 2: "},
		{"forbidden-by-dotdot", c, "/data/datasets/../state/secrets", "overlaps /data/state"},
		{"around-forbidden", c, "/data", "overlaps /data/state"},
		{"no-roots", none, "/data/datasets/x", "local sources are disabled"},
		{"no-roots-etc", none, "/etc", "local sources are disabled"},
		{"network-rule", c, "s3://datasets/imagenet?endpoint=http://minio:9000", ""},
		{"network-other-bucket", c, "s3://secrets/x?endpoint=http://minio:9000", "matches none of the node's network rules"},
		{"network-other-host", c, "nfs://evil/exports/x", "matches none of the node's network rules"},
		{"network-any-without-rules", none, "cephfs://mon/x", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.CheckLexically(mustParse(t, tc.src), true)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && err == nil:
				t.Fatalf("allowed, want a refusal containing %q", tc.err)
			case tc.err != "" && (!errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want ErrForbidden containing %q", err, tc.err)
			}
		})
	}
}
