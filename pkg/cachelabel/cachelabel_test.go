package cachelabel

import (
	"errors"
	"regexp"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
)

func TestDatasetID(t *testing.T) {
	a, err := DatasetID("s3://bucket/imagenet/train?region=us-east-1&endpoint=http://127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	b, err := DatasetID("s3://bucket/imagenet/train/?endpoint=http://127.0.0.1:9000&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("two spellings of one source: %q != %q", a, b)
	}
	c, _ := DatasetID("s3://bucket/imagenet/val?region=us-east-1&endpoint=http://127.0.0.1:9000")
	if a == c {
		t.Errorf("two datasets share ID %q", a)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(a) {
		t.Errorf("ID %q is not 16 hex digits", a)
	}
	// Pinned: the CSI node plugin and the controller must agree across releases.
	if got, _ := DatasetID("/data/imagenet"); got != "dbb90fc1fdfdfe00" {
		t.Errorf("DatasetID(/data/imagenet) = %q, want the pinned dbb90fc1fdfdfe00", got)
	}
	k, err := Key("/data/imagenet")
	if err != nil || len(k) > len(Prefix)+63 {
		t.Errorf("Key = %q, %v", k, err)
	}
}

func TestDatasetIDBadURL(t *testing.T) {
	_, err := DatasetID("s3:///nobucket")
	if !errors.Is(err, backend.ErrInvalidURL) {
		t.Fatalf("err = %v, want ErrInvalidURL", err)
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want string
	}{{-3, "0"}, {0, "0"}, {57, "57"}, {100, "100"}, {250, "100"}} {
		if got := FormatPercent(tc.in); got != tc.want {
			t.Errorf("FormatPercent(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "101", "5.5"} {
		if _, err := ParsePercent(bad); err == nil {
			t.Errorf("ParsePercent(%q): no error", bad)
		}
	}
	if p, err := ParsePercent("42"); p != 42 || err != nil {
		t.Errorf("ParsePercent(42) = %d, %v", p, err)
	}
}
