package fusefs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/source"
)

// countingBackend counts the calls that reach a backend.
type countingBackend struct {
	backend.Backend
	lists, stats, reads atomic.Int64
}

func (b *countingBackend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	b.lists.Add(1)
	return b.Backend.List(ctx, p)
}

func (b *countingBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	b.stats.Add(1)
	return b.Backend.Stat(ctx, p)
}

func (b *countingBackend) ReadAt(ctx context.Context, p, v string, buf []byte, off int64) (int, error) {
	b.reads.Add(1)
	return b.Backend.ReadAt(ctx, p, v, buf, off)
}

type manifestMount struct {
	dir     string
	fsys    *fusefs.FS
	backend *countingBackend
	logs    *testenv.SyncBuffer
}

// mountManifest indexes the posix directory src, then mounts it from the
// manifest through a counting backend.
func mountManifest(t *testing.T, src string, capacity int64) *manifestMount {
	t.Helper()
	testenv.RequireFUSE(t)
	raw := openDir(t, src)
	man, _, err := manifest.Index(context.Background(), raw, manifest.IndexOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	return mountCounting(t, raw, man, capacity)
}

// mountCounting mounts raw (closed in t.Cleanup) through a counting
// backend, from man when not nil.
func mountCounting(t *testing.T, raw backend.Backend, man *manifest.Manifest, capacity int64) *manifestMount {
	t.Helper()
	return mountCountingOpts(t, raw, fusefs.Options{Manifest: man}, capacity)
}

func mountCountingOpts(t *testing.T, raw backend.Backend, opts fusefs.Options, capacity int64) *manifestMount {
	t.Helper()
	b := &countingBackend{Backend: raw}
	logs := &testenv.SyncBuffer{}
	opts.Backend = b
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	mnt, _, fsys := mountFS(t, opts, capacity, raw)
	return &manifestMount{dir: mnt, fsys: fsys, backend: b, logs: logs}
}

// walkTree returns every path under root with its type and size, in walk order.
func walkTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".epochfs" {
			return filepath.SkipDir
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		size := info.Size()
		if info.IsDir() {
			size = 0
		}
		out = append(out, fmt.Sprintf("%s %v %d", rel, info.Mode().Type(), size))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestManifestMountNoListOrStat: with a manifest, walking, stat'ing and
// listing every directory and file sends no List or Stat to the backend;
// reading does only ReadAt, and the bytes match.
func TestManifestMountNoListOrStat(t *testing.T) {
	src, files, want := genDataset(t, 300)
	mustWrite(t, filepath.Join(src, "a", "y y ü.bin"), []byte("unicode"))
	if err := os.MkdirAll(filepath.Join(src, "empty", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountManifest(t, src, 1<<30)

	if got, exp := walkTree(t, m.dir), walkTree(t, src); !slices.Equal(got, exp) {
		t.Fatalf("walk through the mount differs from the source:\n got %q\nwant %q", got, exp)
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(m.dir, f.Path))
		if err != nil || st.Size() != f.Size || st.Mode().Perm() != 0o444 {
			t.Fatalf("stat %s: %v %v", f.Path, st, err)
		}
	}
	if _, err := os.Stat(filepath.Join(m.dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of a missing name: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.dir, files[0].Path, "under-a-file")); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("stat under a file: %v, want ENOTDIR", err)
	}
	if n := m.backend.lists.Load() + m.backend.stats.Load() + m.backend.reads.Load(); n != 0 {
		t.Fatalf("metadata walk sent %d List, %d Stat, %d ReadAt calls to the backend, want none",
			m.backend.lists.Load(), m.backend.stats.Load(), m.backend.reads.Load())
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(m.dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(b) != want[f.Path] {
			t.Fatalf("%s: wrong bytes", f.Path)
		}
	}
	if got, err := os.ReadFile(filepath.Join(m.dir, "a", "y y ü.bin")); err != nil || string(got) != "unicode" {
		t.Errorf("unicode name: %q %v", got, err)
	}
	if l, s, r := m.backend.lists.Load(), m.backend.stats.Load(), m.backend.reads.Load(); l+s != 0 || r < int64(len(files)) {
		t.Errorf("after reading: %d List, %d Stat, %d ReadAt; want 0, 0, ≥ %d", l, s, r, len(files))
	}
	// Inode numbers are stable across mounts of the same manifest.
	m2 := mountManifest(t, src, 1<<20)
	for _, p := range []string{".", "a", files[5].Path, "empty/deeper"} {
		if a, b := ino(t, filepath.Join(m.dir, p)), ino(t, filepath.Join(m2.dir, p)); a != b {
			t.Errorf("%s: inode %d in one mount, %d in another", p, a, b)
		}
	}
	if err := os.Mkdir(filepath.Join(m.dir, "new"), 0o755); !errors.Is(err, syscall.EROFS) {
		t.Errorf("mkdir: %v, want EROFS", err)
	}
	if err := openClose(filepath.Join(m.dir, files[0].Path), os.O_WRONLY); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing: %v, want EROFS", err)
	}
}

// TestManifestDriftIsEIO: files that changed or vanished since the manifest
// was built read as EIO with a log line naming them; the others still read.
func TestManifestDriftIsEIO(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"changed", "gone", "same", "big"} {
		mustWrite(t, filepath.Join(src, "d", n), []byte("version one of "+n))
	}
	big := bytes.Repeat([]byte("0123456789"), 200_000)
	mustWrite(t, filepath.Join(src, "d", "big"), big)
	m := mountManifest(t, src, 1<<30)

	mustWrite(t, filepath.Join(src, "d", "changed"), []byte("version two, longer"))
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(src, "d", "changed"), future, future); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, "d", "gone")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"changed", "gone"} {
		_, err := os.ReadFile(filepath.Join(m.dir, "d", n))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("read of %s: %v, want EIO", n, err)
		}
		if logs := m.logs.String(); !strings.Contains(logs, "path=d/"+n) {
			t.Errorf("no log line names d/%s:\n%s", n, logs)
		}
	}
	if got, err := os.ReadFile(filepath.Join(m.dir, "d", "same")); err != nil || string(got) != "version one of same" {
		t.Errorf("unchanged file: %q, %v", got, err)
	}
	f, err := os.Open(filepath.Join(m.dir, "d", "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1000)
	if _, err := f.ReadAt(buf, 1_500_000); err != nil || !bytes.Equal(buf, big[1_500_000:1_501_000]) {
		t.Errorf("block read of an unchanged file: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(m.dir, "d")); err != nil || len(ents) != 4 {
		t.Errorf("readdir still serves the manifest: %d entries, %v", len(ents), err)
	}
}

// TestListingOncePerDirectory: without a manifest, a full walk lists each
// directory exactly once (background sibling listings included), whatever
// the order the kernel asks in.
func TestListingOncePerDirectory(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	dirs := classTree(t, src, "f.bin")
	raw := openDir(t, src)
	m := mountCounting(t, raw, nil, 1<<20)
	for range 2 {
		if got, exp := walkTree(t, m.dir), walkTree(t, src); !slices.Equal(got, exp) {
			t.Fatalf("walk differs:\n got %q\nwant %q", got, exp)
		}
	}
	if n := m.backend.lists.Load(); n != int64(dirs) {
		t.Errorf("%d List calls for %d directories, want exactly one each", n, dirs)
	}
	if n := m.backend.stats.Load(); n != 0 {
		t.Errorf("%d Stat calls, want 0", n)
	}
}

// TestListingSurvivesForget: without a manifest, when the kernel forgets
// the mount's directories (here: drop_caches; in production: memory
// pressure) and looks them up again, the new nodes find the held listings:
// no directory is listed twice.
func TestListingSurvivesForget(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	dirs := classTree(t, src, "f.bin")
	m := mountCounting(t, openDir(t, src), nil, 1<<20)
	want := walkTree(t, src)
	for i := range 3 {
		if got := walkTree(t, m.dir); !slices.Equal(got, want) {
			t.Fatalf("walk %d differs:\n got %q\nwant %q", i, got, want)
		}
		unix.Sync()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			testenv.RequireOrSkip(t, "drop_caches", fmt.Sprintf("cannot make the kernel forget inodes (writing /proc/sys/vm/drop_caches needs root): %v", err))
		}
	}
	if n := m.backend.lists.Load(); n != int64(dirs) {
		t.Errorf("%d List calls for %d directories over 3 walks with the kernel's inodes dropped in between, want exactly one each", n, dirs)
	}
	// The nodes of the forgotten inodes are gone (FORGET arrives
	// asynchronously; the kernel may keep a few, e.g. the cwd's).
	deadline := time.Now().Add(10 * time.Second)
	for m.fsys.ListingStats().Nodes > 3 && time.Now().Before(deadline) {
		_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0)
		time.Sleep(50 * time.Millisecond)
	}
	if n := m.fsys.ListingStats().Nodes; n > 3 {
		t.Errorf("%d nodes still tracked after the kernel forgot the tree (%d entries walked)", n, len(want))
	}
}

// TestListingNodesTracked: a walk creates one node per name the kernel
// looked up, and no more.
func TestListingNodesTracked(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	classTree(t, src, "f.bin", "g.bin")
	m := mountCounting(t, openDir(t, src), nil, 1<<20)
	got := walkTree(t, m.dir)
	if n := m.fsys.ListingStats().Nodes; n < 2 || n > len(got)+1 {
		t.Errorf("%d nodes after a walk of %d entries, want at most one per entry plus the root", n, len(got))
	}
}

// TestListingCacheBounded: without a manifest, the listings kept stay within
// ListingCacheEntries (but for the directory being used); dropped
// directories are listed again when needed and every walk stays correct.
func TestListingCacheBounded(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	dirs := classTree(t, src, "f.bin", "g.bin")
	raw := openDir(t, src)
	const budget = 8 // entries; the root alone has 12
	m := mountCountingOpts(t, raw, fusefs.Options{ListingCacheEntries: budget, Timeout: time.Millisecond}, 1<<20)
	want := walkTree(t, src)
	for range 3 {
		if got := walkTree(t, m.dir); !slices.Equal(got, want) {
			t.Fatalf("walk differs:\n got %q\nwant %q", got, want)
		}
		st := m.fsys.ListingStats()
		if st.Entries > max(budget, 12) {
			t.Errorf("listings hold %d entries in %d dirs, budget %d (12 for the biggest directory)", st.Entries, st.Dirs, budget)
		}
	}
	st := m.fsys.ListingStats()
	if st.Evicted == 0 {
		t.Error("no listing was dropped with a budget smaller than the tree")
	}
	if n := m.backend.lists.Load(); n <= int64(dirs) {
		t.Errorf("%d List calls for %d directories over 3 walks with a tiny budget: dropped listings were not listed again?", n, dirs)
	}
	t.Logf("%d List calls for %d directories; %+v", m.backend.lists.Load(), dirs, st)
}

// classTree writes 12 class directories of 3 subdirectories each holding
// the named files under src, and returns the number of directories (the
// root included).
func classTree(t *testing.T, src string, names ...string) int {
	t.Helper()
	dirs := 1
	for i := range 12 {
		for j := range 3 {
			for k, name := range names {
				mustWrite(t, filepath.Join(src, fmt.Sprintf("c%02d", i), fmt.Sprintf("s%d", j), name), bytes.Repeat([]byte("x"), k+1))
			}
			dirs++
		}
		dirs++
	}
	return dirs
}

// openDir opens the posix backend of src (closed by the mount's cleanup).
func openDir(t *testing.T, src string) backend.Backend {
	t.Helper()
	s, err := source.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), s, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrelistingsBounded: listings fetched ahead of a walk that never comes
// stay within the listing budget plus the prelistings in flight, and a walk
// then takes them all (none left parked) and stays correct.
func TestPrelistingsBounded(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	classTree(t, src, "f.bin") // 12 class directories of 3 entries each
	const budget = 8
	m := mountCountingOpts(t, openDir(t, src), fusefs.Options{ListingCacheEntries: budget}, 1<<20)
	if _, err := os.ReadDir(m.dir); err != nil { // prelists the 12 class directories
		t.Fatal(err)
	}
	var st fusefs.ListingStats
	for last, stable := -1, 0; stable < 10; time.Sleep(20 * time.Millisecond) {
		st = m.fsys.ListingStats()
		if st.ParkedEntries == last {
			stable++
		} else {
			last, stable = st.ParkedEntries, 0
		}
	}
	if limit := budget + fusefs.DefaultPrelistWorkers*3; st.ParkedEntries > limit || st.Parked >= 12 {
		t.Fatalf("parked after listing the root: %d listings, %d entries; want at most %d entries and fewer than all 12 directories", st.Parked, st.ParkedEntries, limit)
	}
	want := walkTree(t, src)
	if got := walkTree(t, m.dir); !slices.Equal(got, want) {
		t.Fatalf("walk differs:\n got %q\nwant %q", got, want)
	}
	if st := m.fsys.ListingStats(); st.ParkedEntries != 0 {
		t.Fatalf("after a full walk: %d listings with %d entries still parked, want none", st.Parked, st.ParkedEntries)
	}
	t.Logf("parked before the walk: %d listings, %d entries", st.Parked, st.ParkedEntries)
}
