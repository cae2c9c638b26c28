package cachelabel

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/source"
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
	if !errors.Is(err, source.ErrInvalidURL) {
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

// TestLocations: live Leases named after their holder give each dataset's
// nodes, most cached first; expired, misnamed, holderless Leases and
// malformed annotations give nothing, and one Lease gives at most
// MaxDatasetsPerLease datasets.
func TestLocations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id := strings.Repeat("ab", 8)
	mk := func(name, holder string, renewed time.Duration, ann map[string]string) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(int32(90)), RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-renewed)))}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	many := map[string]string{}
	for i := range MaxDatasetsPerLease + 10 {
		many[Prefix+fmt.Sprintf("%016x", i)] = "1"
	}
	got := Locations([]coordinationv1.Lease{
		mk(LeaseName("node-a"), "node-a", time.Second, map[string]string{Prefix + id: "40", "other": "x"}),
		mk(LeaseName("node-b"), "node-b", time.Minute, map[string]string{Prefix + id: "90", Prefix + "XYZ": "10", Prefix + strings.Repeat("cd", 8): "101"}),
		mk(LeaseName("node-c"), "node-c", 2*time.Minute, map[string]string{Prefix + id: "100"}), // expired
		mk(LeaseName("node-d"), "node-e", 0, map[string]string{Prefix + id: "100"}),             // not its holder's name
		mk(LeaseName("node-f"), "", 0, map[string]string{Prefix + id: "100"}),                   // no holder
		mk(LeaseName("Bad_Node"), "Bad_Node", 0, map[string]string{Prefix + id: "100"}),         // not a node name
		mk(LeaseName("node-g"), "node-g", 0, many),
	}, now)
	want := []Location{{"node-b", 90}, {"node-a", 40}}
	if !reflect.DeepEqual(got[id], want) {
		t.Errorf("locations of %s: %v, want %v", id, got[id], want)
	}
	if len(got) != 1+MaxDatasetsPerLease {
		t.Errorf("%d datasets, want %d (one, and the capped Lease's)", len(got), 1+MaxDatasetsPerLease)
	}
	if n := len(LeaseName(strings.Repeat("n", 253))); n > 63 {
		t.Errorf("lease name of %d bytes", n)
	}
}
