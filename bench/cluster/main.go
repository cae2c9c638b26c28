// Command bench-cluster (make bench-cluster) measures the cluster-wide
// cache: N = 3 `cachefs mount` processes on this machine
// (separate cache directories, loopback peer ports), each with C = D/3 and
// then C = D/6, over MinIO behind the latency proxy, cluster scope and node
// scope side by side. Each epoch a distributed-sampler-like reader gives
// each node a different random third of the files. Per epoch: backend bytes
// (counted by an HTTP proxy in front of the latency proxy), the cluster hit
// ratio (1 − backend bytes / bytes read), each node's cache byte hit ratio
// (from its /metrics), peer bytes and files/s.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
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
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

const nodes = 3

// profileDir, when set, receives each mount's CPU profile (-profile-dir).
var profileDir string

func main() {
	tools := flag.String("tools", ".tools/bin", "directory holding minio")
	cachefs := flag.String("cachefs", "bin/cachefs", "the cachefs binary")
	dir := flag.String("dir", "", "work directory (default: a temporary directory, removed afterwards)")
	files := flag.Int("files", 3000, "files in the dataset")
	epochs := flag.Int("epochs", 3, "epochs per run")
	workers := flag.Int("workers", 8, "parallel readers per node")
	latency := flag.Duration("s3-latency", 20*time.Millisecond, "added to every request to MinIO")
	md := flag.String("md", "", "write the markdown report to this file")
	svg := flag.String("svg", "", "write the plot of backend bytes and cluster hit ratio per epoch to this SVG file")
	compare := flag.String("compare-cachefs", "", "another cachefs binary (an older commit) whose peer reads are measured side by side with -cachefs's (its --peers carry no capacities)")
	rounds := flag.Int("peer-rounds", 1, "rounds of the every-node-reads-every-file runs (peer reads vs local reads), interleaved")
	onlyPeer := flag.Bool("only-peer-reads", false, "run only the every-node-reads-every-file runs")
	peerFloor := flag.Bool("peer-floor", false, "the every-node-reads-every-file runs also read through mounts that cache nothing over a local copy of the dataset: what a peer read would cost with a free network and a free owner")
	// The scale run: a local directory instead of MinIO,
	// many tiny files.
	posix := flag.Bool("posix", false, "the dataset in a local directory (posix source) instead of MinIO; backend bytes are the mounts' cache miss bytes less the bytes peers sent")
	classes := flag.Int("classes", 30, "class directories")
	minSize := flag.Int64("min-size", 1000, "smallest file, bytes")
	maxSize := flag.Int64("max-size", 200_000, "largest file, bytes")
	medianSize := flag.Int64("median-size", 20_000, "log-normal median file size, bytes")
	fractions := flag.String("fractions", "3,6", "per-node cache sizes as divisors of D (3: C = D/3)")
	variants := flag.String("variants", "node,cluster,plain", "sampler runs: node, cluster (capacities advertised), plain (cluster scope without capacities; only at C = D/3)")
	peerReads := flag.Bool("peer-reads", true, "also the every-node-reads-every-file runs")
	flag.StringVar(&profileDir, "profile-dir", "", "write a CPU profile of every mount (cachefs mount --cpu-profile) to DIR/<scope>-<C/D>-<node>.prof")
	flag.Parse()
	spec := datagen.Spec{Files: *files, Classes: *classes, MedianSize: *medianSize, MinSize: *minSize, MaxSize: *maxSize, Seed: 15}
	var divs []int64
	for _, f := range strings.Split(*fractions, ",") {
		d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || d < 1 {
			log.Fatalf("-fractions %q: want divisors such as 3,6", *fractions)
		}
		divs = append(divs, d)
	}
	opt := options{spec: spec, divs: divs, variants: strings.Split(*variants, ","), peerReads: *peerReads || *onlyPeer, onlyPeer: *onlyPeer, posix: *posix, peerFloor: *peerFloor}
	work, remove, err := benchproc.WorkDir(*dir, "epochfs-cluster-")
	if err != nil {
		log.Fatal(err)
	}
	defer remove()
	report, rows, err := run(work, *tools, *cachefs, *compare, opt, *epochs, *workers, *latency, *rounds)
	if err != nil {
		log.Fatal(err)
	}
	if *svg != "" {
		if err := writeSVG(*svg, rows); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Print(report)
	if *md != "" {
		if err := os.WriteFile(*md, []byte(report), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// counter is an HTTP proxy that counts object GETs and their body bytes.
type counter struct {
	mu          sync.Mutex
	gets, bytes int64
}

func (c *counter) take() (gets, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gets, bytes, c.gets, c.bytes = c.gets, c.bytes, 0, 0
	return
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

func startCounter(target string) (*counter, string, error) {
	u, err := url.Parse("http://" + target)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 1024}
	c := &counter{}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.RawQuery != "" {
				rp.ServeHTTP(w, r)
				return
			}
			cw := &countWriter{ResponseWriter: w}
			rp.ServeHTTP(cw, r)
			c.mu.Lock()
			c.gets++
			c.bytes += cw.n
			c.mu.Unlock()
		}))
	}()
	return c, ln.Addr().String(), nil
}

type row struct {
	scope          string
	frac           string
	epoch          int
	backendBytes   int64
	clusterHit     float64
	nodeHit        [nodes]float64
	peerBytes      float64
	filesPerSec    float64
	minNodeFilesPS float64
	total          int64 // D in bytes
	// CPU time per file read, µs: of the three mount processes (user +
	// system, /proc/PID/stat) and of this process (the readers: their
	// syscalls into FUSE and the sha256 of every file). On a machine
	// shared with other work this is steadier than files/s.
	mountCPU, readerCPU float64
}

// procCPU is the user + system CPU time of process pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis: state is field 3;
	// utime and stime are fields 14 and 15, in clock ticks (100 Hz).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// selfCPU is this process's user + system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mountsCPU sums procCPU over the mounts.
func mountsCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// variant is one configuration of the mounts.
type variant struct {
	scope   string // node or cluster
	plain   bool   // cluster scope without advertised capacities: plain rendezvous ownership
	cachefs string // the binary
	label   string // in the table
	// floor, when set, is a local copy of the dataset: node scope over it
	// (posix source, its own manifest at floor+".manifest", so lookups cost
	// what the other runs' do) with a one-byte cache, so every open
	// reads the file from local disk into the mount's memory and serves it
	// in FUSE READ replies: a peer read with a free network and a free
	// owner (-peer-floor).
	floor string
}

// options select what run measures.
type options struct {
	spec      datagen.Spec
	divs      []int64  // C = D/div per node
	variants  []string // node, cluster, plain
	peerReads bool     // the every-node-reads-every-file runs
	onlyPeer  bool
	posix     bool // a local directory as the source, no MinIO
	peerFloor bool // the every-node-reads-every-file runs add variant.floor
}

func run(work, tools, cachefs, compare string, opt options, epochs, workers int, latency time.Duration, rounds int) (string, []row, error) {
	if opt.posix {
		return runPosix(work, cachefs, opt, epochs, workers)
	}
	onlyPeer := opt.onlyPeer
	ctx := context.Background()
	data := filepath.Join(work, "data")
	spec := opt.spec
	files, err := datagen.Write(data, spec)
	if err != nil {
		return "", nil, err
	}
	total := datagen.TotalSize(files)
	paths, want := datagen.Paths(files), datagen.Sums(files)
	m, err := benchproc.StartMinIO(filepath.Join(tools, "minio"), filepath.Join(work, "minio"))
	if err != nil {
		return "", nil, err
	}
	defer m.Stop()
	if err := m.Upload(ctx, "bench", data, paths, 32, nil); err != nil {
		return "", nil, err
	}
	far, err := benchproc.StartLatencyProxy(m.Host, latency)
	if err != nil {
		return "", nil, err
	}
	defer far.Close()
	cnt, addr, err := startCounter(far.Addr)
	if err != nil {
		return "", nil, err
	}
	src := "s3://bench?endpoint=http://" + addr + "&region=us-east-1"
	env := append(os.Environ(), m.Env()...)
	man := filepath.Join(work, "manifest")
	idx := exec.Command(cachefs, "index", src, "--out", man)
	idx.Env = env
	if out, err := idx.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("cachefs index: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(testenv.RandHex(16)), 0o600); err != nil {
		return "", nil, err
	}
	cnt.take()

	var rows []row
	if !onlyPeer {
		r, err := samplerRuns(work, cachefs, src, man, tokenFile, env, opt, total, paths, want, epochs, workers, cnt)
		if err != nil {
			return "", nil, err
		}
		rows = r
	}
	// Peer reads vs local reads: every node reads every file each epoch;
	// node scope with C = D reads everything locally from epoch 2 on,
	// cluster scope with C = D/3 a third locally and two thirds from peers.
	// With -compare-cachefs, the older binary's cluster scope runs right
	// after this one's, for a side-by-side figure of peer reads.
	type peerRun struct {
		v    variant
		frac string
		div  int64
	}
	all := []peerRun{{variant{scope: "node", label: "node", cachefs: cachefs}, "1/1", 1}, {variant{scope: "cluster", label: "cluster", cachefs: cachefs}, "1/3", 3}}
	if compare != "" {
		all = append(all,
			peerRun{variant{scope: "cluster", plain: true, label: "cluster, plain rendezvous", cachefs: cachefs}, "1/3", 3},
			peerRun{variant{scope: "cluster", plain: true, label: "cluster, plain rendezvous (-compare-cachefs " + filepath.Base(compare) + ")", cachefs: compare}, "1/3", 3})
	}
	if opt.peerFloor && opt.peerReads {
		idx := exec.Command(cachefs, "index", data, "--out", data+".manifest")
		if out, err := idx.CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("cachefs index %s: %v\n%s", data, err, out)
		}
		all = append(all, peerRun{variant{scope: "node", label: "floor: nothing cached, read through from local disk", cachefs: cachefs, floor: data}, "1/1", 1})
	}
	if !opt.peerReads {
		all = nil
	}
	// The last epoch's files/s of each run, by round and run (all's order).
	last := make([][]float64, rounds)
	for round := range rounds * len(all) {
		c := all[round%len(all)]
		if rounds > 1 {
			c.v.label += fmt.Sprintf(" (round %d)", round/len(all)+1)
		}
		log.Printf("every node reads every file: C = D×%s, %s", c.frac, c.v.label)
		r, err := runScope(work, c.v, src, man, tokenFile, env, c.frac, total/c.div, total, paths, want, min(epochs, 2), workers, cnt, true)
		if err != nil {
			return "", nil, err
		}
		rows = append(rows, r...)
		last[round/len(all)] = append(last[round/len(all)], r[len(r)-1].filesPerSec)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "N = %d mount processes on one machine, D = %d files, %.1f MB; MinIO behind %v per request; %d readers per node; each epoch every node reads a different random third of the files (page cache dropped between epochs); readahead off (--readahead-files 0) so that backend bytes are the caches' doing; cache policy nr. Node cache byte hit ratio: Δhit/(Δhit+Δmiss) bytes of the node's cache lookups, in cluster scope including the lookups its peer server made for other nodes.\n\n",
		nodes, len(files), float64(total)/1e6, latency, workers)
	b.WriteString("CPU per file: user + system time of the three mount processes (/proc/PID/stat, 10 ms ticks) and of the bench process (the readers: their FUSE syscalls and a sha256 of every file; MinIO and the proxies not included), over the epoch, divided by the files read.\n\n")
	b.WriteString("| C/D | scope | epoch | backend bytes (% of D) | cluster hit ratio (1 − backend / bytes read) | node cache byte hit ratios | peer bytes received (% of D) | cluster files/s | slowest node files/s | mounts' CPU µs/file | readers' CPU µs/file |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f %% | %.3f | %.3f / %.3f / %.3f | %.1f %% | %.0f | %.0f | %.0f | %.0f |\n", r.frac, r.scope, r.epoch,
			100*float64(r.backendBytes)/float64(total), r.clusterHit, r.nodeHit[0], r.nodeHit[1], r.nodeHit[2],
			100*r.peerBytes/float64(total), r.filesPerSec, r.minNodeFilesPS, r.mountCPU, r.readerCPU)
	}
	if len(all) > 0 {
		b.WriteString(peerSummary(last, opt.peerFloor))
	}
	return b.String(), rows, nil
}

// peerSummary derives, per round of the every-node-reads-every-file runs,
// the rate of peer-served files alone: cluster scope at C = D/3 reads a
// third of the files locally and two thirds from peers, so with L the
// all-local files/s (node scope, C = D) and M the mixed one, a peer file
// takes 1/P = (1/M − (1/3)/L) / (2/3). With the floor run (F: nothing
// cached, read through from local disk), F/L bounds P/L from above: a peer
// read does all of the floor's work plus the network and the owner's.
func peerSummary(last [][]float64, floor bool) string {
	var b strings.Builder
	b.WriteString("\nPeer-served files alone against local hits (epoch 2; P derived from the mixed run: 1/P = (1/M − (1/3)/L)/(2/3)):\n\n")
	b.WriteString("| round | local L files/s | mixed M files/s | peer-only P files/s | P / L (goal ≥ 0.8) |")
	if floor {
		b.WriteString(" floor F files/s | F / L (P / L can be no higher) |")
	}
	b.WriteString("\n|---|---|---|---|---|")
	if floor {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for i, r := range last {
		if len(r) < 2 || r[0] <= 0 || r[1] <= 0 {
			continue
		}
		l, m := r[0], r[1]
		p := (2.0 / 3) / (1/m - (1.0/3)/l)
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.0f | %.2f |", i+1, l, m, p, p/l)
		if floor && len(r) > 2 {
			f := r[len(r)-1]
			fmt.Fprintf(&b, " %.0f | %.2f |", f, f/l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// samplerRuns runs each variant at each C = D/div with the
// distributed-sampler reader.
func samplerRuns(work, cachefs, src, man, tokenFile string, env []string, opt options, total int64, paths []string,
	want map[string][32]byte, epochs, workers int, cnt *counter) ([]row, error) {
	var rows []row
	for _, div := range opt.divs {
		name := fmt.Sprintf("1/%d", div)
		for _, vn := range opt.variants {
			var v variant
			switch vn {
			case "node":
				v = variant{scope: "node", label: "node"}
			case "cluster":
				v = variant{scope: "cluster", label: "cluster"}
			case "plain":
				if div != 3 && len(opt.divs) > 1 {
					continue // the default runs: plain rendezvous beside C = D/3 only
				}
				v = variant{scope: "cluster", plain: true, label: "cluster, plain rendezvous (no capacities)"}
			default:
				return nil, fmt.Errorf("-variants: unknown %q (node, cluster, plain)", vn)
			}
			v.cachefs = cachefs
			log.Printf("C = D×%s, %s", name, v.label)
			r, err := runScope(work, v, src, man, tokenFile, env, name, total/div, total, paths, want, epochs, workers, cnt, false)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

// runPosix is the scale run: the dataset in a local directory (many tiny
// files, written in parallel), no MinIO; backend bytes from the mounts'
// counters.
func runPosix(work, cachefs string, opt options, epochs, workers int) (string, []row, error) {
	data := filepath.Join(work, "data")
	start := time.Now()
	files, err := datagen.WriteParallel(data, opt.spec, 8)
	if err != nil {
		return "", nil, err
	}
	log.Printf("wrote %d files in %v", len(files), time.Since(start).Round(time.Second))
	total := datagen.TotalSize(files)
	paths, want := datagen.Paths(files), datagen.Sums(files)
	man := filepath.Join(work, "manifest")
	start = time.Now()
	if out, err := exec.Command(cachefs, "index", data, "--out", man).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("cachefs index: %v\n%s", err, out)
	}
	log.Printf("indexed in %v", time.Since(start).Round(time.Second))
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(testenv.RandHex(16)), 0o600); err != nil {
		return "", nil, err
	}
	rows, err := samplerRuns(work, cachefs, data, man, tokenFile, os.Environ(), opt, total, paths, want, epochs, workers, nil)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "N = %d mount processes on one machine, D = %d files, %.1f MB, in a local directory (posix source, ext4); %d readers per node; each epoch every node reads a different random third of the files (page cache dropped between epochs); readahead off; cache policy nr. Backend bytes: the mounts' cache miss bytes less the bytes peers sent them (a peer server's own misses count at the owner). Node cache byte hit ratio: Δhit/(Δhit+Δmiss) bytes of the node's cache lookups, in cluster scope including the lookups its peer server made for other nodes.\n\n",
		nodes, len(files), float64(total)/1e6, workers)
	b.WriteString("| C/D per node | scope | epoch | backend bytes (% of D) | cluster hit ratio (1 − backend / D) | node cache byte hit ratios | peer bytes received (% of D) | cluster files/s | slowest node files/s | mounts' CPU µs/file | readers' CPU µs/file |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f %% | %.3f | %.3f / %.3f / %.3f | %.1f %% | %.0f | %.0f | %.0f | %.0f |\n", r.frac, r.scope, r.epoch,
			100*float64(r.backendBytes)/float64(total), r.clusterHit, r.nodeHit[0], r.nodeHit[1], r.nodeHit[2],
			100*r.peerBytes/float64(total), r.filesPerSec, r.minNodeFilesPS, r.mountCPU, r.readerCPU)
	}
	return b.String(), rows, nil
}

func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			name := line[:i]
			// One series (the default, aggregated) or one per peer (--peer-metrics per-peer).
			if name == "cachefs_peer_received_bytes_total" || strings.HasPrefix(name, "cachefs_peer_received_bytes_total{") {
				out["peer_received"] += v
			}
			out[name] = v
		}
	}
	return out, nil
}

func runScope(work string, v variant, src, man, tokenFile string, env []string, frac string, capacity, total int64,
	paths []string, want map[string][32]byte, epochs, workers int, cnt *counter, all bool) ([]row, error) {
	scope := v.scope
	if v.floor != "" {
		scope = "floor" // (names of mount points, caches and profiles)
	}
	type node struct {
		id, metrics, peer string
		proc              *benchproc.Proc
	}
	var ns []*node
	var list []string
	for i := range nodes {
		ports, err := testenv.FreePorts(2)
		if err != nil {
			return nil, err
		}
		n := &node{id: fmt.Sprintf("n%d", i), metrics: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			peer: fmt.Sprintf("127.0.0.1:%d", ports[1])}
		ns = append(ns, n)
		item := n.id + "=" + n.peer
		if !v.plain {
			item += ";capacity=" + strconv.FormatInt(capacity, 10) // its --cache-size: byte-balanced ownership
		}
		list = append(list, item)
	}
	defer func() {
		for _, n := range ns {
			if n.proc != nil {
				n.proc.Stop()
			}
		}
	}()
	for _, n := range ns {
		mnt := filepath.Join(work, fmt.Sprintf("%s%s-%v-%v-%s-mnt", scope, frac[2:], v.plain, all, n.id))
		cache := filepath.Join(work, fmt.Sprintf("%s%s-%v-%v-%s-cache", scope, frac[2:], v.plain, all, n.id))
		_ = os.RemoveAll(cache)
		for _, d := range []string{mnt, cache} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		opts := mountapi.CommandOptions{Source: src, Mountpoint: mnt, CacheDir: cache, CacheSize: capacity,
			MetricsAddr: n.metrics, Manifest: man, ReadaheadFiles: "0"}
		if v.floor != "" {
			opts.Source, opts.CacheSize, opts.Manifest = v.floor, 1, v.floor+".manifest"
		}
		if scope == mountapi.ScopeCluster {
			opts.CacheScope, opts.Peers, opts.PeerListen = mountapi.ScopeCluster, strings.Join(list, ","), n.peer
			opts.PeerID, opts.PeerTokenFile = n.id, tokenFile
		}
		if profileDir != "" {
			name := fmt.Sprintf("%s-%s-%v-%v-%s.prof", scope, frac[2:], v.plain, all, n.id)
			opts.CPUProfile = filepath.Join(profileDir, name)
		}
		cmd := exec.Command(v.cachefs, opts.Args()...)
		cmd.Env = env
		p, err := benchproc.Start(n.id, cmd, mnt)
		if err != nil {
			return nil, err
		}
		n.proc = p
		if err := p.WaitMounted(60 * time.Second); err != nil {
			return nil, err
		}
	}
	var rows []row
	for e := 1; e <= epochs; e++ {
		_ = epoch.DropPageCache()
		shuffled := epoch.Shuffled(paths, uint64(e)*7919)
		before := make([]map[string]float64, nodes)
		for i, n := range ns {
			s, err := scrape(n.metrics)
			if err != nil {
				return nil, err
			}
			before[i] = s
		}
		var pids []int
		for _, n := range ns {
			pids = append(pids, n.proc.Cmd.Process.Pid)
		}
		cpu0, err := mountsCPU(pids)
		if err != nil {
			return nil, err
		}
		self0 := selfCPU()
		if cnt != nil {
			cnt.take()
		}
		var wg sync.WaitGroup
		res := make([]epoch.Result, nodes)
		errs := make([]error, nodes)
		start := time.Now()
		for i, n := range ns {
			part := shuffled[i*len(shuffled)/nodes : (i+1)*len(shuffled)/nodes]
			if all {
				part = epoch.Shuffled(paths, uint64(e)*7919+uint64(i))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = epoch.Run(context.Background(), epoch.Options{Root: n.proc.Mnt, Paths: part, Workers: workers, Seed: uint64(e), Want: want})
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		cpu1, err := mountsCPU(pids)
		if err != nil {
			return nil, err
		}
		self1 := selfCPU()
		var backendBytes int64
		if cnt != nil {
			_, backendBytes = cnt.take()
		}
		read := float64(total) // bytes read by all the nodes' readers this epoch
		label, nread := v.label, len(paths)
		if all {
			read, nread = nodes*read, nodes*len(paths)
			label += ", every node reads every file"
		}
		r := row{scope: label, frac: frac, epoch: e, backendBytes: backendBytes, total: total,
			clusterHit: 1 - float64(backendBytes)/read, filesPerSec: float64(nread) / elapsed.Seconds(), minNodeFilesPS: -1,
			mountCPU: float64((cpu1 - cpu0).Microseconds()) / float64(nread), readerCPU: float64((self1 - self0).Microseconds()) / float64(nread)}
		for i, n := range ns {
			if errs[i] != nil {
				return nil, fmt.Errorf("%s scope, node %s, epoch %d: %w", scope, n.id, e, errs[i])
			}
			if len(res[i].Mismatches) > 0 {
				return nil, fmt.Errorf("%s scope, node %s, epoch %d: %d files with wrong bytes", scope, n.id, e, len(res[i].Mismatches))
			}
			s, err := scrape(n.metrics)
			if err != nil {
				return nil, err
			}
			d := func(k string) float64 { return s[k] - before[i][k] }
			hit, miss := d("cachefs_cache_hit_bytes_total"), d("cachefs_cache_miss_bytes_total")
			if hit+miss > 0 {
				r.nodeHit[i] = hit / (hit + miss)
			}
			r.peerBytes += d("peer_received")
			if cnt == nil {
				r.backendBytes += int64(miss - d("peer_received"))
			}
			if fps := res[i].FilesPerSec(); r.minNodeFilesPS < 0 || fps < r.minNodeFilesPS {
				r.minNodeFilesPS = fps
			}
		}
		if cnt == nil {
			r.clusterHit = 1 - float64(r.backendBytes)/read
		}
		log.Printf("  epoch %d: backend %.1f%% of D, cluster hit ratio %.3f, %.0f files/s", e, 100*float64(r.backendBytes)/float64(total), r.clusterHit, r.filesPerSec)
		rows = append(rows, r)
	}
	return rows, nil
}
