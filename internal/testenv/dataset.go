package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
)

// WriteDataset generates spec's dataset in a temporary directory of t and
// returns the directory and the files.
func WriteDataset(t testing.TB, spec datagen.Spec) (dir string, files []datagen.File) {
	t.Helper()
	dir = t.TempDir()
	files, err := datagen.Write(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	return dir, files
}

// RewriteSameSize replaces the bytes of the file at p by data (of the same
// size) and puts its mtime back, as touch -r, rsync -t or tar x do: in
// place (same inode), or by renaming a new file over it. It first lets the
// kernel's coarse clock tick (kernels before 6.13 stamp the ctime with it),
// as it has in real life between a read and a rewrite, and checks that size
// and mtime are what they were.
func RewriteSameSize(t testing.TB, p string, data []byte, byRename bool) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(data)) {
		t.Fatalf("rewrite of %s: %d bytes, want the same size %d", p, len(data), fi.Size())
	}
	time.Sleep(20 * time.Millisecond)
	target := p
	if byRename {
		target = filepath.Join(filepath.Dir(p), ".new-"+filepath.Base(p))
	}
	if err := os.WriteFile(target, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(target, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if byRename {
		if err := os.Rename(target, p); err != nil {
			t.Fatal(err)
		}
	}
	if after, err := os.Stat(p); err != nil || !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() {
		t.Fatalf("rewrite of %s did not keep size and mtime: %v, %v", p, after, err)
	}
}
