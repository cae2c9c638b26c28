package mount_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// requestCounter is an http.RoundTripper that counts S3 requests by kind.
type requestCounter struct {
	base http.RoundTripper

	mu     sync.Mutex
	counts map[string]int
	lists  []string // query of every LIST
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	kind := "GET"
	switch {
	case r.Method == http.MethodHead:
		kind = "HEAD"
	case r.Method == http.MethodGet && (q.Has("list-type") || q.Has("prefix") || q.Has("delimiter")):
		kind = "LIST"
	case r.Method != http.MethodGet:
		kind = r.Method
	}
	c.mu.Lock()
	c.counts[kind]++
	if kind == "LIST" {
		c.lists = append(c.lists, r.URL.RawQuery)
	}
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// TestS3ManifestMountSendsNoListOrHead mounts a MinIO dataset whose
// manifest sits at prefix/.epochfs/manifest (found without --manifest) and
// counts the HTTP requests: mounting sends only the manifest's GET (the
// mount opens the backend lazily), and walking, stat'ing and listing
// everything sends no LIST and
// no HEAD, and reading sends only GETs.
func TestS3ManifestMountSendsNoListOrHead(t *testing.T) {
	testenv.RequireFUSE(t)
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "datasets")
	files := datagen.Spec{Files: 150, Classes: 6, MedianSize: 3000, MinSize: 10, MaxSize: 30_000, Seed: 9}.Plan()
	mi.PutFiles(t, "datasets", "train/", files)
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	source := "s3://datasets/train?endpoint=" + mi.Endpoint + "&region=us-east-1"

	// Index through the S3 backend and store the manifest next to the data.
	ctx := context.Background()
	man, st, err := manifest.Index(ctx, backendtest.Open(t, source), manifest.IndexOptions{Workers: 4, Checksum: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != len(files) {
		t.Fatalf("indexed %d files, want %d", st.Files, len(files))
	}
	data, err := man.Encode()
	if err != nil {
		t.Fatal(err)
	}
	mi.Put(t, "datasets", "train/"+manifest.DefaultPath, data)
	mi.Put(t, "datasets", "elsewhere/train.manifest", data)

	counter := &requestCounter{base: http.DefaultTransport.(*http.Transport).Clone(), counts: map[string]int{}}
	mnt := t.TempDir()
	m := mounttest.Start(t, mount.Config{Source: source, Mountpoint: mnt, CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Backend: backend.Options{Transport: counter}})
	if m.Manifest() == nil || m.Manifest().Files() != len(files) {
		t.Fatal("the manifest at .epochfs/manifest was not used")
	}
	atMount := counter.snapshot()
	if atMount["LIST"] != 0 || atMount["HEAD"] != 0 {
		t.Fatalf("at mount: %v requests, LIST queries %q; want no LIST or HEAD, only the manifest GET", atMount, counter.lists)
	}

	var walked int
	err = filepath.WalkDir(mnt, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			return err
		}
		if !d.IsDir() {
			walked++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if walked != len(files) {
		t.Errorf("walked %d files, want %d", walked, len(files))
	}
	if _, err := os.Stat(filepath.Join(mnt, "n00000000", "missing.jpg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	afterWalk := counter.snapshot()
	if afterWalk["LIST"] != atMount["LIST"] || afterWalk["HEAD"] != 0 || afterWalk["GET"] != atMount["GET"] {
		t.Fatalf("walk + stat + readdir sent requests: before %v, after %v", atMount, afterWalk)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(mnt, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if sum := datagen.Sum(f); string(man.Checksum(mustFind(t, man, f.Path))) != string(sum[:]) || len(got) != int(f.Size) {
			t.Fatalf("%s: wrong size or manifest checksum", f.Path)
		}
	}
	afterRead := counter.snapshot()
	if afterRead["LIST"] != atMount["LIST"] || afterRead["HEAD"] != 0 || afterRead["GET"] < atMount["GET"]+len(files) {
		t.Errorf("reading every file: before %v, after %v; want only GETs", atMount, afterRead)
	}
	t.Logf("requests: at mount %v, after walk %v, after reading %d files %v", atMount, afterWalk, len(files), afterRead)

	// --manifest as the URL of another object.
	mnt2 := t.TempDir()
	m2 := mounttest.Start(t, mount.Config{Source: source, Mountpoint: mnt2, CacheDir: t.TempDir(), CacheSize: 1 << 20,
		Manifest: "s3://datasets/elsewhere/train.manifest?endpoint=" + mi.Endpoint + "&region=us-east-1"})
	if m2.Manifest() == nil || m2.Manifest().Files() != len(files) {
		t.Fatal("--manifest URL not used")
	}
	if ents, err := os.ReadDir(mnt2); err != nil || len(ents) != 6 {
		t.Errorf("root of the second mount: %d entries, %v", len(ents), err)
	}
}

func mustFind(t *testing.T, m *manifest.Manifest, p string) int {
	t.Helper()
	i, ok := m.Find(p)
	if !ok {
		t.Fatalf("%s not in the manifest", p)
	}
	return i
}

// TestManifestOption: a local manifest file, "none", auto without a
// manifest, and a corrupt manifest (Start fails, nothing mounted).
func TestManifestOption(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	man, _, err := manifest.Build([]manifest.File{{Path: "only-in-manifest", Size: 1, Version: "v"}},
		manifest.BuildOptions{Info: manifest.Info{Source: "file://" + src}})
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "m")
	if _, err := man.WriteFile(local); err != nil {
		t.Fatal(err)
	}
	names := func(dir string) string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return strings.Join(out, ",")
	}
	cfg := func(manifestOpt string) mount.Config {
		return mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20, Manifest: manifestOpt}
	}
	t.Run("local file", func(t *testing.T) {
		c := cfg(local)
		mounttest.Start(t, c)
		if got := names(c.Mountpoint); got != "only-in-manifest" {
			t.Errorf("mount lists %q", got)
		}
	})
	t.Run("auto without manifest", func(t *testing.T) {
		c := cfg(mountapi.ManifestAuto)
		if m := mounttest.Start(t, c); m.Manifest() != nil {
			t.Error("a manifest appeared")
		}
		if got := names(c.Mountpoint); got != "f0,f1,f2,f3,f4" {
			t.Errorf("mount lists %q", got)
		}
	})
	t.Run("auto finds .epochfs/manifest, none ignores it", func(t *testing.T) {
		if _, err := man.WriteFile(filepath.Join(src, manifest.DefaultPath)); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(filepath.Join(src, ".epochfs"))
		c := cfg(mountapi.ManifestAuto)
		mounttest.Start(t, c)
		if got := names(c.Mountpoint); got != "only-in-manifest" {
			t.Errorf("auto: mount lists %q", got)
		}
		c = cfg(mountapi.ManifestNone)
		mounttest.Start(t, c)
		if got := names(c.Mountpoint); got != ".epochfs,f0,f1,f2,f3,f4" {
			t.Errorf("none: mount lists %q", got)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad")
		data, _ := man.Encode()
		if err := os.WriteFile(bad, data[:len(data)-1], 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := mount.New(cfg(bad))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); !errors.Is(err, manifest.ErrCorrupt) {
			t.Fatalf("Start with a truncated manifest: %v, want ErrCorrupt", err)
		}
	})
}
