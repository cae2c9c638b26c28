package posix_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// posixDirs remembers the directory behind each posix Backend a test made.
var posixDirs sync.Map // backend.Backend → string

func openPosix(t *testing.T, dir string) backend.Backend {
	t.Helper()
	src, err := source.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return b
}

func makePosix(t *testing.T, files map[string][]byte) backend.Backend {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, files)
	b := openPosix(t, dir)
	posixDirs.Store(b, dir)
	return b
}

func modifyPosix(t *testing.T, b backend.Backend, p string, data []byte) {
	dir, ok := posixDirs.Load(b)
	if !ok {
		t.Fatal("unknown posix backend")
	}
	full := filepath.Join(dir.(string), filepath.FromSlash(p))
	if err := os.WriteFile(full, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Make sure the mtime moves even on coarse-grained file systems.
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(full, later, later); err != nil {
		t.Fatal(err)
	}
}

func TestPosixConformance(t *testing.T) {
	backendtest.Run(t, makePosix, backendtest.WithModify(modifyPosix))
}

func TestPosixSymlinksStayInRoot(t *testing.T) {
	outside := t.TempDir()
	backendtest.WriteFiles(t, outside, map[string][]byte{"secret": []byte("do not serve")})
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"real/f": []byte("inside"), "bad\\name": nil})
	for name, target := range map[string]string{
		"link-file":    "real/f",
		"link-dir":     "real",
		"escape-abs":   filepath.Join(outside, "secret"),
		"escape-rel":   "../" + filepath.Base(outside) + "/secret",
		"escape-dir":   outside,
		"dangling":     "real/missing",
		"real/up-link": "../real/f",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ctl\x01char"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := openPosix(t, dir)
	defer b.Close()
	ctx := context.Background()

	es, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
	}
	if want := []string{"bad\\name", "link-dir", "link-file", "real"}; !slices.Equal(names, want) {
		t.Errorf("List = %q, want %q", names, want)
	}
	// escape-abs, escape-rel, escape-dir, dangling and the control character.
	if got := backend.Skipped(b); got != 5 {
		t.Errorf("Skipped = %d, want 5", got)
	}
	if e, err := b.Stat(ctx, "link-file"); err != nil || e.IsDir || e.Size != 6 {
		t.Errorf("Stat(link-file) = %+v, %v", e, err)
	}
	if e, err := b.Stat(ctx, "link-dir"); err != nil || !e.IsDir {
		t.Errorf("Stat(link-dir) = %+v, %v", e, err)
	}
	buf := make([]byte, 6)
	if n, err := b.ReadAt(ctx, "link-dir/up-link", "", buf, 0); n != 6 || string(buf) != "inside" {
		t.Errorf("ReadAt(link-dir/up-link) = %d, %v", n, err)
	}
	for _, p := range []string{"escape-abs", "escape-rel", "escape-dir/secret", "dangling"} {
		if _, err := b.Stat(ctx, p); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("Stat(%q) = %v, want ErrNotExist", p, err)
		}
		if n, err := b.ReadAt(ctx, p, "", make([]byte, 20), 0); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("ReadAt(%q) = %d, %v; want ErrNotExist", p, n, err)
		}
	}
}

func TestPosixOpenErrors(t *testing.T) {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"file": nil})
	for _, tc := range []struct {
		dir  string
		want error
	}{
		{filepath.Join(dir, "missing"), backend.ErrNotExist},
		{filepath.Join(dir, "file"), backend.ErrNotDir},
	} {
		_, err := all.Open(context.Background(), source.Source{Kind: source.KindPosix, Path: tc.dir}, backend.Options{})
		if !errors.Is(err, tc.want) {
			t.Errorf("Open(%s) = %v, want %v", tc.dir, err, tc.want)
		}
	}
}

func TestPosixID(t *testing.T) {
	dir := t.TempDir()
	b1, b2 := openPosix(t, dir), openPosix(t, dir+"/")
	defer b1.Close()
	defer b2.Close()
	if b1.ID() != b2.ID() || b1.ID() == "" {
		t.Errorf("IDs %q and %q: want equal and non-empty", b1.ID(), b2.ID())
	}
}

// TestPosixVersionSeesRewrites: a posix version is
// "MTIMENANOS-SIZE-CTIMENANOS-INO", so a rewrite of the same size whose
// mtime is put back (os.Chtimes, as touch -r, rsync -t and tar x do) is a
// new version, in place (the ctime moves) and by rename (the inode and the
// ctime move); reads with the old version fail with ErrChanged.
func TestPosixVersionSeesRewrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	backendtest.WriteFiles(t, dir, map[string][]byte{"f": []byte("one!")})
	b := openPosix(t, dir)
	defer b.Close()
	stat := func() (backend.Entry, syscall.Stat_t) {
		t.Helper()
		e, err := b.Stat(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return e, st
	}
	e1, st := stat()
	want := fmt.Sprintf("%d-4-%d-%d", time.Unix(st.Mtim.Unix()).UnixNano(), time.Unix(st.Ctim.Unix()).UnixNano(), st.Ino)
	if e1.Version != want {
		t.Fatalf("version %q, want %q (mtime-size-ctime-ino)", e1.Version, want)
	}
	if es, err := b.List(ctx, ""); err != nil || len(es) != 1 || es[0].Version != e1.Version {
		t.Fatalf("List = %+v, %v; want the Stat version %q", es, err, e1.Version)
	}
	mtime := e1.ModTime

	// The ctime ticks with the kernel's coarse clock on kernels before
	// 6.13 (multigrain timestamps): let it move, as it has in real life
	// between a read and a rewrite.
	time.Sleep(20 * time.Millisecond)
	rewrite := func(p string, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, old backend.Entry, data string) backend.Entry {
		t.Helper()
		e, _ := stat()
		if e.Version == old.Version || e.Size != old.Size || !e.ModTime.Equal(old.ModTime) {
			t.Fatalf("%s: version %q (size %d, mtime %v) after %q (size %d, mtime %v): want a new version, same size and mtime",
				name, e.Version, e.Size, e.ModTime, old.Version, old.Size, old.ModTime)
		}
		buf := make([]byte, 4)
		if n, err := b.ReadAt(ctx, "f", old.Version, buf, 0); !errors.Is(err, backend.ErrChanged) || n != 0 {
			t.Errorf("%s: read with the old version: %d, %v; want ErrChanged", name, n, err)
		}
		if n, err := b.ReadAt(ctx, "f", e.Version, buf, 0); err != nil || string(buf[:n]) != data {
			t.Errorf("%s: read with the new version: %q, %v", name, buf[:n], err)
		}
		return e
	}

	rewrite(p, "two!") // in place: same inode
	e2 := check("in place", e1, "two!")
	time.Sleep(20 * time.Millisecond)
	tmp := filepath.Join(dir, ".f.tmp")
	rewrite(tmp, "3ree")
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	check("by rename", e2, "3ree")
}
