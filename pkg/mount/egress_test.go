package mount_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/epochfs/epochfs/pkg/egress"
	"github.com/epochfs/epochfs/pkg/mount"
)

// TestEgressAllow: the endpoints network rules name, as the restricted
// mount's dialer allows them.
func TestEgressAllow(t *testing.T) {
	got, err := mount.EgressAllow(mount.SplitRules(" s3://aaa?endpoint=http://127.0.0.1:9000, s3://bbb?endpoint=https://minio.local,s3://aws-bucket," +
		"s3://ccc?endpoint=http://[::1]:9000,nfs://127.0.0.1:2049/exports,nfs://filer/x,cephfs://admin@mon:3300/p,cephfs://mon2/p,"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:9000", "minio.local:443", "[::1]:9000", "127.0.0.1", "filer", "mon:3300", "mon2"}
	if !slices.Equal(got, want) {
		t.Errorf("EgressAllow = %q, want %q", got, want)
	}
	for _, bad := range []string{"/local/path", "mirror:s3://aa1?endpoint=http://x,s3://bb2", "s3://"} {
		if _, err := mount.EgressAllow([]string{bad}); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
}

// TestNewEgressRefusesWithoutRule: the dialer of a restricted mount
// refuses loopback unless a rule names the endpoint (checked without a
// connection: Check resolves and judges only).
func TestNewEgressRefusesWithoutRule(t *testing.T) {
	d, err := mount.NewEgress(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background(), "127.0.0.1:9000"); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("no rules: loopback %v, want refused", err)
	}
	d, err = mount.NewEgress([]string{"s3://aaa?endpoint=http://127.0.0.1:9000"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background(), "127.0.0.1:9000"); err != nil {
		t.Errorf("rule names 127.0.0.1:9000: %v", err)
	}
	if err := d.Check(context.Background(), "169.254.169.254:80"); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("metadata address with an unrelated rule: %v, want refused", err)
	}
}
