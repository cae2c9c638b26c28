package mount_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/fusectl"
)

// dirGate holds the opens of one directory of an inner FUSE file system
// until release is closed; entered gets a value at each open held.
type dirGate struct {
	name    string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// open releases the opens held and lets every later one through.
func (g *dirGate) open() { g.once.Do(func() { close(g.release) }) }

// gatedNode is a loopback node whose OPENDIR of the gate's directory
// waits for the gate (not for an interrupt: the kernel sends one when
// the caller is killed, and the test wants the request held through it).
type gatedNode struct {
	*fs.LoopbackNode
	g *dirGate
}

var _ = (fs.NodeOpendirHandler)((*gatedNode)(nil))

func (n *gatedNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if filepath.Base(n.Path(nil)) == n.g.name {
		select {
		case n.g.entered <- struct{}{}:
		default:
		}
		select {
		case <-n.g.release:
		case <-time.After(2 * time.Minute): // never hang the test binary
		}
	}
	return n.LoopbackNode.OpendirHandle(ctx, flags)
}

func (n *gatedNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &gatedNode{LoopbackNode: ops.(*fs.LoopbackNode), g: n.g}
}

// serveGated mounts a loopback of dir, in this process, whose directory
// named g.name opens only once the gate is released; it returns the mount
// point (unmounted at cleanup, after the gate is released).
func serveGated(t *testing.T, dir string, g *dirGate) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	lr := &fs.LoopbackRoot{Path: dir, Dev: st.Dev}
	root := &gatedNode{LoopbackNode: &fs.LoopbackNode{RootData: lr}, g: g}
	lr.RootNode = root
	mnt := t.TempDir()
	server, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "gated"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		if err := server.Unmount(); err != nil {
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

// TestRecoverMidReaddir: the mount process (a listing mount) is killed
// (-9) while a reader's READDIR is inside it, blocked on the source: the
// source is a directory of an inner FUSE file system this test serves,
// whose OPENDIR of that directory the test holds. The kernel waits out a
// request the inner file system has read, so the killed process ends
// only once the test releases it (after the kill); the recovered process
// gets the READDIR again (FUSE_NOTIFY_RESEND), lists the directory
// itself and answers: the reader's readdir returns every name, no error,
// and the files read right.
func TestRecoverMidReaddir(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src := t.TempDir()
	var want []string
	var files []datagen.File
	for i := range 20 {
		f := datagen.File{Path: fmt.Sprintf("blocked/f%02d.bin", i), Size: int64(10<<10 + i*1000), Seed: uint64(100 + i)}
		files = append(files, f)
		want = append(want, filepath.Base(f.Path))
	}
	if err := os.MkdirAll(filepath.Join(src, "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(src, f.Path), datagen.Content(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &dirGate{name: "blocked", entered: make(chan struct{}, 1), release: make(chan struct{})}
	inner := serveGated(t, src, g) // cleaned up after the supervisor (registered first)

	opts := listingSupervisedOpts(t, inner)
	sup := startSupervisor(t, bin, opts)
	t.Cleanup(g.open) // first: a held mount process cannot end
	waitHeld(t, opts.CacheDir, sup)
	var st unix.Stat_t
	if err := unix.Stat(opts.Mountpoint, &st); err != nil {
		t.Fatal(err)
	}
	if err := fusectl.Ensure(); err != nil {
		t.Fatal(err)
	}
	waiting := filepath.Join(fusectl.Dir, strconv.Itoa(int(unix.Minor(st.Dev))), "waiting")

	type result struct {
		names []string
		err   error
	}
	got := make(chan result, 1)
	go func() {
		des, err := os.ReadDir(filepath.Join(opts.Mountpoint, "blocked"))
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		got <- result{names, err}
	}()
	select {
	case <-g.entered: // the mount's listing of blocked/ is held at the source
	case r := <-got:
		t.Fatalf("the readdir returned (%v) with its source held", r.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the mount never listed blocked/ at the source:\n%s", sup.Tail(8000))
	}
	// With fusectl mounted, the connection says a request is in the
	// mount process (the gate already says its listing is).
	if b, err := os.ReadFile(waiting); err != nil {
		t.Fatal(err)
	} else if strings.TrimSpace(string(b)) == "0" {
		t.Fatal("no request waiting on the mount's connection: the READDIR is not in the mount process")
	}
	pid := childPid(t, sup)
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // killed, its READDIR still in it
	select {
	case r := <-got:
		t.Fatalf("the readdir returned (%v) before the source was released", r.err)
	default:
	}
	g.open()
	waitLog(t, sup, "supervise: the mount process died")
	waitCount(t, sup, `msg="supervise: recovered"`, 1)
	var r result
	select {
	case r = <-got:
	case <-time.After(60 * time.Second):
		t.Fatalf("the readdir did not return after the recovery:\n%s", sup.Tail(8000))
	}
	if r.err != nil || !slices.Equal(r.names, want) {
		t.Fatalf("the readdir the dead process was serving: %v, names %v; want %v\n%s", r.err, r.names, want, sup.Tail(8000))
	}
	for _, f := range files {
		if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
			t.Fatalf("after the recovery: %v", err)
		}
	}
	t.Logf("a readdir of %d names killed mid-READDIR, its listing held at the source: answered by the recovered process %v after the kill",
		len(r.names), time.Since(start).Round(time.Millisecond))
}
