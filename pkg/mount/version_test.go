package mount_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// mountOnce mounts cfg, runs fn, and unmounts (also when fn fails the
// test), so that the next mount can take the same cache directory.
func mountOnce(t *testing.T, cfg mount.Config, fn func(m *mount.Mount)) {
	t.Helper()
	testenv.RequireFUSE(t)
	m, err := mount.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			if err := m.Unmount(); err != nil {
				_ = syscall.Unmount(cfg.Mountpoint, syscall.MNT_DETACH)
			}
		}
	})
	fn(m)
	unmounted = true
	if err := m.Unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
}

// readNames reads each name under dir and returns its content, or the error
// text.
func readNames(dir string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			out[n] = "error: " + err.Error()
			if errors.Is(err, syscall.EIO) {
				out[n] = "EIO"
			}
			continue
		}
		out[n] = string(b)
	}
	return out
}

func checkReads(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %s reads %q, want %q", what, n, got[n], w)
		}
	}
}

// TestRemountSeesRewrite: files rewritten at the source with the same size
// and their mtime put back (in place, and by rename) while no mount ran
// are read with their new bytes by the next mount over the same cache
// directory, not served from the entries cached before.
func TestRemountSeesRewrite(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"inplace", "renamed"} {
		if err := os.WriteFile(filepath.Join(src, n), []byte("old bytes of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20, Manifest: mountapi.ManifestNone}
	mountOnce(t, cfg, func(m *mount.Mount) {
		checkReads(t, "first mount", readNames(cfg.Mountpoint, "inplace", "renamed"),
			map[string]string{"inplace": "old bytes of inplace", "renamed": "old bytes of renamed"})
		if st := m.Stats(); st.Entries != 2 {
			t.Fatalf("first mount cached %d entries, want 2", st.Entries)
		}
	})
	testenv.RewriteSameSize(t, filepath.Join(src, "inplace"), []byte("NEW BYTES OF inplace"), false)
	testenv.RewriteSameSize(t, filepath.Join(src, "renamed"), []byte("NEW BYTES OF renamed"), true)
	mountOnce(t, cfg, func(m *mount.Mount) {
		checkReads(t, "remount", readNames(cfg.Mountpoint, "inplace", "renamed"),
			map[string]string{"inplace": "NEW BYTES OF inplace", "renamed": "NEW BYTES OF renamed"})
		if st := m.Stats(); st.Hits != 0 {
			t.Errorf("remount hit %d cached entries, want none", st.Hits)
		}
	})
}

// TestRemountManifestRewrite: with a manifest, a file rewritten with the
// same size and its mtime put back no longer matches the manifest's
// version: uncached it reads as EIO (not new bytes under the old version
// and checksum), cached the mount serves the bytes the manifest names;
// `cachefs index --verify` (Diff) reports both as changed; and a mount
// with the rebuilt manifest reads the new bytes of both, not the entry
// cached under the old version.
func TestRemountManifestRewrite(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	names := []string{"cached", "uncached", "renamed"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(src, n), []byte("old bytes of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := backendtest.Open(t, src)
	index := func(path string) *manifest.Manifest {
		t.Helper()
		man, _, err := manifest.Index(ctx, b, manifest.IndexOptions{Checksum: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := man.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		return man
	}
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20,
		Manifest: filepath.Join(t.TempDir(), "m1")}
	m1 := index(cfg.Manifest)
	mountOnce(t, cfg, func(m *mount.Mount) {
		checkReads(t, "first mount", readNames(cfg.Mountpoint, "cached"), map[string]string{"cached": "old bytes of cached"})
	})
	testenv.RewriteSameSize(t, filepath.Join(src, "cached"), []byte("NEW BYTES OF cached"), false)
	testenv.RewriteSameSize(t, filepath.Join(src, "uncached"), []byte("NEW BYTES OF uncached"), false)
	testenv.RewriteSameSize(t, filepath.Join(src, "renamed"), []byte("NEW BYTES OF renamed"), true)

	mountOnce(t, cfg, func(m *mount.Mount) {
		checkReads(t, "remount with the old manifest", readNames(cfg.Mountpoint, names...),
			map[string]string{"cached": "old bytes of cached", "uncached": "EIO", "renamed": "EIO"})
	})
	cfg.Manifest = filepath.Join(t.TempDir(), "m2")
	m2 := index(cfg.Manifest)
	d := manifest.Diff(m1, m2)
	if len(d.Changed) != 3 || len(d.Missing)+len(d.New) != 0 {
		t.Errorf("drift %+v, want the 3 files changed", d)
	}
	mountOnce(t, cfg, func(m *mount.Mount) {
		checkReads(t, "remount with the rebuilt manifest", readNames(cfg.Mountpoint, names...), map[string]string{
			"cached": "NEW BYTES OF cached", "uncached": "NEW BYTES OF uncached", "renamed": "NEW BYTES OF renamed"})
		if st := m.Stats(); st.Hits != 0 {
			t.Errorf("%d hits on entries cached under the old versions, want none", st.Hits)
		}
	})
}

// TestLegacyPosixVersions: what a build whose posix versions were mtime and
// size only left behind is never served. Its cache entries are removed when
// the new build opens the cache (a full NR cache gets its room back), and
// its manifests are refused with a message saying to rebuild them.
func TestLegacyPosixVersions(t *testing.T) {
	src := t.TempDir()
	p := filepath.Join(src, "f")
	if err := os.WriteFile(p, []byte("current bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	legacy := fmt.Sprintf("%d-%d", fi.ModTime().UnixNano(), fi.Size())
	b := backendtest.Open(t, src)

	// A full cache, as the old build left it: an entry of f under its old
	// version, holding bytes from before a rewrite that kept the mtime.
	cacheDir := t.TempDir()
	old, err := cache.Open(cache.Options{Dir: cacheDir, Capacity: fi.Size()})
	if err != nil {
		t.Fatal(err)
	}
	stale := []byte("STALE bytes!!")
	if _, err := old.Fill(context.Background(), cache.Key{Dataset: b.ID(), Path: "f", Version: legacy}, fi.Size(),
		func(_ context.Context, buf []byte) error { copy(buf, stale); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: fi.Size(), Manifest: mountapi.ManifestNone}
	mountOnce(t, cfg, func(m *mount.Mount) {
		if st := m.Stats(); st.Entries != 0 || st.UsedBytes != 0 {
			t.Errorf("entries of the old version format kept: %+v", st)
		}
		checkReads(t, "mount", readNames(cfg.Mountpoint, "f"), map[string]string{"f": "current bytes"})
		if st := m.Stats(); st.Admissions != 1 {
			t.Errorf("the file was not admitted into the freed room: %+v", st)
		}
	})

	man, _, err := manifest.Build([]manifest.File{{Path: "f", Size: fi.Size(), Version: legacy}},
		manifest.BuildOptions{Info: manifest.Info{Source: b.ID()}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Manifest = filepath.Join(t.TempDir(), "old-manifest")
	if _, err := man.WriteFile(cfg.Manifest); err != nil {
		t.Fatal(err)
	}
	m, err := mount.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, manifest.ErrLegacyVersions) {
		t.Fatalf("Start with a manifest of mtime+size posix versions: %v, want ErrLegacyVersions", err)
	}
	if mounted, err := testenv.Mounted(cfg.Mountpoint); err != nil || mounted {
		t.Errorf("a refused start left a mount behind: %v, %v", mounted, err)
	}
}
