package handover

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// kernelInit is an INIT request as a 6.x kernel sends it.
func kernelInit() []byte {
	in := fuse.InitIn{Major: 7, Minor: 44, MaxReadAhead: 128 << 10,
		Flags: uint32(fuse.CAP_ASYNC_READ | fuse.CAP_READDIRPLUS | fuse.CAP_PARALLEL_DIROPS | fuse.CAP_MAX_PAGES), Flags2: uint32(fuse.CAP_PASSTHROUGH >> 32)}
	in.Length = uint32(unsafe.Sizeof(in))
	in.Opcode = opInit
	in.Unique = 2
	return InitRequest(&in)
}

func TestReplayInit(t *testing.T) {
	opts := &fuse.MountOptions{MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, MaxBackground: 64}
	a, err := ReplayInit(opts, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReplayInit(opts, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("two replays of one INIT with one configuration differ: %x, %x", a, b)
	}
	var out fuse.InitOut
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out)), unsafe.Sizeof(out)), a)
	if out.MaxWrite != 1<<20 || out.Flags2&uint32(fuse.CAP_PASSTHROUGH>>32) == 0 {
		t.Fatalf("replayed InitOut: MaxWrite %d, flags2 %#x: want 1 MiB and passthrough", out.MaxWrite, out.Flags2)
	}
	other, err := ReplayInit(&fuse.MountOptions{MaxWrite: 128 << 10, MaxBackground: 64}, kernelInit())
	if err != nil {
		t.Fatal(err)
	}
	if string(other) == string(a) {
		t.Fatal("another MaxWrite negotiates the same InitOut: a mismatch would go unnoticed")
	}
	notInit := kernelInit()
	notInit[4] = 3 // GETATTR
	if _, err := ReplayInit(opts, notInit); !errors.Is(err, ErrInit) {
		t.Fatalf("replay of a GETATTR: %v, want ErrInit", err)
	}
}

// TestProtocol plays both sides in one process: a refused handover thaws
// the running side, an accepted one passes the descriptor and the state,
// and Accept returns once the running side's socket is gone.
func TestProtocol(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handover.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v, want 0600", fi.Mode(), err)
	}
	pr, pw, err := os.Pipe() // stands for /dev/fuse: any descriptor passes
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	want := State{Version: "v1", Init: kernelInit(), InitOut: []byte{1, 2}, Mountpoint: "/mnt", FS: json.RawMessage(`{"dataset":"d"}`)}
	var freezes, thaws atomic.Int32
	served := make(chan error, 1)
	go func() {
		served <- l.Serve(Offer{
			Freeze: func() (State, int, error) { freezes.Add(1); return want, int(pr.Fd()), nil },
			Thaw:   func() { thaws.Add(1) },
		}, t.Logf)
	}()

	ctx := context.Background()
	first, err := Take(ctx, path, "v2")
	if err != nil {
		t.Fatal(err)
	}
	first.Refuse("not today")
	second, err := Take(ctx, path, "v2")
	if err != nil {
		t.Fatal(err)
	}
	if freezes.Load() != 2 || thaws.Load() != 1 {
		t.Fatalf("after a refusal and a second offer: %d freezes, %d thaws; want 2 and 1", freezes.Load(), thaws.Load())
	}
	got, _ := json.Marshal(second.State)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Fatalf("state received %s, want %s", got, wantJSON)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(second.Fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(pr.Fd()), &b); err != nil || a.Ino != b.Ino {
		t.Fatalf("descriptor received is inode %d, want the pipe's %d (%v)", a.Ino, b.Ino, err)
	}
	defer unix.Close(second.Fd)
	accepted := make(chan error, 1)
	go func() { accepted <- second.Accept(ctx) }()
	if err := <-served; err != nil {
		t.Fatalf("Serve after an accepted handover: %v", err)
	}
	select {
	case err := <-accepted:
		t.Fatalf("Accept returned (%v) while the running side still holds its socket", err)
	default:
	}
	l.Release() // what the running process's exit does
	if err := <-accepted; err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if thaws.Load() != 1 {
		t.Fatalf("an accepted handover thawed the running side")
	}
}

func TestTakeRefusesHugeState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handover.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		_, _ = c.Read(buf)                  // hello
		n := []byte{0, 0, 0, 1, 0, 0, 0, 0} // 4 GiB
		_, _, _ = c.WriteMsgUnix(n, unix.UnixRights(0), nil)
	}()
	if _, err := Take(context.Background(), path, "v2"); !errors.Is(err, ErrRefused) {
		t.Fatalf("a 4 GiB state: %v, want ErrRefused", err)
	}
}
