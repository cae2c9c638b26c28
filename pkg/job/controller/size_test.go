package controller

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/units"
)

// TestCacheSizeByAPIServer: the API server itself checks a dataset's
// cacheSize with the CRD's rules (so `kubectl apply` of a bad TrainingJob is
// refused, not only `cachefs job submit`), with a message naming the field,
// and those rules accept exactly what units.ParseSize accepts. Creates are
// dry runs: nothing is stored, no controller runs.
func TestCacheSizeByAPIServer(t *testing.T) {
	e := directEnv(t)
	c := e.c
	ns := e.namespace(t)
	create := func(size string) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobs.epochfs.io/v1alpha1", "kind": "TrainingJob",
			"metadata": map[string]any{"name": "j", "namespace": ns},
			"spec": map[string]any{"image": "x", "workers": int64(1),
				"datasets": []any{map[string]any{"name": "imagenet", "source": "/data/imagenet", "mountPath": "/data", "cacheSize": size}}},
		}}
		return c.Create(context.Background(), u, client.DryRunAll)
	}

	for _, tc := range []struct{ size, want string }{
		{"500m", `cacheSize: m is milli in Kubernetes quantities (500m is half a byte), not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)`},
		{"1.5 m", `cacheSize: m is milli in Kubernetes quantities`},
		{"-1", `cacheSize must be positive`},
		{"-50Gi", `cacheSize must be positive`},
		{"abc", `cacheSize must be a size such as 50Gi, 500G, 1.5Ti or 50GiB`},
		{"1e3", `cacheSize must be a size such as`},
		{"50 GiBs", `cacheSize must be a size such as`},
		{"1.2.3G", `cacheSize must be a size such as`},
		{"0", `cacheSize must be greater than zero`},
		{"0.0Gi", `cacheSize must be greater than zero`},
	} {
		err := create(tc.size)
		if err == nil {
			t.Errorf("cacheSize %q accepted", tc.size)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "spec.datasets[0].cacheSize") || !strings.Contains(msg, tc.want) {
			t.Errorf("cacheSize %q:\n %s\nwant the field spec.datasets[0].cacheSize and\n %s", tc.size, msg, tc.want)
		}
		// One message per mistake: the rules do not pile up.
		if n := strings.Count(msg, "cacheSize: m is milli") + strings.Count(msg, "cacheSize must"); n != 1 {
			t.Errorf("cacheSize %q: %d messages, want 1:\n %s", tc.size, n, msg)
		}
	}
	for _, size := range []string{"50Gi", "500G", "1.5Ti", "50GiB", "500GB", "500M", "512Mi", "1073741824", "10KiB"} {
		if err := create(size); err != nil {
			t.Errorf("cacheSize %q refused: %v", size, err)
		}
	}

	// The rules mirror units.ParseSize: every spelling one accepts the
	// other does (sizes over 8Ei and under one byte are left to the
	// controller, which parses with units: see the field's doc).
	for _, size := range []string{
		"1", "1b", "1B", "1k", "1K", "1kb", "1KB", "1KiB", "1kib", "1Ki", "1ki", "1M", "1m", "1MB", "1mb", "1Mi", "1mi",
		"1MiB", "1G", "1g", "1gb", "1Gi", "1gi", "1GiB", "1T", "1Ti", "1TiB", "1P", "1Pi", "1E", "1Ei", "1.5G", "1.G",
		".5G", " 2Gi ", "2 Gi", "2\tGi", "2Gib", "2GIB", "2iB", "2i", "2Gb", "2KiBB", "Gi", ".", "1..5G", "+1G", "1e9",
		"0x10", "1 000", "1,5G", "1Y", "1Yi", "0.5Ki", "1,000", "2ms", "2 mB",
	} {
		_, perr := units.ParseSize(size)
		aerr := create(size)
		if (perr == nil) != (aerr == nil) {
			t.Errorf("cacheSize %q: units.ParseSize says %v, the API server says %v", size, perr, aerr)
		}
	}
}
