package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestPush pushes what `make images` writes (here the test-reader image of
// a stand-in busybox tree) to a registry on 127.0.0.1 as `make image-push`
// does, at another tag, and reads it back; usage errors name the usage.
func TestPush(t *testing.T) {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials: anonymous
	out := filepath.Join(t.TempDir(), "reader.tar")
	if err := run([]string{"test-reader", "-busybox", busybox, "-ref", "epochfs/test-reader:abc-dirty", "-out", out}); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := push(context.Background(), []string{"-registry", host + "/mirror", "-tag", "v0.1.0", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	dst := host + "/mirror/epochfs/test-reader:v0.1.0"
	if !strings.HasPrefix(stdout.String(), "pushed "+out+" as "+dst+" in ") {
		t.Errorf("output %q", stdout.String())
	}
	img, err := crane.Pull(dst)
	if err != nil {
		t.Fatal(err)
	}
	local, err := crane.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digest(t, img), digest(t, local); a != b {
		t.Errorf("pushed %s, archive %s", a, b)
	}
	for _, args := range [][]string{{out}, {"-registry", host}, {"-registry", "https://" + host, out}, {"-registry", host, filepath.Join(t.TempDir(), "none.tar")}} {
		if err := push(context.Background(), args, io.Discard); err == nil {
			t.Errorf("push %v: no error", args)
		}
	}
}

func digest(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
