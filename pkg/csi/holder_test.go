package csi_test

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/source"
)

// indexDataset indexes the local dataset at data.
func indexDataset(t *testing.T, data string) *manifest.Manifest {
	t.Helper()
	src, _ := source.Parse(data)
	b, err := all.Open(ctx, src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: 2})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// manifestFile indexes the dataset at data into a manifest file (a
// manifest mount is one whose connection can be held and recovered).
func manifestFile(t *testing.T, data string) string {
	t.Helper()
	m := indexDataset(t, data)
	file := filepath.Join(t.TempDir(), "ds.efm")
	if _, err := m.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	return file
}

// reader reads every file under root in a loop and checks its bytes until
// stopped, counting errors (and keeping the first few).
type reader struct {
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	reads  atomic.Int64
	mu     sync.Mutex
	errs   []string
	nerror int
}

func startReader(root string, files []datagen.File) *reader {
	r := &reader{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			for _, f := range files {
				select {
				case <-r.stop:
					return
				default:
				}
				b, err := os.ReadFile(filepath.Join(root, f.Path))
				if err == nil && sha256.Sum256(b) != datagen.Sum(f) {
					err = fmt.Errorf("%s: wrong bytes", f.Path)
				}
				r.reads.Add(1)
				if err != nil {
					r.mu.Lock()
					if r.nerror++; len(r.errs) < 5 {
						r.errs = append(r.errs, err.Error())
					}
					r.mu.Unlock()
				}
			}
		}
	}()
	return r
}

// check fails the test if a read failed since the reader started.
func (r *reader) check(t *testing.T, phase string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("%s: %d reads so far, %d errors", phase, r.reads.Load(), r.nerror)
	if r.nerror > 0 {
		t.Fatalf("%s: %d reads failed through the target: %s", phase, r.nerror, strings.Join(r.errs, "; "))
	}
}

func (r *reader) end() { r.once.Do(func() { close(r.stop) }); <-r.done }

// childrenOf lists the running processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	pids, err := testenv.Processes(func(p int, _ []string) bool { return testenv.ParentPID(p) == pid })
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// oneSupervisor returns the driver's one mount supervisor, waiting (up to
// 90 s: a recovery through a mounter that is coming back) until there is
// exactly one and ok accepts it.
func oneSupervisor(t *testing.T, stateDir, what string, ok func(pid int) bool) int {
	t.Helper()
	var sup int
	waitFor(t, 90*time.Second, what, func() bool {
		p := mountProcesses(t, stateDir)
		if len(p) != 1 || len(childrenOf(t, p[0])) != 1 || !ok(p[0]) {
			return false
		}
		sup = p[0]
		return true
	})
	return sup
}

// TestConnectionOutlivesProcesses (issue 26 items 3–4 under the CSI
// driver, real mounter, node plugin and cachefs processes): a reader
// verifying every byte through a pod's target sees no error while, in
// turn, the mount process is killed (its supervisor recovers it), a new
// mounter generation takes the mount over (graceful; the new mounter turns
// ready after, the old one exits once its children are gone), the mounter
// is killed with all its processes (the node plugin, holding the
// connection, recovers it through the next mounter), and the node plugin
// restarts, holds again and recovers a kill of the mount's processes.
func TestConnectionOutlivesProcesses(t *testing.T) {
	t.Run("manifest", func(t *testing.T) { testConnectionOutlivesProcesses(t, true) })
	// A listing mount: its node ids are in the node table, so it is held
	// and recovered the same way.
	t.Run("listing", func(t *testing.T) { testConnectionOutlivesProcesses(t, false) })
}

func testConnectionOutlivesProcesses(t *testing.T, withManifest bool) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	mounter := runDriverProcess(t, dir, "mounter")
	endpoint := "unix://" + filepath.Join(dir, "mounter.sock")
	extra := []string{"--mounter-endpoint", endpoint}
	data, files := dataset(t)
	work := filepath.Join(dir, "kubelet", "pod")
	staging, target := filepath.Join(work, "staging"), filepath.Join(work, "pod", "vol")
	vctx := map[string]string{"source": data, "cacheSize": "64MiB"}
	if withManifest {
		vctx["manifest"] = manifestFile(t, data)
	}
	t.Cleanup(func() {
		for _, m := range append(mountsUnder(t, work), mountsUnder(t, dir)...) {
			t.Errorf("left mounted: %s", m)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	p := runDriverProcess(t, dir, "all", extra...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "state", "node", "logs", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("mount log %s:\n%s", l, b[max(0, len(b)-6000):])
			}
			t.Logf("node plugin log:\n%s", p.log)
			t.Logf("mounter log:\n%s", mounter.log)
		}
	})
	stage(t, p.td, "vol-h", staging, vctx)
	publish(t, p.td, "vol-h", staging, target, vctx)
	checkFiles(t, target, files)
	r := startReader(target, files)
	defer r.end()
	state := p.td.stateDir
	sup := oneSupervisor(t, state, "the mount's supervisor", func(int) bool { return true })
	waitFor(t, 10*time.Second, "the node plugin's hold", func() bool { return strings.Contains(p.log.String(), "holding the dataset mount's FUSE connection") })

	// 1. kill -9 of the mount process: its supervisor recovers it.
	child := childrenOf(t, sup)[0]
	_ = syscall.Kill(child, syscall.SIGKILL)
	oneSupervisor(t, state, "a recovered mount process", func(s int) bool { return s == sup && childrenOf(t, s)[0] != child })
	checkFiles(t, target, files)
	r.check(t, "mount process killed")

	// 2. a new mounter generation takes over, gracefully.
	m2 := runDriverProcess(t, dir, "mounter")
	sup2 := oneSupervisor(t, state, "the mount moved to the new mounter", func(s int) bool { return testenv.ParentPID(s) == m2.cmd.Process.Pid })
	waitFor(t, 10*time.Second, "the new mounter ready", func() bool { return csi.ProbeMounter(ctx, endpoint) == nil })
	if err := mounter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mounter.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the old mounter did not exit on SIGTERM with its mounts moved:\n%s", mounter.log)
	}
	waitFor(t, 10*time.Second, "the node plugin's log of the move", func() bool {
		return strings.Contains(p.log.String(), "dataset mount moved to the current mounter")
	})
	checkFiles(t, target, files)
	r.check(t, "mounter taken over")

	// 3. kill -9 of the mounter with all its processes, as when its pod
	// is deleted; the next mounter comes up a second later.
	_ = m2.cmd.Process.Signal(syscall.SIGKILL)
	<-m2.done
	_ = syscall.Kill(-sup2, syscall.SIGKILL) // the supervisor's session: it and its mount process
	time.Sleep(time.Second)
	m3 := runDriverProcess(t, dir, "mounter")
	oneSupervisor(t, state, "the mount recovered through the next mounter", func(s int) bool { return testenv.ParentPID(s) == m3.cmd.Process.Pid })
	waitFor(t, 10*time.Second, "the node plugin's log of the recovery", func() bool {
		return strings.Contains(p.log.String(), "dataset mount recovered on its FUSE connection")
	})
	if strings.Contains(p.log.String(), "dataset mount repaired") {
		t.Errorf("the mount was repaired (unmounted), not recovered:\n%s", p.log)
	}
	checkFiles(t, target, files)
	r.check(t, "mounter killed with its processes")

	// 4. the node plugin restarts, holds again, and recovers a kill -9 of
	// the mount's processes.
	p.kill9(t)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	p2 := runDriverProcess(t, dir, "all", append(extra, "--metrics-addr", metricsAddr)...)
	waitFor(t, 10*time.Second, "the restarted node plugin's hold", func() bool {
		return strings.Contains(p2.log.String(), "holding the dataset mount's FUSE connection")
	})
	sup3 := mountProcesses(t, state)[0]
	_ = syscall.Kill(-sup3, syscall.SIGKILL)
	oneSupervisor(t, state, "the mount recovered by the restarted node plugin", func(s int) bool { return s != sup3 && testenv.ParentPID(s) == m3.cmd.Process.Pid })
	waitFor(t, 10*time.Second, "the restarted node plugin's log of the recovery", func() bool {
		return strings.Contains(p2.log.String(), "dataset mount recovered on its FUSE connection")
	})
	for _, l := range strings.Split(p.log.String()+p2.log.String(), "\n") {
		if strings.Contains(l, "dataset mount recovered") || strings.Contains(l, "dataset mount moved") {
			t.Log(l) // the stalls, for RELIABILITY.md
		}
	}
	checkFiles(t, target, files)
	r.check(t, "node plugin restarted, mount killed")

	// The mount's own cachefs_connection_* series reach the node plugin's
	// /metrics with the dataset's labels, counted across every process
	// the connection had: 1 takeover (the move to m2), 3 recoveries (the
	// supervisor's, then two through the node plugin), each with its stall.
	// The node plugin's own counters are this process's: 1 recovery.
	checkConnectionSeries(t, metricsAddr, 1, 3)

	r.end()
	unpublish(t, p2.td, "vol-h", target)
	unstage(t, p2.td, "vol-h", staging)
	if now := allMountProcesses(t, state); len(now) != 0 {
		t.Errorf("mount processes %v still run after unstage", now)
	}
	if held, _ := filepath.Glob(filepath.Join(state, "node", "held", "*")); len(held) != 0 {
		t.Errorf("lending sockets left after unstage: %v", held)
	}
}

// checkConnectionSeries scrapes the node plugin at addr and checks the
// one mount's re-exported cachefs_connection_* series (labelled with its
// dataset key) and the node plugin's epochfs_csi_connection_recoveries_total.
func checkConnectionSeries(t *testing.T, addr string, handovers, recoveries float64) {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	var err error
	for range 20 { // the node plugin scrapes its mounts on each scrape; a loaded machine may miss one
		resp, gerr := http.Get("http://" + addr + "/metrics")
		if gerr != nil {
			err = gerr
			time.Sleep(250 * time.Millisecond)
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err == nil && fams["cachefs_connection_recoveries_total"] != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("scrape of the node plugin: %v", err)
	}
	one := func(name string) *dto.Metric {
		mf := fams[name]
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %v, want one series", name, mf)
		}
		return mf.GetMetric()[0]
	}
	for name, want := range map[string]float64{"cachefs_connection_handovers_total": handovers, "cachefs_connection_recoveries_total": recoveries} {
		m := one(name)
		if !strings.HasPrefix(label(m, csi.LabelDatasetKey), "ds-") || m.GetCounter().GetValue() != want {
			t.Errorf("%s: %v, want %v labelled with the dataset", name, m, want)
		}
	}
	stalls := map[string]uint64{}
	for _, m := range fams["cachefs_connection_stall_seconds"].GetMetric() {
		if label(m, csi.LabelDatasetKey) == "" {
			t.Errorf("stall series without the dataset label: %v", m)
		}
		stalls[label(m, "kind")] = m.GetHistogram().GetSampleCount()
	}
	if stalls["takeover"] != uint64(handovers) || stalls["recovery"] != uint64(recoveries) {
		t.Errorf("cachefs_connection_stall_seconds counts %v, want takeover %v, recovery %v", stalls, handovers, recoveries)
	}
	if m := one("epochfs_csi_connection_recoveries_total"); m.GetCounter().GetValue() != 1 {
		t.Errorf("epochfs_csi_connection_recoveries_total: %v, want 1 (this node plugin's)", m)
	}
}
