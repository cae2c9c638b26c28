package csi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestMountTableEscapedPaths: mount points whose names the kernel escapes
// in mountinfo (space, tab, backslash) are found mounted, and unmounted.
func TestMountTableEscapedPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"with space", "with\ttab", `back\slash`, "plain"} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), name)
			if err := os.Mkdir(dst, 0o750); err != nil {
				t.Fatal(err)
			}
			if ok, _, err := isMounted(dst); err != nil || ok {
				t.Fatalf("before bind: isMounted = %v, %v; want false", ok, err)
			}
			if err := bindReadOnly(src, dst); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unmountAll(dst) })
			if ok, _, err := isMounted(dst); err != nil || !ok {
				t.Fatalf("after bind: isMounted = %v, %v; want true", ok, err)
			}
			if err := checkMount(dst); err != nil {
				t.Fatalf("checkMount: %v", err)
			}
			if err := os.WriteFile(filepath.Join(dst, "f"), []byte("y"), 0o600); !errors.Is(err, syscall.EROFS) {
				t.Fatalf("write through the bind = %v, want EROFS", err)
			}
			infos, err := mountsAt(dst)
			if err != nil || len(infos) != 1 {
				t.Fatalf("mounts at %q: %v, %v; want one", dst, infos, err)
			}
			opts := strings.Split(infos[0].Options, ",")
			for _, want := range []string{"ro", "nosuid", "nodev"} {
				if !slices.Contains(opts, want) {
					t.Errorf("bind options %v lack %s", opts, want)
				}
			}
			if err := unmountAll(dst); err != nil {
				t.Fatalf("unmountAll: %v", err)
			}
			if ok, _, err := isMounted(dst); err != nil || ok {
				t.Fatalf("after unmountAll: isMounted = %v, %v; want false", ok, err)
			}
			if _, err := os.Stat(filepath.Join(dst, "f")); !os.IsNotExist(err) {
				t.Fatalf("after unmountAll the source still shows through: %v", err)
			}
		})
	}
}
