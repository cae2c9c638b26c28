package csi

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/peer"
)

// memDirectory is an in-memory peerDirectory shared by the node states of
// a test (kubepeer.Directory is tested against a real kube-apiserver).
type memDirectory struct {
	mu       sync.Mutex
	groups   map[string]map[string]peer.Peer // group → node → peer
	node     string
	shared   *memDirectory // the one holding the data; nil: this one
	onChange []func()
}

func newMemDirectory() *memDirectory { return &memDirectory{groups: map[string]map[string]peer.Peer{}} }

// as returns node's view of the shared directory.
func (d *memDirectory) as(node string) *memDirectory { return &memDirectory{node: node, shared: d} }

func (d *memDirectory) root() *memDirectory {
	if d.shared != nil {
		return d.shared
	}
	return d
}

func (d *memDirectory) Advertise(_ context.Context, group string, p peer.Peer) error {
	r := d.root()
	r.mu.Lock()
	if r.groups[group] == nil {
		r.groups[group] = map[string]peer.Peer{}
	}
	r.groups[group][d.node] = p
	fs := slices.Clone(r.onChange)
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return nil
}

func (d *memDirectory) Withdraw(_ context.Context, group string) error {
	r := d.root()
	r.mu.Lock()
	delete(r.groups[group], d.node)
	fs := slices.Clone(r.onChange)
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return nil
}

func (d *memDirectory) Peers(group string) []peer.Peer {
	r := d.root()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []peer.Peer
	for _, p := range r.groups[group] {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b peer.Peer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (d *memDirectory) OnChange(f func()) {
	r := d.root()
	r.mu.Lock()
	r.onChange = append(r.onChange, f)
	r.mu.Unlock()
}

// failLauncher records the command line and the peers file at launch, and
// fails the launch.
type failLauncher struct {
	args  []string
	peers []byte
}

var errLaunch = errors.New("test: no launch")

func (l *failLauncher) launch(args, _ []string, _ string) (int, error) {
	l.args = args
	if i := slices.Index(args, "--"+mount.FlagPeersFile); i >= 0 {
		l.peers, _ = os.ReadFile(args[i+1])
	}
	return 0, errLaunch
}

func newPeerNodeState(t *testing.T, l launcher, dir peerDirectory, withPeer bool) *nodeState {
	t.Helper()
	tmp := t.TempDir()
	tok := filepath.Join(tmp, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig{dir: filepath.Join(tmp, "state", "node"), cacheRoot: filepath.Join(tmp, "cache"), launcher: l,
		mountTimeout: 30 * time.Second, log: slog.New(slog.DiscardHandler)}
	if withPeer {
		cfg.peer = &peerConfig{host: "127.0.0.1", id: "node-a", tokenFile: tok, portLo: 7400, portHi: 7401, dir: dir}
	}
	n, err := newNodeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterScopeArgs: a cluster-scope dataset mount is advertised in its
// group, gets a peers file naming this node at its port before the mount
// process starts, and a command line with --cache-scope cluster,
// --peers-file, --peer-listen HOST:PORT, --peer-id and --peer-token-file;
// a failed start withdraws it and frees the port. A node-scope mount gets
// none of the flags.
func TestClusterScopeArgs(t *testing.T) {
	src := t.TempDir()
	dir := newMemDirectory()
	l := &failLauncher{}
	n := newPeerNodeState(t, l, dir.as("node-a"), true)
	params, err := parseParams(map[string]string{"source": src, "cacheScope": "cluster"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	key := n.datasetKey(params, nil)
	if _, err := n.acquire(key, params, nil, "vol-1"); !errors.Is(err, errLaunch) && !strings.Contains(err.Error(), errLaunch.Error()) {
		t.Fatalf("acquire = %v, want the launcher's error", err)
	}
	args := strings.Join(l.args, " ")
	for _, want := range []string{
		"--cache-scope cluster",
		"--peers-file " + n.peersPath(key),
		"--peer-listen 127.0.0.1:7400",
		"--peer-id node-a",
		"--peer-token-file " + n.cfg.peer.tokenFile,
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if got := string(l.peers); !strings.Contains(got, "\nnode-a=127.0.0.1:7400\n") {
		t.Errorf("peers file at launch %q: want this node", got)
	}
	if g := dir.groups; len(g) != 1 {
		t.Errorf("groups %v: want one", g)
	} else {
		for _, m := range g {
			if len(m) != 0 {
				t.Errorf("after the failed start the node is still advertised: %v", m)
			}
		}
	}
	if _, err := os.Stat(n.peersPath(key)); !os.IsNotExist(err) {
		t.Errorf("peers file left after the failed start: %v", err)
	}
	if p, err := n.ports.take("other", 0, 7400, 7401); err != nil || p != 7400 {
		t.Errorf("port after the failed start: %d, %v; want 7400 free again", p, err)
	}

	// Node scope: no cluster flags.
	params.CacheScope = ""
	if _, err := n.acquire(n.datasetKey(params, nil), params, nil, "vol-2"); err == nil {
		t.Fatal("acquire succeeded with a failing launcher")
	}
	for _, a := range l.args {
		if strings.HasPrefix(a, "--peer") || a == "--cache-scope" {
			t.Errorf("node-scope args %q hold %s", l.args, a)
		}
	}
}

// TestClusterScopeRefused: without --peer-listen a cluster-scope volume is
// FailedPrecondition naming the flag, before anything starts.
func TestClusterScopeRefused(t *testing.T) {
	l := &failLauncher{}
	n := newPeerNodeState(t, l, nil, false)
	params, err := parseParams(map[string]string{"source": t.TempDir(), "cacheScope": "cluster"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.acquire(n.datasetKey(params, nil), params, nil, "vol-1")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--peer-listen") || !strings.Contains(err.Error(), "cacheScope") {
		t.Fatalf("acquire = %v; want FailedPrecondition naming cacheScope and --peer-listen", err)
	}
	if l.args != nil {
		t.Error("a mount was launched")
	}
}

// TestPeerPorts: one port per dataset, the lowest free; a recorded port is
// kept; the range runs out with ResourceExhausted.
func TestPeerPorts(t *testing.T) {
	var pp peerPorts
	if p, _ := pp.take("a", 0, 10, 12); p != 10 {
		t.Errorf("a: %d", p)
	}
	if p, _ := pp.take("b", 12, 10, 12); p != 12 {
		t.Errorf("b (recorded 12): %d", p)
	}
	if p, _ := pp.take("c", 12, 10, 12); p != 11 {
		t.Errorf("c (12 taken): %d", p)
	}
	if _, err := pp.take("d", 0, 10, 12); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("d: %v, want ResourceExhausted", err)
	}
	pp.free("a")
	if p, _ := pp.take("d", 0, 10, 12); p != 10 {
		t.Errorf("d after a freed: %d", p)
	}
}

// TestPeerGroup: the group depends on the data and the credentials, and
// on the token; never on the cache size.
func TestPeerGroup(t *testing.T) {
	t1, t2 := []byte("token-one-token-one"), []byte("token-two-token-two")
	p := volumeParams{Source: "s3://b/p", CacheSize: 1}
	q := p
	q.CacheSize = 2
	c := map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}
	g := peerGroup(t1, p, c)
	if peerGroup(t1, q, c) != g {
		t.Error("cache size changes the group")
	}
	for _, o := range []string{peerGroup(t2, p, c), peerGroup(t1, p, nil), peerGroup(t1, volumeParams{Source: "s3://b/q"}, c)} {
		if o == g {
			t.Error("token, credentials or source do not change the group")
		}
	}
	if len(g) > 63 || !strings.HasPrefix(g, "g-") {
		t.Errorf("group %q", g)
	}
}

// TestCheckPeerConfig: --peer-listen takes a host only, needs the token
// file, defaults the id to the node name and the port range.
func TestCheckPeerConfig(t *testing.T) {
	c := Config{NodeID: "worker-1", PeerListen: "10.0.0.1", PeerTokenFile: "/t"}
	if err := checkPeerConfig(&c); err != nil || c.PeerID != "worker-1" || c.PeerPortRange != DefaultPeerPortRange {
		t.Errorf("defaults: %v %+v", err, c)
	}
	for _, bad := range []Config{
		{NodeID: "n", PeerListen: "10.0.0.1:7400", PeerTokenFile: "/t"},
		{NodeID: "n", PeerListen: "10.0.0.1"},
		{NodeID: "n", PeerListen: "10.0.0.1", PeerTokenFile: "/t", PeerPortRange: "9-1"},
		{NodeID: strings.Repeat("n", 64), PeerListen: "10.0.0.1", PeerTokenFile: "/t"},
	} {
		if err := checkPeerConfig(&bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if c := (Config{NodeID: "n"}); checkPeerConfig(&c) != nil {
		t.Error("no --peer-listen: must be fine (cluster scope off)")
	}
	if c := (Config{NodeID: "n", PeerListen: "fd00::1", PeerTokenFile: "/t"}); checkPeerConfig(&c) != nil {
		t.Error("an IPv6 host refused")
	}
}
