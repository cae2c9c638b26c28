package mount_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/nfs"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/mount"
)

// hangBackend's reads of path block until their context ends, after
// saying so on entered (once).
type hangBackend struct {
	backend.Backend
	path    string
	entered chan struct{}
	once    *sync.Once
}

func (h hangBackend) ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error) {
	if path != h.path {
		return h.Backend.ReadAt(ctx, path, version, p, off)
	}
	h.once.Do(func() { close(h.entered) })
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestUnmountWithHungBackendRead: a reader is stuck in a read whose
// backend fetch never returns (a wedged server; --read-timeout is an hour
// here). Unmount must not wait for the fetch: after its grace period it
// cancels the fetch, the reader gets an error, and the mount is gone.
func TestUnmountWithHungBackendRead(t *testing.T) {
	testenv.RequireFUSE(t)
	mount.SetUnmountTimers(t, 300*time.Millisecond, 30*time.Second)
	src, files := testenv.WriteDataset(t, ctlSpec)
	h := hangBackend{path: files[0].Path, entered: make(chan struct{}), once: new(sync.Once)}
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		ReadTimeout: time.Hour, ReadaheadFiles: 0}
	mount.WrapBackend(&cfg, func(b backend.Backend) backend.Backend { h.Backend = b; return h })
	_, unmount := unmountable(t, cfg)
	readErr := make(chan error, 1)
	go func() {
		_, err := os.ReadFile(filepath.Join(cfg.Mountpoint, filepath.FromSlash(files[0].Path)))
		readErr <- err
	}()
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the read never reached the backend")
	}
	unmounted := make(chan struct{})
	start := time.Now()
	go func() { unmount(); close(unmounted) }() // unmountable's unmount reports an error
	select {
	case <-unmounted:
		t.Logf("unmounted in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("Unmount still waits for the hung backend fetch after 20s")
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Error("the stuck read succeeded, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Error("the stuck reader never returned")
	}
	if ok, err := testenv.Mounted(cfg.Mountpoint); err != nil || ok {
		t.Errorf("still mounted after Unmount: %v %v", ok, err)
	}
}

// TestUnmountWhileGaneshaRuns: NFS-Ganesha's test server runs in a mount
// namespace of its own, made while this mount exists. That namespace must
// not keep a copy of the FUSE mount: a copy keeps the FUSE connection
// alive after the unmount here, and the mount's serve loops (so Unmount,
// so `cachefs mount`'s exit after SIGTERM) then wait for as long as the
// server runs. (Seen in CI: "cachefs mount did not exit within 20s of
// SIGTERM" whenever another package's Ganesha started during a mount.)
func TestUnmountWhileGaneshaRuns(t *testing.T) {
	testenv.RequireFUSE(t)
	src, _ := testenv.WriteDataset(t, ctlSpec)
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30}
	_, unmount := unmountable(t, cfg)
	g := nfs.StartGanesha(t, t.TempDir())
	pid, err := os.ReadFile(filepath.Join(g.State, "ganesha.pid"))
	if err != nil {
		t.Fatal(err)
	}
	table, err := os.Open("/proc/" + strings.TrimSpace(string(pid)) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	copies, err := mountinfo.GetMountsFromReader(table, mountinfo.SingleEntryFilter(cfg.Mountpoint))
	table.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 0 {
		t.Errorf("ganesha's mount namespace holds a copy of the FUSE mount %s", cfg.Mountpoint)
	}
	done := make(chan struct{})
	go func() { unmount(); close(done) }() // unmountable's unmount reports an error
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Unmount still waits 20s later: another mount namespace keeps the FUSE connection alive")
	}
}
