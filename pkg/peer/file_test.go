package peer

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// reloads records a File's reload attempts (openFile's onReload) and lets
// a test wait for one that satisfies a condition.
type reloads struct {
	mu   sync.Mutex
	errs []error
	kick chan struct{} // one pending wake-up; a waiter re-checks after each
}

func newReloads() *reloads { return &reloads{kick: make(chan struct{}, 1)} }

func (r *reloads) record(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// await waits for cond, re-checking after each reload. The timeout only
// bounds a failing test: with an hour-long poll, nothing but the watch
// makes the File reload within it.
func (r *reloads) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-r.kick:
		case <-timeout:
			t.Fatalf("no reload brought %s", what)
		}
	}
}

func (r *reloads) sawError(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if err != nil && strings.Contains(err.Error(), substr) {
			return true
		}
	}
	return false
}

func hasPeers(f *File, want []Peer) func() bool {
	return func() bool { return reflect.DeepEqual(f.Peers(), want) }
}

// TestFileMembership: a peers file is read at open; each rewrite (a rename
// over it as WritePeersFile does, an in-place write, a remove and create)
// is reloaded by the directory watch, without waiting for the poll (an
// hour here); a broken rewrite keeps the last good list; another file of
// the directory changes nothing.
func TestFileMembership(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ds.peers")
	a := []Peer{{ID: "node-a", Addr: "10.0.0.1:7400"}, {ID: "node-b", Addr: "10.0.0.2:7401"}}
	b := []Peer{{ID: "node-a", Addr: "10.0.0.1:7400"}}
	c := []Peer{{ID: "node-c", Addr: "10.0.0.3:7402"}}
	if err := WritePeersFile(path, a); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("peers file: %v, %v; want mode 0644", st, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := OpenFile(ctx, filepath.Join(dir, "missing"), time.Hour); err == nil {
		t.Fatal("a missing peers file opened")
	}
	r := newReloads()
	f, err := openFile(ctx, path, time.Hour, r.record)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Peers(); !reflect.DeepEqual(got, a) {
		t.Fatalf("peers %v, want %v", got, a)
	}

	if err := WritePeersFile(path, b); err != nil {
		t.Fatal(err)
	}
	r.await(t, "the renamed-over list", hasPeers(f, b))

	if err := writeFile(filepath.Join(dir, "other.peers"), "node-z=10.0.0.9:7409\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, "node-a=nohostport\n"); err != nil {
		t.Fatal(err)
	}
	r.await(t, "a refusal of the malformed rewrite", func() bool { return r.sawError("nohostport") })
	if got := f.Peers(); !reflect.DeepEqual(got, b) {
		t.Fatalf("after a malformed rewrite: peers %v, want the last good %v", got, b)
	}

	if err := writeFile(path, "# c\nnode-b=10.0.0.2:7401\n\nnode-a=10.0.0.1:7400\n"); err != nil {
		t.Fatal(err)
	}
	r.await(t, "the list written in place", hasPeers(f, a))

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := WritePeersFile(path, c); err != nil {
		t.Fatal(err)
	}
	r.await(t, "the list of a recreated file", hasPeers(f, c))

	if s := FormatPeers(a); s != "node-a=10.0.0.1:7400,node-b=10.0.0.2:7401" {
		t.Errorf("FormatPeers = %q", s)
	}
}

// TestFileDirectoryReplaced: when the watched directory goes away, the File
// polls; once the directory and file are back, it reads the new list.
func TestFileDirectoryReplaced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "peers")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ds.peers")
	a := []Peer{{ID: "node-a", Addr: "10.0.0.1:7400"}}
	b := []Peer{{ID: "node-b", Addr: "10.0.0.2:7401"}}
	c := []Peer{{ID: "node-c", Addr: "10.0.0.3:7402"}}
	if err := WritePeersFile(path, a); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newReloads()
	f, err := openFile(ctx, path, 10*time.Millisecond, r.record)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	r.await(t, "a failed read of the removed file", func() bool { return r.sawError("no such file") })
	if got := f.Peers(); !reflect.DeepEqual(got, a) {
		t.Fatalf("with the directory gone: peers %v, want the last good %v", got, a)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := WritePeersFile(path, b); err != nil {
		t.Fatal(err)
	}
	r.await(t, "the list in the recreated directory", hasPeers(f, b))
	if err := WritePeersFile(path, c); err != nil {
		t.Fatal(err)
	}
	r.await(t, "a rewrite after the directory came back", hasPeers(f, c))
}
