package epoch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var files = map[string][]byte{"a/1": []byte("one"), "a/2": []byte("two"), "b/3": bytes.Repeat([]byte("3"), 300<<10)}

func paths() []string {
	var ps []string
	for p := range files {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// TestRunOpen reads through Options.Open, the way a benchmark GETs objects:
// every path once, bytes counted, a wrong sum recorded.
func TestRunOpen(t *testing.T) {
	want := map[string][sha256.Size]byte{}
	for p, b := range files {
		want[p] = sha256.Sum256(b)
	}
	want["b/3"] = [sha256.Size]byte{} // a mismatch
	var opened []string
	res, err := Run(context.Background(), Options{Paths: paths(), Workers: 1, Seed: 4, Want: want,
		Open: func(_ context.Context, p string) (io.ReadCloser, error) {
			opened = append(opened, p)
			return io.NopCloser(bytes.NewReader(files[p])), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 3 || res.Bytes != 3+3+300<<10 || !slices.Equal(res.Mismatches, []string{"b/3"}) {
		t.Fatalf("Run = %+v, want 3 files, %d bytes, mismatch b/3", res, 3+3+300<<10)
	}
	if !slices.Equal(opened, Shuffled(paths(), 4)) {
		t.Fatalf("opened %v, want the shuffled order %v", opened, Shuffled(paths(), 4))
	}
}

// TestRunRoot reads files under Root, and stops at the first read error.
func TestRunRoot(t *testing.T) {
	root := t.TempDir()
	for p, b := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Run(context.Background(), Options{Root: root, Paths: paths(), Seed: 1})
	if err != nil || res.Files != 3 || len(res.Mismatches) != 0 {
		t.Fatalf("Run = %+v, %v; want 3 files", res, err)
	}
	if _, err := Run(context.Background(), Options{Root: root, Paths: append(paths(), "missing")}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Run with a missing file: %v, want not-exist", err)
	}
}
