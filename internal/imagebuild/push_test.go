package imagebuild

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// testArchive writes a two-layer image tagged ref to a Docker-archive tar.
func testArchive(t *testing.T, ref string) string {
	t.Helper()
	dir := t.TempDir()
	a, err := WriteLayer(filepath.Join(dir, "a.tar.gz"), []Entry{Dir("a"), {Name: "a/f", Mode: 0o644, Data: []byte("alpha")}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := WriteLayer(filepath.Join(dir, "b.tar.gz"), []Entry{Dir("b")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	if err := WriteLayersFile(out, ref, v1.Config{Cmd: []string{"/bin/sh"}}, a, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPushToRegistry pushes an archive to a registry on 127.0.0.1 that
// wants basic auth: with the docker config's credentials the image arrives
// with the archive's digest, config and layers; without them the push
// fails, and neither error nor output carries the secret.
func TestPushToRegistry(t *testing.T) {
	const user, secret = "admin", "s3cr3t-pa55"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	path := testArchive(t, "epochfs/x:v1")
	ref, err := ArchiveRef(path)
	if err != nil || ref != "epochfs/x:v1" {
		t.Fatalf("ArchiveRef %q, %v", ref, err)
	}
	dst, err := RegistryRef(host, ref, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}

	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	err = Push(context.Background(), path, dst, PushOptions{})
	if err == nil {
		t.Fatal("push without credentials succeeded")
	}
	t.Logf("without credentials: %v", err)
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + secret))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgDir2 := t.TempDir() // a wrong password: the error must not carry it
	wrong := base64.StdEncoding.EncodeToString([]byte(user + ":wrong-" + secret))
	if err := os.WriteFile(filepath.Join(cfgDir2, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+wrong+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfgDir2)
	if err := Push(context.Background(), path, dst, PushOptions{}); err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), wrong) {
		t.Errorf("push with a wrong password: %v, want an error without the password", err)
	}
	t.Setenv("DOCKER_CONFIG", cfgDir)
	if err := Push(context.Background(), path, dst, PushOptions{}); err != nil {
		t.Fatal(err)
	}

	want, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := name.ParseReference(host + "/epochfs/x:v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(pulled, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := want.Digest()
	gd, _ := got.Digest()
	if wd != gd {
		t.Fatalf("pushed digest %s, archive's %s", gd, wd)
	}
	ls, err := got.Layers()
	if err != nil || len(ls) != 2 {
		t.Fatalf("%d layers (%v)", len(ls), err)
	}
	if cf, err := got.ConfigFile(); err != nil || strings.Join(cf.Config.Cmd, " ") != "/bin/sh" {
		t.Fatalf("config %+v (%v)", cf, err)
	}
}

func TestRegistryRef(t *testing.T) {
	for _, tc := range []struct {
		registry, ref, tag, want string
	}{
		{"127.0.0.1:5000", "epochfs/epochfs:v1", "", "127.0.0.1:5000/epochfs/epochfs:v1"},
		{"registry.example.com/team/", "epochfs/epochfs:abc-dirty", "v0.1.0", "registry.example.com/team/epochfs/epochfs:v0.1.0"},
		{"localhost:5000", "epochfs/torch-example:v1", "", "localhost:5000/epochfs/torch-example:v1"},
		{"", "epochfs/epochfs:v1", "", ""},
		{"https://ghcr.io", "epochfs/epochfs:v1", "", ""},
		{"ghcr.io", "epochfs/epochfs", "", ""},
		{"ghcr.io", "epochfs/epochfs:v1", "bad tag", ""},
		{"Bad Host", "epochfs/epochfs:v1", "", ""},
	} {
		got, err := RegistryRef(tc.registry, tc.ref, tc.tag)
		if (err == nil) != (tc.want != "") || got != tc.want {
			t.Errorf("RegistryRef(%q, %q, %q) = %q, %v; want %q", tc.registry, tc.ref, tc.tag, got, err, tc.want)
		}
	}
}

// failTransport fails the test when a request reaches it.
type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("request to %s sent", r.URL)
	return nil, errors.New("not sent")
}

// okTransport answers 200.
type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// TestPlainHTTPGuard: plain HTTP only to loopback unless Insecure;
// refused requests are never sent (no packet leaves for a private range).
func TestPlainHTTPGuard(t *testing.T) {
	for _, tc := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"http://127.0.0.1:5000/v2/", false, true},
		{"http://127.3.4.5:5000/v2/", false, true},
		{"http://localhost:5000/v2/", false, true},
		{"http://[::1]:5000/v2/", false, true},
		{"https://10.1.2.3:5000/v2/", false, true},
		{"http://10.1.2.3:5000/v2/", false, false},
		{"http://192.168.1.1/v2/", false, false},
		{"http://registry.local/v2/", false, false},
		{"http://10.1.2.3:5000/v2/", true, true},
	} {
		var next http.RoundTripper = failTransport{t}
		if tc.ok {
			next = okTransport{}
		}
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		_, err := plainHTTPGuard{next: next, allow: tc.allow}.RoundTrip(req)
		if tc.ok && err != nil {
			t.Errorf("%s (insecure %v): %v", tc.url, tc.allow, err)
		}
		if !tc.ok && !errors.Is(err, ErrPlainHTTP) {
			t.Errorf("%s (insecure %v): %v, want ErrPlainHTTP", tc.url, tc.allow, err)
		}
	}
}
