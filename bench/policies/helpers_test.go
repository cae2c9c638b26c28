package policies

import (
	"context"
	"encoding/binary"
	"os/exec"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/cache"
)

// content fills p with the deterministic bytes of key.
func content(key cache.Key, p []byte) {
	x := xxh3.HashString(key.Dataset+"\x00"+key.Path+"\x00"+key.Version) + uint64(key.Block)
	var w [8]byte
	for i := 0; i < len(p); i += 8 {
		x += 0x9e3779b97f4a7c15
		binary.LittleEndian.PutUint64(w[:], x^(x>>31)*0xbf58476d1ce4e5b9)
		copy(p[i:], w[:])
	}
}

// load is the Loader of key's content.
func load(key cache.Key) cache.Loader {
	return func(_ context.Context, p []byte) error {
		content(key, p)
		return nil
	}
}

// openStore opens a Store on dir with the policy called name (seed 7 for
// Random), closed at cleanup.
func openStore(t testing.TB, dir, name string, capacity int64) *cache.Store {
	t.Helper()
	pol, err := New(name, capacity, 7)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cache.Open(cache.Options{Dir: dir, Capacity: capacity, Policy: pol})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fastTempDir returns a temporary directory on a fresh tmpfs when this host
// lets the test mount one (root in a privileged container), else a plain
// t.TempDir(): on a loaded VM disk each entry's create+rename costs about a
// millisecond, and the epoch tests write thousands.
func fastTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1g,mode=0700", "tmpfs", dir).Run(); err != nil {
		t.Logf("no tmpfs (%v); using %s", err, dir)
		return dir
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
