package mount_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/source"
)

// TestPeerConfig: the cluster scope's flags are checked before anything
// is opened.
func TestPeerConfig(t *testing.T) {
	base := func(p mount.PeerConfig) mount.Config {
		return mount.Config{Source: t.TempDir(), Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20, Peer: p}
	}
	peers := []peer.Peer{{ID: "a", Addr: "127.0.0.1:7070"}}
	for _, tc := range []struct {
		name string
		p    mount.PeerConfig
		ok   bool
	}{
		{"node", mount.PeerConfig{}, true},
		{"node with peers", mount.PeerConfig{Peers: peers}, false},
		{"cluster", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok", ID: "a"}, true},
		{"cluster, not listed", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7071", TokenFile: "/tok"}, true},
		{"cluster without token", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070"}, false},
		{"cluster without listen", mount.PeerConfig{Scope: "cluster", Peers: peers, TokenFile: "/tok"}, false},
		{"every interface by omission", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: ":7070", TokenFile: "/tok", ID: "a"}, false},
		{"every interface written out", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "0.0.0.0:7070", TokenFile: "/tok", ID: "a"}, true},
		{"bad id", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok", ID: "a b"}, false},
		{"unknown scope", mount.PeerConfig{Scope: "global"}, false},
		{"listed under another id", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok", ID: "b"}, false},
		{"default id, listed as a", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok"}, false},
		{"cluster with a group", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok", ID: "a", Group: "g-0123abcd"}, true},
		{"bad group", mount.PeerConfig{Scope: "cluster", Peers: peers, Listen: "127.0.0.1:7070", TokenFile: "/tok", ID: "a", Group: "g 1\n"}, false},
		{"node with a group", mount.PeerConfig{Group: "g-0123abcd"}, false},
	} {
		_, err := mount.New(base(tc.p))
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, mount.ErrInvalidConfig)) {
			t.Errorf("%s: New = %v, want ok %v (or ErrInvalidConfig)", tc.name, err, tc.ok)
		}
	}
}

// TestClusterInProcess: two cluster-scope mounts in this process (so the
// race detector sees the peer server, the client and the read path) read
// every file of a posix dataset, byte for byte; each caches only its own
// files, and the other's come through the peer.
func TestClusterInProcess(t *testing.T) {
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 150, Classes: 3, MedianSize: 8000, MinSize: 100, MaxSize: 100_000, Seed: 18})
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("in-process-peer-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	members := []peer.Peer{{ID: "x", Addr: addrs[0]}, {ID: "y", Addr: addrs[1]}}
	var ms []*mount.Mount
	mnts := []string{t.TempDir(), t.TempDir()}
	for i, id := range []string{"x", "y"} {
		ms = append(ms, mounttest.Start(t, mount.Config{Source: src, Mountpoint: mnts[i], CacheSize: 1 << 30, Manifest: mountapi.ManifestNone,
			WholeFileMax: 32 << 10, BlockSize: 8 << 10,
			Peer: mount.PeerConfig{Scope: mountapi.ScopeCluster, Peers: members, Listen: addrs[i], ID: id, TokenFile: tok}}))
	}
	want := datagen.Sums(files)
	for round := range 2 {
		for i := range ms {
			res, err := epoch.Run(context.Background(), epoch.Options{Root: mnts[i], Paths: datagen.Paths(files), Workers: 6,
				Seed: uint64(round*2 + i), Want: want})
			if err != nil || len(res.Mismatches) > 0 {
				t.Fatalf("mount %d, round %d: %v, %d wrong files", i, round, err, len(res.Mismatches))
			}
		}
	}
	var used int64
	for _, m := range ms {
		used += m.Stats().UsedBytes
	}
	if total := datagen.TotalSize(files); used != total {
		t.Errorf("the two caches hold %d bytes together, want the dataset's %d, each file once", used, total)
	}
}

// TestClusterGroups: two real cluster-scope mounts of one source in
// different peer groups (tenant A's, here the default group of a
// standalone mount, peer.DatasetGroup of the source ID; tenant B's, an
// explicit --peer-group), each listing the other as a member (a stale
// entry: B's mount took the port A's list names). A read through the
// other group's server is refused (403) and reads nothing; each mount's
// readers still get every byte (from the backend); a request with the
// server's own group key reads (200). On the code before groups, the
// shared token and the dataset alone opened either server.
func TestClusterGroups(t *testing.T) {
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 40, Classes: 2, MedianSize: 4000, MinSize: 100, MaxSize: 20_000, Seed: 22})
	tokFile := filepath.Join(t.TempDir(), "token")
	token := []byte("groups-peer-token-0123")
	if err := os.WriteFile(tokFile, token, 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	members := []peer.Peer{{ID: "x", Addr: addrs[0]}, {ID: "y", Addr: addrs[1]}}
	mnts := []string{t.TempDir(), t.TempDir()}
	var ms []*mount.Mount
	for i, g := range []string{"", "g-tenant-b"} {
		ms = append(ms, mounttest.Start(t, mount.Config{Source: src, Mountpoint: mnts[i], CacheSize: 1 << 30, Manifest: mountapi.ManifestNone,
			WholeFileMax: 32 << 10, BlockSize: 8 << 10,
			Peer: mount.PeerConfig{Scope: mountapi.ScopeCluster, Peers: members, Listen: addrs[i], ID: []string{"x", "y"}[i], TokenFile: tokFile, Group: g}}))
	}
	want := datagen.Sums(files)
	for i := range ms {
		res, err := epoch.Run(context.Background(), epoch.Options{Root: mnts[i], Paths: datagen.Paths(files), Workers: 4, Seed: uint64(i), Want: want})
		if err != nil || len(res.Mismatches) > 0 {
			t.Fatalf("mount %d: %v, %d wrong files", i, err, len(res.Mismatches))
		}
	}

	source, err := source.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), source, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.Stat(context.Background(), files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	groupA := peer.DatasetGroup(b.ID())
	get := func(addr, group string) int {
		q := url.Values{"dataset": {b.ID()}, "path": {files[0].Path}, "version": {e.Version},
			"size": {fmt.Sprint(e.Size)}, "off": {"0"}, "len": {fmt.Sprint(e.Size)}}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+peer.ReadPath+"?"+q.Encode(), nil)
		req.Header.Set(peer.HeaderGroup, group)
		req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(peer.GroupKey(token, group)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, addr, group string
		want              int
	}{
		{"A's key at B's server", addrs[1], groupA, http.StatusForbidden},
		{"B's key at A's server", addrs[0], "g-tenant-b", http.StatusForbidden},
		{"A's key at A's server", addrs[0], groupA, http.StatusOK},
		{"B's key at B's server", addrs[1], "g-tenant-b", http.StatusOK},
	} {
		if got := get(tc.addr, tc.group); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}
