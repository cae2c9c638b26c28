package csi

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
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

func (d *memDirectory) Retain(_ context.Context, groups []string) (int, error) {
	r := d.root()
	r.mu.Lock()
	n := 0
	for g, m := range r.groups {
		if _, ok := m[d.node]; ok && !slices.Contains(groups, g) {
			delete(m, d.node)
			n++
		}
	}
	fs := slices.Clone(r.onChange)
	r.mu.Unlock()
	if n > 0 {
		for _, f := range fs {
			f()
		}
	}
	return n, nil
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
	if i := slices.Index(args, "--"+mountapi.FlagPeersFile); i >= 0 {
		l.peers, _ = os.ReadFile(args[i+1])
	}
	return 0, errLaunch
}

func newPeerNodeState(t *testing.T, l launcher, dir peerDirectory, withPeer bool) *nodeState {
	t.Helper()
	return newPeerNode(t, l, dir, withPeer, "node-a", 7400, 7401)
}

func newPeerNode(t *testing.T, l launcher, dir peerDirectory, withPeer bool, id string, lo, hi int) *nodeState {
	t.Helper()
	tmp := t.TempDir()
	tok := filepath.Join(tmp, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig{dir: filepath.Join(tmp, "state", "node"), cacheRoot: filepath.Join(tmp, "cache"), launcher: l,
		mountTimeout: 30 * time.Second, log: slog.New(slog.DiscardHandler)}
	if withPeer {
		cfg.peer = &peerConfig{host: "127.0.0.1", id: id, tokenFile: tok, portLo: lo, portHi: hi, dir: dir}
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
// --peers-file, --peer-listen HOST:PORT, --peer-id, --peer-token-file and
// --peer-group (the dataset's group: its peer server serves it only);
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
	tok, err := peer.ReadToken(n.cfg.peer.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--cache-scope cluster",
		"--peers-file " + n.peersPath(key),
		"--peer-listen 127.0.0.1:7400",
		"--peer-id node-a",
		"--peer-token-file " + n.cfg.peer.tokenFile,
		"--peer-group " + peerGroup(tok, params, nil),
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// The node advertises the volume's cacheSize as its capacity.
	if got := string(l.peers); !strings.Contains(got, "\nnode-a=127.0.0.1:7400;capacity=1048576\n") {
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
	rotated := map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s2"} // same key id, another secret
	for _, o := range []string{peerGroup(t2, p, c), peerGroup(t1, p, nil), peerGroup(t1, volumeParams{Source: "s3://b/q"}, c), peerGroup(t1, p, rotated)} {
		if o == g {
			t.Error("token, credentials or source do not change the group")
		}
	}
	if len(g) > 63 || !strings.HasPrefix(g, "g-") {
		t.Errorf("group %q", g)
	}
}

// TestCheckPeerConfig: --peer-listen takes a host only, needs the token
// file, the driver's namespace (its Leases) and a health interval (it renews
// them), defaults the id to the node name and the port range.
func TestCheckPeerConfig(t *testing.T) {
	ok := func(c Config) Config {
		c.Namespace, c.HealthInterval = "epochfs-system", 30*time.Second
		return c
	}
	c := ok(Config{NodeID: "worker-1", PeerListen: "10.0.0.1", PeerTokenFile: "/t"})
	if err := checkPeerConfig(&c); err != nil || c.PeerID != "worker-1" || c.PeerPortRange != DefaultPeerPortRange {
		t.Errorf("defaults: %v %+v", err, c)
	}
	for _, bad := range []Config{
		ok(Config{NodeID: "n", PeerListen: "10.0.0.1:7400", PeerTokenFile: "/t"}),
		ok(Config{NodeID: "n", PeerListen: "10.0.0.1"}),
		ok(Config{NodeID: "n", PeerListen: "10.0.0.1", PeerTokenFile: "/t", PeerPortRange: "9-1"}),
		ok(Config{NodeID: strings.Repeat("n", 64), PeerListen: "10.0.0.1", PeerTokenFile: "/t"}),
		{NodeID: "n", PeerListen: "10.0.0.1", PeerTokenFile: "/t", HealthInterval: time.Second}, // no namespace for the Leases
		{NodeID: "n", PeerListen: "10.0.0.1", PeerTokenFile: "/t", Namespace: "epochfs-system"}, // nothing renews them
	} {
		if err := checkPeerConfig(&bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if c := (Config{NodeID: "n"}); checkPeerConfig(&c) != nil {
		t.Error("no --peer-listen: must be fine (cluster scope off)")
	}
	if c := ok(Config{NodeID: "n", PeerListen: "fd00::1", PeerTokenFile: "/t"}); checkPeerConfig(&c) != nil {
		t.Error("an IPv6 host refused")
	}
}

// TestClusterScopeTwoNodes: two node states (node-a, node-b) sharing a
// directory start real cluster-scope mounts of one dataset: each one's
// peers file lists both, every file reads right through both mounts, the
// second mount starts knowing the first (its owner share file names both);
// the release of node-b's volume removes it from node-a's peers file.
func TestClusterScopeTwoNodes(t *testing.T) {
	testenv.RequireFUSE(t)
	cachefs, _ := buildBinaries(t)
	src := t.TempDir()
	files := map[string]string{}
	for i := range 20 {
		name := filepath.Join(src, "f"+strconv.Itoa(i))
		files[name] = strings.Repeat(strconv.Itoa(i), 1000+i)
		if err := os.WriteFile(name, []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := newMemDirectory()
	pa, pb := testenv.FreePort(t), testenv.FreePort(t)
	a := newPeerNode(t, localLauncher{binary: cachefs}, dir.as("node-a"), true, "node-a", pa, pa)
	b := newPeerNode(t, localLauncher{binary: cachefs}, dir.as("node-b"), true, "node-b", pb, pb)
	params, err := parseParams(map[string]string{"source": src, "cacheScope": "cluster"}, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var dss []*datasetMount
	for _, n := range []*nodeState{a, b} {
		key := n.datasetKey(params, nil)
		ds, err := n.acquire(key, params, nil, "vol-1")
		if err != nil {
			t.Fatalf("acquire: %v\n%s", err, n.logTail(key, 0))
		}
		dss = append(dss, ds)
		n := n
		t.Cleanup(func() { _ = n.release(key, "vol-1") })
	}
	const capa = ";capacity=67108864" // the volume's cacheSize, advertised
	want := "node-a=127.0.0.1:" + strconv.Itoa(pa) + capa + "\nnode-b=127.0.0.1:" + strconv.Itoa(pb) + capa + "\n"
	for i, n := range []*nodeState{a, b} {
		waitFile(t, n.peersPath(dss[i].Key), want)
	}
	if share, err := os.ReadFile(filepath.Join(dss[1].CacheDir, peer.ShareFile)); err != nil || !strings.Contains(string(share), `"node-a"`) || !strings.Contains(string(share), `"node-b"`) {
		t.Errorf("node-b's share file %s, %v: want both peers", share, err)
	}
	for _, ds := range dss {
		for name, content := range files {
			got, err := os.ReadFile(filepath.Join(ds.MountPoint, filepath.Base(name)))
			if err != nil || string(got) != content {
				t.Fatalf("%s through %s: %d bytes, %v", name, ds.MountPoint, len(got), err)
			}
		}
	}
	// A lost annotation (a re-created Node) comes back at the next health
	// check.
	if err := dir.as("node-a").Withdraw(context.Background(), dss[0].PeerGroup); err != nil {
		t.Fatal(err)
	}
	waitFile(t, b.peersPath(dss[1].Key), "node-b=127.0.0.1:"+strconv.Itoa(pb)+capa+"\n")
	a.readvertise(context.Background())
	waitFile(t, b.peersPath(dss[1].Key), want)
	if err := b.release(dss[1].Key, "vol-1"); err != nil {
		t.Fatal(err)
	}
	waitFile(t, a.peersPath(dss[0].Key), "node-a=127.0.0.1:"+strconv.Itoa(pa)+capa+"\n")
	if _, err := os.Stat(b.peersPath(dss[1].Key)); !os.IsNotExist(err) {
		t.Errorf("node-b's peers file after its release: %v", err)
	}
}

// waitFile waits until path, comments left out, is want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		var lines []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		got := strings.Join(lines, "")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q, want %q", path, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStalePeerEntries: this node's entries of groups it no longer mounts
// (a withdraw that failed, a plugin killed mid-unstage) are removed when
// the node plugin starts and at each health check; another node's entries
// of the same group, and the group of a mount still starting
// (prepareCluster before it is recorded), are kept (a failed withdraw
// used to be only logged, and its entry stayed for good).
func TestStalePeerEntries(t *testing.T) {
	ctx := context.Background()
	dir := newMemDirectory()
	old := peer.Peer{ID: "node-a", Addr: "127.0.0.1:7400"}
	other := peer.Peer{ID: "node-b", Addr: "127.0.0.2:7400"}
	if err := dir.as("node-a").Advertise(ctx, "g-old", old); err != nil {
		t.Fatal(err)
	}
	if err := dir.as("node-b").Advertise(ctx, "g-old", other); err != nil {
		t.Fatal(err)
	}
	n := newPeerNodeState(t, &failLauncher{}, dir.as("node-a"), true)
	if got := dir.Peers("g-old"); !slices.Equal(got, []peer.Peer{other}) {
		t.Fatalf("after start, g-old lists %v; want node-b only", got)
	}

	// A withdraw that failed leaves an entry: the health check removes it.
	if err := dir.as("node-a").Advertise(ctx, "g-left", old); err != nil {
		t.Fatal(err)
	}
	// A dataset being started keeps its group.
	params, err := parseParams(map[string]string{"source": t.TempDir(), "cacheScope": "cluster"}, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	ds := &datasetMount{Key: "k-starting", Params: params}
	if err := n.prepareCluster(ds, nil); err != nil {
		t.Fatal(err)
	}
	if err := dir.as("node-a").Advertise(ctx, ds.PeerGroup, n.self(ds)); err != nil {
		t.Fatal(err)
	}
	n.readvertise(ctx)
	if got := dir.Peers("g-left"); len(got) != 0 {
		t.Errorf("after a health check, g-left lists %v; want nobody", got)
	}
	if got := dir.Peers(ds.PeerGroup); len(got) != 1 {
		t.Errorf("the group of a dataset being started lists %v; want this node", got)
	}
	n.leaveCluster(ds)
	if got := dir.Peers(ds.PeerGroup); len(got) != 0 {
		t.Errorf("after leaving, %v", got)
	}
}
