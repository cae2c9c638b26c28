package main_test

// The cluster-wide cache with real processes: three `cachefs
// mount --cache-scope cluster` processes on this machine (separate cache
// directories, loopback peer ports), each with C = D/3, over MinIO behind a
// counting proxy, every mount a real FUSE mount read by real epochs.

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/source"
)

// countingProxy forwards to MinIO and counts object GETs per path and
// the bytes of their bodies.
type countingProxy struct {
	addr   string
	mu     sync.Mutex
	gets   map[string]int
	ranges map[string]int // by path#Range header
	byts   int64
}

func startCountingProxy(t *testing.T, target string) *countingProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String(), gets: map[string]int{}, ranges: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/datasets/train/") {
			rp.ServeHTTP(w, r) // listings and the like
			return
		}
		cw := &countWriter{ResponseWriter: w}
		rp.ServeHTTP(cw, r)
		p.mu.Lock()
		p.gets[r.URL.Path]++
		p.ranges[r.URL.Path+"#"+r.Header.Get("Range")]++
		p.byts += cw.n
		p.mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return p
}

type countWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// take returns the counts since the last take and resets them.
func (p *countingProxy) take() (map[string]int, int64) {
	g, _, b := p.takeRanges()
	return g, b
}

// takeRanges is take with the GETs per path and Range header too.
func (p *countingProxy) takeRanges() (gets, ranges map[string]int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gets, ranges, bytes = p.gets, p.ranges, p.byts
	p.gets, p.ranges, p.byts = map[string]int{}, map[string]int{}, 0
	return gets, ranges, bytes
}

// clusterMount is one mount process of a test.
type clusterMount struct {
	*testenv.Cachefs
	id, mnt, cacheDir, metrics, peerAddr string
}

func startClusterMount(t *testing.T, bin, src string, capacity int64, env []string, opts mountapi.CommandOptions) *clusterMount {
	t.Helper()
	return startClusterMountDir(t, t.TempDir(), bin, src, capacity, env, opts)
}

// startClusterMountDir is startClusterMount on an existing cache directory.
func startClusterMountDir(t *testing.T, cacheDir, bin, src string, capacity int64, env []string, opts mountapi.CommandOptions) *clusterMount {
	t.Helper()
	cm := &clusterMount{mnt: t.TempDir(), cacheDir: cacheDir}
	cm.metrics = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	opts.Source, opts.Mountpoint, opts.CacheDir, opts.CacheSize, opts.MetricsAddr = src, cm.mnt, cm.cacheDir, capacity, cm.metrics
	if opts.PeerMetrics == "" {
		opts.PeerMetrics = peer.MetricsPerPeer // the tests read the series of each peer
	}
	cm.Cachefs = testenv.StartCachefs(t, bin, opts, env...)
	return cm
}

func (cm *clusterMount) url() string { return "http://" + cm.metrics + "/metrics" }

// groupBearer is the bearer credential of group under token.
func groupBearer(token, group string) string {
	return hex.EncodeToString(peer.GroupKey([]byte(token), group))
}

// peerGet sends one peer-protocol request by hand, for group (the mounts'
// default, peer.DatasetGroup of the dataset, when ""), with auth as the
// bearer credential, and returns its status.
func peerGet(t *testing.T, addr, auth, group, dataset, path string) int {
	t.Helper()
	q := url.Values{"dataset": {dataset}, "path": {path}, "version": {"x"}, "size": {"10"}, "off": {"0"}, "len": {"10"}}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+peer.ReadPath+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if group == "" {
		group = peer.DatasetGroup(dataset)
	}
	req.Header.Set(peer.HeaderGroup, group)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// clusterEnv is MinIO with a dataset behind a counting proxy, a manifest
// with sha256s and a token file.
type clusterEnv struct {
	bin, src, manifest, tokenFile, token, dataset string
	files                                         []datagen.File
	total                                         int64
	env                                           []string
	proxy                                         *countingProxy
}

func newClusterEnv(t *testing.T, spec datagen.Spec) *clusterEnv {
	testenv.RequireFUSE(t)
	m := s3.StartMinIO(t)
	m.MakeBucket(t, "datasets")
	ce := &clusterEnv{files: spec.Plan()}
	m.PutFiles(t, "datasets", "train/", ce.files)
	ce.total = datagen.TotalSize(ce.files)
	ce.proxy = startCountingProxy(t, m.Endpoint)
	ce.src = "s3://datasets/train?endpoint=http://" + ce.proxy.addr + "&region=us-east-1"
	ce.env = []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	ce.bin = testenv.GoBuild(t, "./cmd/cachefs")
	ce.manifest = filepath.Join(t.TempDir(), "manifest")
	idx := exec.Command(ce.bin, "index", ce.src, "--out", ce.manifest, "--checksum")
	idx.Env = append(os.Environ(), ce.env...)
	if out, err := idx.CombinedOutput(); err != nil {
		t.Fatalf("cachefs index: %v\n%s", err, out)
	}
	ce.token = "peer-token-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ce.tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(ce.tokenFile, []byte(ce.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The dataset identity is the S3 backend's ID: bucket and prefix at
	// the endpoint's host.
	ce.dataset = "s3://" + ce.proxy.addr + "/datasets/train/"
	ce.proxy.take()
	return ce
}

// objectPath is the proxy's view of a dataset file.
func objectPath(p string) string { return "/datasets/train/" + p }

// runEpochs reads one epoch on each mount at once (every mount reads every
// file, in its own order) and fails on any reader error or wrong byte.
func runEpochs(t *testing.T, ce *clusterEnv, mounts []*clusterMount, seed uint64, during func()) {
	t.Helper()
	paths, want := datagen.Paths(ce.files), datagen.Sums(ce.files)
	var wg sync.WaitGroup
	errs := make([]error, len(mounts))
	res := make([]epoch.Result, len(mounts))
	for i, cm := range mounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = epoch.Run(context.Background(), epoch.Options{Root: cm.mnt, Paths: paths, Workers: 4,
				Seed: seed + uint64(i), Want: want})
		}()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	for i := range mounts {
		if errs[i] != nil {
			t.Fatalf("mount %s: reader error: %v", mounts[i].id, errs[i])
		}
		if len(res[i].Mismatches) > 0 {
			t.Fatalf("mount %s: %d files with wrong bytes, e.g. %s", mounts[i].id, len(res[i].Mismatches), res[i].Mismatches[0])
		}
		t.Logf("mount %s: %d files, %.0f files/s", mounts[i].id, res[i].Files, res[i].FilesPerSec())
	}
}

// The split of TestClusterScope's mounts: files above 64 KiB are read in
// 16 KiB blocks, so peers serve ranged reads too.
const (
	wholeMax  = 64 << 10
	blockSize = 16 << 10
)

func TestClusterScope(t *testing.T) {
	spec := datagen.Spec{Files: 450, Classes: 6, MedianSize: 20_000, MinSize: 1000, MaxSize: 120_000, Seed: 15}
	ce := newClusterEnv(t, spec)
	capacity := ce.total / 3
	ids := []string{"a", "b", "c"}
	ports := map[string]string{}
	var list []string
	for _, id := range ids {
		ports[id] = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		list = append(list, id+"="+ports[id])
	}
	var mounts []*clusterMount
	for _, id := range ids {
		cm := startClusterMount(t, ce.bin, ce.src, capacity, ce.env, mountapi.CommandOptions{Manifest: ce.manifest,
			CacheScope: mountapi.ScopeCluster, Peers: strings.Join(list, ","), PeerListen: ports[id], PeerID: id,
			PeerTokenFile: ce.tokenFile, WholeFileMax: wholeMax, BlockSize: blockSize})
		cm.id, cm.peerAddr = id, ports[id]
		mounts = append(mounts, cm)
	}
	// Ownership, as the mounts compute it.
	var members []peer.Peer
	for _, id := range ids {
		members = append(members, peer.Peer{ID: id, Addr: ports[id]})
	}
	owned := map[string]int64{}
	ownerOf := map[string]string{}
	for _, f := range ce.files {
		o, _ := peer.Owner(members, peer.FileKey(ce.dataset, f.Path))
		owned[o.ID] += f.Size
		ownerOf[f.Path] = o.ID
	}
	t.Logf("D = %d bytes, %d files; C = D/3 = %d; owned bytes a %d, b %d, c %d", ce.total, len(ce.files), capacity, owned["a"], owned["b"], owned["c"])

	t.Run("unauthenticated", func(t *testing.T) {
		own := peer.DatasetGroup(ce.dataset) // the mounts pass no --peer-group
		key := groupBearer(ce.token, own)
		for _, cm := range mounts {
			if got := peerGet(t, cm.peerAddr, "", "", ce.dataset, ce.files[0].Path); got != http.StatusUnauthorized {
				t.Errorf("%s: a request without a key: %d, want 401", cm.id, got)
			}
			if got := peerGet(t, cm.peerAddr, "not-the-token-at-all", "", ce.dataset, ce.files[0].Path); got != http.StatusUnauthorized {
				t.Errorf("%s: a request with another key: %d, want 401", cm.id, got)
			}
			if got := peerGet(t, cm.peerAddr, ce.token, "", ce.dataset, ce.files[0].Path); got != http.StatusUnauthorized {
				t.Errorf("%s: a request with the bare token: %d, want 401", cm.id, got)
			}
			if got := peerGet(t, cm.peerAddr, groupBearer(ce.token, "g-other-tenant"), "g-other-tenant", ce.dataset, ce.files[0].Path); got != http.StatusForbidden {
				t.Errorf("%s: another group with its key and the right token: %d, want 403", cm.id, got)
			}
			if got := peerGet(t, cm.peerAddr, key, own, "s3://elsewhere/bucket", ce.files[0].Path); got != http.StatusForbidden {
				t.Errorf("%s: another dataset: %d, want 403", cm.id, got)
			}
			if got := peerGet(t, cm.peerAddr, key, "", ce.dataset, "../../etc/passwd"); got != http.StatusBadRequest {
				t.Errorf("%s: an escaping path: %d, want 400", cm.id, got)
			}
		}
		if g, _ := ce.proxy.take(); len(g) != 0 {
			t.Errorf("refused requests reached the backend: %v", g)
		}
	})

	// Epoch 1: every mount reads every file; one backend GET per file,
	// cluster-wide, for every file its owner admitted. (With C = D/3 an
	// owner whose hash share is above D/3 cannot admit all its files: NR
	// reads those through, once per reader, at the owner.)
	runEpochs(t, ce, mounts, 100, nil)
	gets, ranges, bytes1 := ce.proxy.takeRanges()
	var notCached int64 // bytes of owned files their owner did not admit
	for _, cm := range mounts {
		s, _ := testenv.Scrape(t, cm.url())
		used := int64(s["cachefs_cache_used_bytes"])
		notCached += max(owned[cm.id]-used, 0)
		if used > owned[cm.id] {
			t.Errorf("%s caches %d bytes, more than it owns (%d): it admitted another peer's file", cm.id, used, owned[cm.id])
		}
	}
	var again int64 // bytes of cache entries (files, blocks) fetched more than once
	once, blocked := 0, 0
	for _, f := range ce.files {
		spans := cache.FileKeys("d", f.Path, "v", f.Size, wholeMax, blockSize)
		if len(spans) > 1 {
			blocked++
		}
		if gets[objectPath(f.Path)] == 0 {
			t.Errorf("epoch 1: %s never fetched from the backend", f.Path)
			continue
		}
		ok := true
		for _, sp := range spans {
			rng := fmt.Sprintf("bytes=%d-%d", sp.Offset, sp.Offset+sp.Length-1)
			if n := ranges[objectPath(f.Path)+"#"+rng]; n != 1 {
				ok = false
				if n > 1 {
					again += sp.Length
				}
			}
		}
		if ok && gets[objectPath(f.Path)] == len(spans) {
			once++
		}
	}
	t.Logf("epoch 1: %d of %d files (%d of them in blocks) had each cache entry fetched from the backend exactly once cluster-wide; %d bytes of entries fetched more than once; not admitted by their owner (full): %d bytes; backend bytes %d (D = %d)",
		once, len(ce.files), blocked, again, notCached, bytes1, ce.total)
	if again > notCached {
		t.Errorf("epoch 1: %d bytes of entries fetched more than once, more than the %d bytes no owner admitted", again, notCached)
	}
	if once < len(ce.files)*3/4 {
		t.Errorf("epoch 1: only %d of %d files fetched exactly once per entry", once, len(ce.files))
	}

	// Epoch 2: the backend serves at most what no owner admitted, once
	// per reader (N = 3), plus 1 % of D.
	runEpochs(t, ce, mounts, 200, nil)
	_, bytes2 := ce.proxy.take()
	t.Logf("epoch 2: backend bytes %d = %.2f%% of D; owned bytes no owner could admit (C = D/3): %d = %.2f%% of D",
		bytes2, 100*float64(bytes2)/float64(ce.total), notCached, 100*float64(notCached)/float64(ce.total))
	if limit := 3*notCached + ce.total/100; bytes2 > limit {
		t.Errorf("epoch 2: backend bytes %d, want ≤ %d (3 × not admitted %d + 1%% of D)", bytes2, limit, notCached)
	}
	var peerHits float64
	for _, cm := range mounts {
		s, body := testenv.Scrape(t, cm.url())
		for _, o := range ids {
			peerHits += s[fmt.Sprintf("cachefs_peer_hits_total{peer=%q}", o)]
		}
		for _, name := range []string{"cachefs_peer_served_total", "cachefs_peer_served_bytes_total", "cachefs_peer_received_bytes_total", "cachefs_peer_owned_ratio", "cachefs_peer_refused_total"} {
			if !strings.Contains(body, "\n"+name) {
				t.Errorf("%s: /metrics lacks %s", cm.id, name)
			}
		}
		if strings.Contains(body, ce.token) {
			t.Errorf("%s: the token appears in /metrics", cm.id)
		}
	}
	if peerHits == 0 {
		t.Error("no peer hits")
	}

	// cachefs stats shows the owner share.
	out, err := exec.Command(ce.bin, "stats", "--cache-dir", mounts[0].cacheDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "owner share") {
		t.Errorf("cachefs stats: %v\n%s", err, out)
	}
	t.Logf("cachefs stats of a:\n%s", out)

	// Epoch 3: c is killed mid-epoch. The others' readers see no error and
	// no wrong byte; c's files come from the backend.
	runEpochs(t, ce, mounts[:2], 300, func() {
		time.Sleep(100 * time.Millisecond) // about a third into the epoch
		mounts[2].Kill()                   // a crashed peer
	})
	gets3, bytes3 := ce.proxy.take()
	var fromC int
	for p, n := range gets3 {
		if ownerOf[strings.TrimPrefix(p, "/datasets/train/")] == "c" {
			fromC += n
		}
	}
	var fallbacks float64
	for _, cm := range mounts[:2] {
		s, _ := testenv.Scrape(t, cm.url())
		fallbacks += s[`cachefs_peer_fallbacks_total{peer="c"}`]
	}
	t.Logf("epoch 3 (c killed after 100 ms): %d files fetched from the backend, %d GETs of c's files, %d bytes; fallbacks for c %v", len(gets3), fromC, bytes3, fallbacks)
	if fallbacks == 0 || fromC == 0 {
		t.Errorf("c killed: %v fallbacks and %d backend GETs of its files, want both > 0", fallbacks, fromC)
	}

	// c returns, on its cache: ownership does not move (a static list), and
	// once a and b ask it again (after their down interval) it serves its
	// files from its recovered cache.
	c := startClusterMountDir(t, mounts[2].cacheDir, ce.bin, ce.src, capacity, ce.env, mountapi.CommandOptions{Manifest: ce.manifest,
		CacheScope: mountapi.ScopeCluster, Peers: strings.Join(list, ","), PeerListen: ports["c"], PeerID: "c",
		PeerTokenFile: ce.tokenFile, WholeFileMax: wholeMax, BlockSize: blockSize})
	c.id, c.peerAddr = "c", ports["c"]
	mounts[2] = c
	hitsC := func(cm *clusterMount) float64 {
		s, _ := testenv.Scrape(t, cm.url())
		return s[`cachefs_peer_hits_total{peer="c"}`]
	}
	h0 := []float64{hitsC(mounts[0]), hitsC(mounts[1])}
	resumed := func() bool { return hitsC(mounts[0]) > h0[0] && hitsC(mounts[1]) > h0[1] }
	deadline := time.Now().Add(70 * time.Second) // the longest down interval is 30 s
	epochs := 0
	for !resumed() && time.Now().Before(deadline) {
		runEpochs(t, ce, mounts, 400+uint64(epochs)*10, nil)
		epochs++
		time.Sleep(time.Second)
	}
	if !resumed() {
		t.Fatal("c came back but a and b did not both read from it again")
	}
	ce.proxy.take()
	runEpochs(t, ce, mounts, 500, nil)
	_, bytes5 := ce.proxy.take()
	t.Logf("c back: asked again after %d epoch(s); then an epoch of all three: backend bytes %d = %.2f%% of D", epochs, bytes5, 100*float64(bytes5)/float64(ce.total))
	if limit := 3*notCached + ce.total/100; bytes5 > limit {
		t.Errorf("c back: backend bytes %d, want ≤ %d as in epoch 2", bytes5, limit)
	}

	// The token never reaches a log.
	a := mounts[0]
	a.Terminate(20 * time.Second)
	if l := a.Out.String(); strings.Contains(l, ce.token) || !strings.Contains(l, "cluster-scope cache") {
		t.Errorf("a's log shows the token, or lacks its cluster-scope line:\n%s", l)
	}
}

// TestClusterScopeBadPeer: peers (in-process, with the right group key) that
// answer wrong bytes under a consistent checksum (liar) or another version
// (stale): a real mount never serves their bytes; their files come from the
// backend, with no reader error.
func TestClusterScopeBadPeer(t *testing.T) {
	spec := datagen.Spec{Files: 120, Classes: 3, MedianSize: 10_000, MinSize: 500, MaxSize: 50_000, Seed: 16}
	ce := newClusterEnv(t, spec)
	asked := map[string]*atomic.Int64{"liar": {}, "stale": {}}
	badPeer := func(id string) string {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(peer.HeaderGroup) != peer.DatasetGroup(ce.dataset) ||
				r.Header.Get("Authorization") != "Bearer "+groupBearer(ce.token, peer.DatasetGroup(ce.dataset)) {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			asked[id].Add(1)
			q := r.URL.Query()
			n, _ := strconv.Atoi(q.Get("len"))
			body := make([]byte, n) // zeros: wrong bytes
			version := q.Get("version")
			if id == "stale" { // the right length, another version
				version += "-other"
			}
			w.Header().Set(peer.HeaderVersion, version)
			w.Header().Set(peer.HeaderChecksum, xxh3Sum(body)) // consistent with the wrong bytes
			w.Header().Set("Content-Length", strconv.Itoa(n))
			_, _ = w.Write(body)
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	self := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	peers := "good=" + self + ",liar=" + badPeer("liar") + ",stale=" + badPeer("stale")
	cm := startClusterMount(t, ce.bin, ce.src, ce.total, ce.env, mountapi.CommandOptions{Manifest: ce.manifest,
		CacheScope: mountapi.ScopeCluster, Peers: peers, PeerListen: self, PeerID: "good",
		PeerTokenFile: ce.tokenFile, PeerTimeout: 2 * time.Second})
	cm.id = "good"
	for e := range 2 {
		runEpochs(t, ce, []*clusterMount{cm}, uint64(e)+10, nil)
		time.Sleep(1100 * time.Millisecond) // past the first down interval: asked again
	}
	s, _ := testenv.Scrape(t, cm.url())
	for id, n := range asked {
		hits, errs := s[fmt.Sprintf("cachefs_peer_hits_total{peer=%q}", id)], s[fmt.Sprintf("cachefs_peer_errors_total{peer=%q}", id)]
		fb := s[fmt.Sprintf("cachefs_peer_fallbacks_total{peer=%q}", id)]
		t.Logf("%s: asked %d times, %v errors, %v hits, %v fallbacks", id, n.Load(), errs, hits, fb)
		if n.Load() < 2 || errs != float64(n.Load()) || hits != 0 || fb == 0 {
			t.Errorf("%s: asked %d times, %v errors, %v hits, %v fallbacks; want asked at least twice, every answer an error, no hits", id, n.Load(), errs, hits, fb)
		}
	}
}

// TestPrefetchClusterScope: `cachefs prefetch --cache-scope cluster` fills
// only the files this node owns, and "complete" means all of them.
func TestPrefetchClusterScope(t *testing.T) {
	dir, files := testenv.WriteDataset(t, datagen.Spec{Files: 200, Classes: 4, MedianSize: 5000, MinSize: 100, MaxSize: 40_000, Seed: 17})
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	src, err := source.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dataset := b.ID()
	b.Close()
	members := []peer.Peer{{ID: "a", Addr: "127.0.0.11:7070"}, {ID: "b", Addr: "127.0.0.12:7070"}, {ID: "c", Addr: "127.0.0.13:7070"}}
	var ownedFiles, ownedBytes int64
	for _, f := range files {
		if o, _ := peer.Owner(members, peer.FileKey(dataset, f.Path)); o.ID == "b" {
			ownedFiles++
			ownedBytes += f.Size
		}
	}
	cacheDir := t.TempDir()
	s := runPrefetch(t, bin, nil, 0, dir, "--cache-dir", cacheDir, "--cache-size", strconv.FormatInt(datagen.TotalSize(files), 10),
		"--manifest", "none", "--cache-scope", "cluster", "--peers", "a=127.0.0.11:7070,b=127.0.0.12:7070,c=127.0.0.13:7070", "--peer-id", "b")
	if s.State != "complete" || s.Files != ownedFiles || s.Bytes != ownedBytes || s.UsedBytes != ownedBytes {
		t.Errorf("prefetch summary %+v; want complete with b's %d files, %d bytes, and nothing else cached", s, ownedFiles, ownedBytes)
	}
	out, err := exec.Command(bin, "prefetch", dir, "--cache-dir", t.TempDir(), "--cache-size", "1MiB", "--cache-scope", "cluster",
		"--peers", "a=127.0.0.11:7070", "--peer-id", "z").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not one of") {
		t.Errorf("a peer id not in --peers: %v\n%s", err, out)
	}
}
