package main_test

// End-to-end tests of the cachefs binary, as a user (and the outside check)
// runs it: build, mount in the foreground with --metrics-addr, read three
// shuffled epochs, compare every sha256, read the byte hit ratio of each
// epoch from /metrics, check EROFS, SIGTERM, and the mount is gone.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/internal/testenv/nfs"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

var spec = datagen.Spec{Files: 400, Classes: 8, MedianSize: 30_000, MinSize: 1000, MaxSize: 400_000, Seed: 3}

func TestMountBinaryPosix(t *testing.T) {
	testenv.RequireFUSE(t)
	src, files := testenv.WriteDataset(t, spec)
	runE2E(t, src, files, nil, mountapi.CommandOptions{})
}

func TestMountBinaryS3(t *testing.T) {
	testenv.RequireFUSE(t)
	m := s3.StartMinIO(t)
	m.MakeBucket(t, "datasets")
	files := spec.Plan()
	m.PutFiles(t, "datasets", "imagenet/train/", files)
	// A sibling prefix that must not show through the mount.
	m.Put(t, "datasets", "imagenet/train2/decoy.jpg", []byte("not part of the dataset"))
	src := "s3://datasets/imagenet/train?endpoint=" + m.Endpoint + "&region=us-east-1"
	env := []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	runE2E(t, src, files, env, mountapi.CommandOptions{})
}

// nfsSpec is the dataset of the NFS mount tests: at least 2,000 files.
var nfsSpec = datagen.Spec{Files: 2000, Classes: 10, MedianSize: 20_000, MinSize: 500, MaxSize: 300_000, Seed: 14}

// TestMountBinaryNFSGanesha mounts an NFS-Ganesha export (real server, own
// network namespace, portmapper) through the pure-Go nfs:// backend and
// reads three shuffled epochs, byte for byte, with the NR hit ratio.
func TestMountBinaryNFSGanesha(t *testing.T) {
	testenv.RequireFUSE(t)
	dir, files := testenv.WriteDataset(t, nfsSpec)
	g := nfs.StartGanesha(t, dir)
	runE2E(t, g.URL, files, nil, mountapi.CommandOptions{})
}

// TestMountBinaryNFSGoNFS is TestMountBinaryNFSGanesha on go-nfs
// in-process (one port for MOUNT and NFS, no portmapper).
func TestMountBinaryNFSGoNFS(t *testing.T) {
	testenv.RequireFUSE(t)
	dir, files := testenv.WriteDataset(t, nfsSpec)
	srv := nfs.StartGoNFS(t, dir, 2*len(files)+1000)
	runE2E(t, srv.URL+"?conns=8", files, nil, mountapi.CommandOptions{})
}

// TestMountBinaryNFSManifest: `cachefs index` of an nfs:// source, then a
// mount from that manifest (no listing: the backend opens lazily and
// mounts the export at the first read).
func TestMountBinaryNFSManifest(t *testing.T) {
	testenv.RequireFUSE(t)
	dir, files := testenv.WriteDataset(t, spec)
	srv := nfs.StartGoNFS(t, dir, 2*len(files)+1000)
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	man := filepath.Join(t.TempDir(), "manifest")
	if out, err := exec.Command(bin, "index", srv.URL, "--out", man).CombinedOutput(); err != nil {
		t.Fatalf("cachefs index: %v\n%s", err, out)
	}
	runE2E(t, srv.URL, files, nil, mountapi.CommandOptions{Manifest: man})
}

// TestMountBinaryRGW is TestMountBinaryS3 against Ceph RGW.
func TestMountBinaryRGW(t *testing.T) {
	testenv.RequireFUSE(t)
	r := ceph.RequireRGW(t)
	bucket := fmt.Sprintf("datasets-%d", os.Getpid())
	r.MakeBucket(t, bucket)
	files := spec.Plan()
	r.PutFiles(t, bucket, "imagenet/train/", files)
	r.Put(t, bucket, "imagenet/train2/decoy.jpg", []byte("not part of the dataset"))
	src := "s3://" + bucket + "/imagenet/train?endpoint=" + r.Endpoint + "&region=us-east-1"
	env := []string{"AWS_ACCESS_KEY_ID=" + r.AccessKey, "AWS_SECRET_ACCESS_KEY=" + r.SecretKey}
	runE2E(t, src, files, env, mountapi.CommandOptions{})
}

// runE2E mounts src with opts (its source, mount point, cache and
// metrics address filled in) and checks three epochs.
func runE2E(t *testing.T, src string, files []datagen.File, env []string, opts mountapi.CommandOptions) {
	runE2EBin(t, testenv.GoBuild(t, "./cmd/cachefs"), src, files, env, opts)
}

// runE2EBin is runE2E with a given cachefs binary.
func runE2EBin(t *testing.T, bin string, src string, files []datagen.File, env []string, opts mountapi.CommandOptions) {
	total := datagen.TotalSize(files)
	capacity := total / 2
	mnt, cacheDir := t.TempDir(), t.TempDir()
	port := testenv.FreePort(t)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)

	opts.Source, opts.Mountpoint, opts.CacheDir, opts.CacheSize = src, mnt, cacheDir, capacity
	opts.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, opts.Args()...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(stderr)
		logs <- string(b)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	if err := testenv.WaitMounted(mnt, 30*time.Second, exited); errors.Is(err, testenv.ErrExited) {
		t.Fatalf("cachefs mount: %v\n%s", err, <-logs)
	} else if err != nil {
		t.Fatal(err)
	}

	paths, want := datagen.Paths(files), datagen.Sums(files)
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]bool{}
	for _, p := range paths {
		classes[strings.SplitN(p, "/", 2)[0]] = true
	}
	if len(ents) != len(classes) {
		t.Errorf("mount root has %d entries, want %d class directories", len(ents), len(classes))
	}
	cd := float64(capacity) / float64(total)
	for e := 1; e <= 3; e++ {
		h0, m0, p0 := scrape(t, metricsURL)
		res, err := epoch.Run(context.Background(), epoch.Options{Root: mnt, Paths: paths, Workers: 8, Seed: uint64(e) + 100, Want: want})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) > 0 {
			t.Fatalf("epoch %d: %d files with wrong bytes, e.g. %s", e, len(res.Mismatches), res.Mismatches[0])
		}
		h1, m1, p1 := scrape(t, metricsURL)
		// The NR hit ratio: hits on entries an earlier epoch's reads
		// cached, so without the first reads of what readahead (on when
		// the backend is slow: auto, the default) fetched.
		ratio := ((h1 - h0) - (p1 - p0)) / ((h1 - h0) + (m1 - m0))
		if e == 1 && ratio != 0 {
			t.Errorf("epoch 1: byte hit ratio %.3f, want 0", ratio)
		}
		if e > 1 && (ratio < cd-0.05 || ratio > cd+0.05) {
			t.Errorf("epoch %d: byte hit ratio %.3f from /metrics, want %.3f ± 0.05", e, ratio, cd)
		}
		t.Logf("epoch %d: byte hit ratio %.3f (C/D %.3f), %.0f files/s", e, ratio, cd, res.FilesPerSec())
	}
	if _, err := os.Create(filepath.Join(mnt, "new")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on the mount: %v, want EROFS", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("cachefs mount exited with %v after SIGTERM\n%s", err, <-logs)
		}
	case <-time.After(20 * time.Second):
		// SIGQUIT makes the Go runtime print every goroutine's stack:
		// the log then says where shutdown hung.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		t.Fatalf("cachefs mount did not exit within 20s of SIGTERM; its log and stacks:\n%s", <-logs)
	}
	if ok, err := testenv.Mounted(mnt); err != nil {
		t.Fatal(err)
	} else if ok {
		t.Fatal("still mounted after SIGTERM")
	}
	if l := <-logs; strings.Contains(l, "AWS_SECRET") || (len(env) > 1 && strings.Contains(l, strings.TrimPrefix(env[1], "AWS_SECRET_ACCESS_KEY="))) {
		t.Error("the secret key appears in the mount's logs")
	}

	// The cache survives: stats reads it without a mount.
	out, err := exec.Command(bin, "stats", "--cache-dir", cacheDir, "-o", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"policy": "nr"`) || !strings.Contains(string(out), `"live": false`) {
		t.Errorf("cachefs stats: %v\n%s", err, out)
	}
}

// scrape returns cachefs_cache_hit_bytes_total, cachefs_cache_miss_bytes_total
// and cachefs_cache_prefetched_hit_bytes_total.
func scrape(t *testing.T, url string) (hit, miss, prefetched float64) {
	t.Helper()
	samples, body := testenv.Scrape(t, url)
	for _, name := range []string{"cachefs_cache_hits_total", "cachefs_cache_misses_total", "cachefs_cache_used_bytes",
		"cachefs_cache_capacity_bytes", "cachefs_cache_entries", "cachefs_cache_prefetch_fills_total", "cachefs_cache_prefetched_hits_total",
		"cachefs_readahead_window_files", "cachefs_readahead_auto", "cachefs_readahead_files_total", "cachefs_backend_read_seconds_bucket", "cachefs_backend_errors_total", "cachefs_backend_retries_total"} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	hit, okHit := samples["cachefs_cache_hit_bytes_total"]
	miss, okMiss := samples["cachefs_cache_miss_bytes_total"]
	prefetched, okPre := samples["cachefs_cache_prefetched_hit_bytes_total"]
	if !okHit || !okMiss || !okPre {
		t.Fatalf("/metrics lacks the byte counters:\n%s", body)
	}
	return hit, miss, prefetched
}
