package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"k8s.io/client-go/rest"
)

// TestRegistryPush pushes a busybox image archive to a Registry and reads
// it back by the ref Push returned: the same digest.
func TestRegistryPush(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	tarPath := filepath.Join(t.TempDir(), "busybox.tar")
	if err := BusyboxImage(tarPath, "epochfs-test/busybox:1"); err != nil {
		t.Fatal(err)
	}
	if ref, err := ImageRef(tarPath); err != nil || ref != "docker.io/epochfs-test/busybox:1" {
		t.Fatalf("ImageRef %q, %v", ref, err)
	}
	r := StartRegistry(t)
	if !strings.HasPrefix(r.Host, "127.0.0.1:") {
		t.Fatalf("registry on %s, want 127.0.0.1", r.Host)
	}
	ref, err := r.Push(context.Background(), tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if ref != r.Host+"/epochfs-test/busybox:1" {
		t.Fatalf("pushed as %s", ref)
	}
	got, err := crane.Digest(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := crane.Load(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := img.Digest(); got != want.String() {
		t.Fatalf("registry has %s, archive %s", got, want)
	}
}

// TestTrustRegistry: a hosts.toml for the one loopback host, plain HTTP,
// pull and resolve; anything but a loopback HOST:PORT refused.
func TestTrustRegistry(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	if err := c.TrustRegistry("127.0.0.1:5000"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, "containerd", "certs.d", "127.0.0.1:5000", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	want := "server = \"http://127.0.0.1:5000\"\n\n[host.\"http://127.0.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if string(b) != want {
		t.Fatalf("hosts.toml\n%s\nwant\n%s", b, want)
	}
	for _, bad := range []string{"10.0.0.1:5000", "registry.example.com:443", "127.0.0.1", "../x:1"} {
		if err := c.TrustRegistry(bad); err == nil {
			t.Errorf("TrustRegistry(%q) accepted", bad)
		}
	}
}

// TestChartValuesImages: the registry (no localImages, so the chart's
// default pull policy) or global.localImages, exactly one of them.
func TestChartValuesImages(t *testing.T) {
	c := &Cluster{Config: &rest.Config{Host: "https://127.0.0.1:6443"}, KubeletDir: "/k"}
	base := ChartSetup{ImageTag: "v9", StateDir: "/s", CacheRoot: "/c", MetricsPort: 1, RegistrarHealthPort: 2}
	reg := base
	reg.Registry = "127.0.0.1:5000"
	v, err := c.ChartValues(reg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(v, "image.registry=127.0.0.1:5000") || slices.Contains(v, "global.localImages=true") ||
		!slices.Contains(v, "image.tag=v9") || slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, "pullPolicy") }) {
		t.Errorf("registry values %v", v)
	}
	local := base
	local.LocalImages = true
	if v, err = c.ChartValues(local); err != nil || !slices.Contains(v, "global.localImages=true") ||
		slices.ContainsFunc(v, func(s string) bool { return strings.HasPrefix(s, "image.registry=") }) {
		t.Errorf("localImages values %v, %v", v, err)
	}
	both := reg
	both.LocalImages = true
	for name, s := range map[string]ChartSetup{"neither": base, "both": both} {
		if _, err := c.ChartValues(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
