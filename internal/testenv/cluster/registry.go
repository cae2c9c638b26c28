package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// Registry is an image registry (go-containerregistry's pkg/registry) on
// 127.0.0.1 served by the test process, blobs on disk in a temporary
// directory of the test (manifests and uploads in memory). It lives as
// long as the test: t.Cleanup stops it, after the Cleanups registered later
// (a chart's uninstall) and before those registered earlier (the cluster's
// Down); what the kubelet pulled stays in containerd. Plain HTTP: a cluster
// trusts it with TrustRegistry.
type Registry struct {
	// Host is "127.0.0.1:PORT", what image refs start with.
	Host string
}

// StartRegistry starts a Registry for t.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cluster: registry: %v", err)
	}
	logs := log.New(io.Discard, "", 0) // one line per request otherwise
	srv := &http.Server{
		Handler:           registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)), registry.Logger(logs)),
		ReadHeaderTimeout: 30 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Logf("cluster: registry: %v", err)
		}
	})
	return &Registry{Host: ln.Addr().String()}
}

// Push pushes the image of a Docker-archive tar (`make images`) to the
// registry under its own name and tag, and returns the ref pods name it
// by ("127.0.0.1:PORT/NAME:TAG").
func (r *Registry) Push(ctx context.Context, tarPath string) (string, error) {
	ref, err := imagebuild.ArchiveRef(tarPath)
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	dst, err := imagebuild.RegistryRef(r.Host, ref, "")
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	if err := imagebuild.Push(ctx, tarPath, dst, imagebuild.PushOptions{}); err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	return dst, nil
}

// TrustRegistry lets the cluster's containerd pull from host
// ("127.0.0.1:PORT", a Registry) over plain HTTP: a hosts.toml for that
// host alone in containerd's registry config_path, which containerd reads
// at each pull (no restart). Every other registry keeps containerd's
// defaults (HTTPS).
func (c *Cluster) TrustRegistry(host string) error {
	h, _, err := net.SplitHostPort(host)
	if err != nil || !imagebuild.IsLoopbackHost(h) {
		return fmt.Errorf("cluster: registry %q: want a loopback HOST:PORT", host)
	}
	dir := filepath.Join(clusterPaths{c.Dir}.registryHostsDir(), host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}

// StartRegistry starts a Registry for t (StartRegistry) that the cluster
// trusts (TrustRegistry).
func (c *Cluster) StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r := StartRegistry(t)
	if err := c.TrustRegistry(r.Host); err != nil {
		t.Fatal(err)
	}
	return r
}
