package peer

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestFileMembership: a peers file is read at open, a rewrite replaces the
// list within a poll, and a broken rewrite keeps the last good list.
func TestFileMembership(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers")
	a := []Peer{{ID: "node-a", Addr: "10.0.0.1:7400"}, {ID: "node-b", Addr: "10.0.0.2:7401"}}
	if err := WritePeersFile(path, a); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := OpenFile(ctx, filepath.Join(t.TempDir(), "missing"), time.Millisecond); err == nil {
		t.Fatal("a missing peers file opened")
	}
	f, err := OpenFile(ctx, path, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Peers(); !reflect.DeepEqual(got, a) {
		t.Fatalf("peers %v, want %v", got, a)
	}
	b := []Peer{{ID: "node-a", Addr: "10.0.0.1:7400"}}
	if err := WritePeersFile(path, b); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, f, b)
	if err := writeFile(path, "node-a=nohostport\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if got := f.Peers(); !reflect.DeepEqual(got, b) {
		t.Fatalf("after a malformed rewrite: peers %v, want the last good %v", got, b)
	}
	if err := writeFile(path, "# c\nnode-b=10.0.0.2:7401\n\nnode-a=10.0.0.1:7400\n"); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, f, a)
	if s := FormatPeers(a); s != "node-a=10.0.0.1:7400,node-b=10.0.0.2:7401" {
		t.Errorf("FormatPeers = %q", s)
	}
}

func waitPeers(t *testing.T, m Membership, want []Peer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !reflect.DeepEqual(m.Peers(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("peers %v, want %v", m.Peers(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
