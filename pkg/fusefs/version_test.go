package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/fusefs"
)

// TestRewriteSeenAfterTimeout: without a manifest, a running mount sees a
// file rewritten at the source with the same size and its mtime put back
// (in place, and by rename) once its metadata timeout has passed: the
// listing is fetched again, the version (with ctime and inode) differs,
// and the new bytes are read instead of the cached old ones.
func TestRewriteSeenAfterTimeout(t *testing.T) {
	for _, byRename := range []bool{false, true} {
		name := map[bool]string{false: "in place", true: "by rename"}[byRename]
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			p := filepath.Join(src, "d", "f")
			mustWrite(t, p, []byte("old bytes, version one"))
			const timeout = time.Second
			m := mountDir(t, modeListing, src, 1<<20, fusefs.Options{Timeout: timeout})
			f := filepath.Join(m.dir, "d", "f")
			for range 2 {
				if got, err := os.ReadFile(f); err != nil || string(got) != "old bytes, version one" {
					t.Fatalf("first reads: %q, %v", got, err)
				}
			}
			if st := m.store.Stats(); st.Entries != 1 || st.Hits != 1 {
				t.Fatalf("the file is not cached and hit: %+v", st)
			}
			testenv.RewriteSameSize(t, p, []byte("NEW BYTES, version two"), byRename)
			time.Sleep(timeout + timeout/2)
			if got, err := os.ReadFile(f); err != nil || string(got) != "NEW BYTES, version two" {
				t.Fatalf("read after the timeout: %q, %v; want the new bytes", got, err)
			}
			if st := m.store.Stats(); st.Entries != 2 {
				t.Errorf("the new version is not its own entry: %+v", st)
			}
		})
	}
}

// TestRewriteUnderManifest: a manifest pins each file's version. A file
// rewritten with the same size and its mtime put back no longer matches
// it: uncached, it reads as EIO (never the new bytes under the manifest's
// version and checksum); cached, the mount keeps serving the bytes the
// manifest names (they were read under that version), also after the
// timeout. Rebuilding the manifest is what makes the new bytes visible
// (pkg/mount's TestRemountSeesRewrite).
func TestRewriteUnderManifest(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"cached", "uncached", "renamed"} {
		mustWrite(t, filepath.Join(src, n), []byte("old bytes of "+n))
	}
	const timeout = time.Second
	m := mountDir(t, modeManifest, src, 1<<20, fusefs.Options{Timeout: timeout})
	if got, err := os.ReadFile(filepath.Join(m.dir, "cached")); err != nil || string(got) != "old bytes of cached" {
		t.Fatalf("first read: %q, %v", got, err)
	}
	testenv.RewriteSameSize(t, filepath.Join(src, "cached"), []byte("NEW BYTES OF cached"), false)
	testenv.RewriteSameSize(t, filepath.Join(src, "uncached"), []byte("NEW BYTES OF uncached"), false)
	testenv.RewriteSameSize(t, filepath.Join(src, "renamed"), []byte("NEW BYTES OF renamed"), true)
	time.Sleep(timeout + timeout/2)
	for _, n := range []string{"uncached", "renamed"} {
		if got, err := os.ReadFile(filepath.Join(m.dir, n)); !errors.Is(err, syscall.EIO) {
			t.Errorf("read of %s, rewritten since indexed: %q, %v; want EIO", n, got, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(m.dir, "cached")); err != nil || string(got) != "old bytes of cached" {
		t.Errorf("cached file: %q, %v; want the bytes the manifest names", got, err)
	}
}
