package handover

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

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
	want := State{Version: "v1", Init: []byte("an INIT request"), InitOut: []byte{1, 2}, Mountpoint: "/mnt", FS: json.RawMessage(`{"dataset":"d"}`)}
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

// TestServeHeld: a holder lends its descriptor to another holder (the
// answer names the holder's pid), and refuses a takeover.
func TestServeHeld(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "held.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	held := &Held{State: State{Version: "holder", Init: []byte("init"), InitOut: []byte("out"), Mountpoint: "/mnt"}, Fd: int(w.Fd())}
	done := make(chan error, 1)
	go func() { done <- ServeHeld(l, func() (*Held, error) { return held, nil }, t.Logf) }()
	got, err := Hold(context.Background(), sock, "test")
	if err != nil {
		t.Fatal(err)
	}
	if got.Pid != os.Getpid() || got.Mountpoint != "/mnt" || string(got.InitOut) != "out" {
		t.Fatalf("held: pid %d (want %d), %+v", got.Pid, os.Getpid(), got.State)
	}
	if pid, err := ListenerPid(context.Background(), sock); err != nil || pid != os.Getpid() {
		t.Fatalf("ListenerPid: %d, %v; want %d", pid, err, os.Getpid())
	}
	// The duplicate is the same pipe: a write to it reaches r.
	if _, err := unix.Write(got.Fd, []byte("x")); err != nil {
		t.Fatal(err)
	}
	unix.Close(got.Fd)
	b := make([]byte, 1)
	if _, err := r.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("read through the lent descriptor: %q %v", b, err)
	}
	if _, err := Take(context.Background(), sock, "test"); err == nil {
		t.Fatal("a holder handed its connection over")
	}
	l.Close()
	if err := <-done; err == nil {
		t.Fatal("ServeHeld returned nil after Close")
	}
}
