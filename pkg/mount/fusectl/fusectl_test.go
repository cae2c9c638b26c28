package fusectl_test

import (
	"errors"
	"os"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/fusectl"
)

// TestAbort mounts an empty go-fuse file system and aborts its connection:
// the mount then answers ENOTCONN, as a dead server's does, and can be
// unmounted.
func TestAbort(t *testing.T) {
	testenv.RequireFUSE(t)
	if os.Geteuid() != 0 {
		testenv.RequireOrSkip(t, "root", "aborting a FUSE connection through fusectl needs root")
	}
	mnt := t.TempDir()
	srv, err := fs.Mount(mnt, &fs.Inode{}, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: os.Geteuid() == 0}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Unmount(); _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	conn, err := testenv.FUSEConn(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := fusectl.Abort(conn); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("statfs after the abort: %v, want ENOTCONN", err)
	}
	if err := fusectl.Abort(conn + 1<<20); err == nil {
		t.Fatal("aborting a connection that does not exist succeeded")
	}
}
