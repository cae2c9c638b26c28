package mount_test

import (
	"errors"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/peer"
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
	} {
		_, err := mount.New(base(tc.p))
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, mount.ErrInvalidConfig)) {
			t.Errorf("%s: New = %v, want ok %v (or ErrInvalidConfig)", tc.name, err, tc.ok)
		}
	}
}
