package manifest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

func TestDiscover(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := source.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(ctx, src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	files := slices.DeleteFunc(sampleFiles(), func(f File) bool { return isLegacyPosix(f) })
	man := mustBuild(t, files, BuildOptions{Info: Info{Source: "test", Created: created}})
	local := filepath.Join(t.TempDir(), "m")
	if _, err := man.WriteFile(local); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	data := mustEncode(t, man)
	if err := os.WriteFile(bad, data[:len(data)-1], 0o644); err != nil {
		t.Fatal(err)
	}

	check := func(t *testing.T, loc string, wantFiles int, wantErr error) {
		t.Helper()
		m, where, err := Discover(ctx, b, loc, backend.Options{})
		switch {
		case wantErr != nil:
			if !errors.Is(err, wantErr) {
				t.Fatalf("Discover(%q): %v, want %v", loc, err, wantErr)
			}
			return
		case err != nil:
			t.Fatalf("Discover(%q): %v", loc, err)
		case wantFiles < 0 && m != nil:
			t.Fatalf("Discover(%q) found a manifest at %s", loc, where)
		case wantFiles >= 0 && (m == nil || m.Files() != wantFiles):
			t.Fatalf("Discover(%q) = %v at %s, want %d files", loc, m, where, wantFiles)
		}
	}
	t.Run("none", func(t *testing.T) { check(t, LocNone, -1, nil) })
	t.Run("auto without one", func(t *testing.T) { check(t, LocAuto, -1, nil) })
	t.Run("local file", func(t *testing.T) { check(t, local, man.Files(), nil) })
	t.Run("corrupt local file", func(t *testing.T) { check(t, bad, 0, ErrCorrupt) })
	t.Run("missing local file", func(t *testing.T) { check(t, filepath.Join(dir, "nope"), 0, os.ErrNotExist) })
	t.Run("bad URL", func(t *testing.T) { check(t, "s3://bucket/", 0, source.ErrInvalidURL) })
	t.Run("legacy posix versions", func(t *testing.T) {
		old := mustBuild(t, sampleFiles(), BuildOptions{Info: Info{Source: "test", Created: created}})
		p := filepath.Join(t.TempDir(), "old")
		if _, err := old.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		check(t, p, 0, ErrLegacyVersions)
		// DiscoverLimit (node labels) only reads it.
		if m, _, err := DiscoverLimit(ctx, b, p, backend.Options{}, 0); err != nil || m.LegacyPosixVersions() != 2 {
			t.Errorf("DiscoverLimit: %v, %v", m, err)
		}
	})
	t.Run("auto finds DefaultPath", func(t *testing.T) {
		if _, err := man.WriteFile(filepath.Join(dir, DefaultPath)); err != nil {
			t.Fatal(err)
		}
		check(t, LocAuto, man.Files(), nil)
		check(t, "file://"+filepath.Join(dir, DefaultPath), man.Files(), nil)
	})
}

// TestDiscoverLimit: a manifest whose header announces more memory than
// the caller's limit is ErrTooLarge, wherever it is found (a local file, or
// inside the dataset); at exactly its estimate (ReadInfo's MemoryBytes) it
// loads, and the loaded manifest holds no more than the estimate.
func TestDiscoverLimit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := backendtest.Open(t, dir)
	man := mustBuild(t, sampleFiles(), BuildOptions{Info: Info{Source: "test", Created: created}})
	data := mustEncode(t, man)
	local := filepath.Join(t.TempDir(), "m")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".epochfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DefaultPath), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, loc := range []string{local, LocAuto} {
		s, _, err := ReadInfo(ctx, b, loc, backend.Options{}, 0)
		if err != nil || s == nil {
			t.Fatalf("ReadInfo(%q): %v, %v", loc, s, err)
		}
		if _, _, err := DiscoverLimit(ctx, b, loc, backend.Options{}, s.MemoryBytes-1); !errors.Is(err, ErrTooLarge) {
			t.Errorf("DiscoverLimit(%q) one byte under the manifest's estimate: %v, want ErrTooLarge", loc, err)
		}
		m, _, err := DiscoverLimit(ctx, b, loc, backend.Options{}, s.MemoryBytes)
		if err != nil || m == nil {
			t.Fatalf("DiscoverLimit(%q) at the manifest's estimate: %v, %v", loc, m, err)
		}
		if m.MemoryBytes() > s.MemoryBytes {
			t.Errorf("loaded manifest holds %d bytes, over the estimate %d", m.MemoryBytes(), s.MemoryBytes)
		}
	}
}

// isLegacyPosix reports a version that Build stores as a posix
// "MTIMENANOS-SIZE" (tag 2).
func isLegacyPosix(f File) bool {
	v := appendVersion(nil, f.Version, f.Size)
	return len(v) > 0 && v[0] == tagPosix
}
