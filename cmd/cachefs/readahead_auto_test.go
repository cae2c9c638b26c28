package main_test

// The default mount (--readahead-files auto) against real MinIO: behind a
// proxy that adds 20 ms to every request (a far object store) it reads
// ahead; against MinIO on 127.0.0.1 it does not (or hardly). Checked from
// /metrics, as a user would, with the NR hit ratio of each epoch.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

func TestMountReadaheadAuto(t *testing.T) {
	testenv.RequireFUSE(t)
	m := s3.StartMinIO(t)
	m.MakeBucket(t, "datasets")
	spec := datagen.Spec{Files: 600, Classes: 4, MedianSize: 20_000, MinSize: 1000, MaxSize: 200_000, Seed: 5}
	files := spec.Plan()
	m.PutFiles(t, "datasets", "train/", files)
	far, err := benchproc.StartLatencyProxy(m.Host, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	env := []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	total := datagen.TotalSize(files)

	type result struct {
		window, latency, files, auto float64
		nr                           [2]float64 // NR hit ratio of epochs 1 and 2
	}
	run := func(t *testing.T, host string, capacity int64) result {
		src := "s3://datasets/train?endpoint=http://" + host + "&region=us-east-1"
		mnt, metricsURL := startMount(t, bin, src, capacity, env)
		var r result
		for e := 0; e < 2; e++ {
			s0, _ := testenv.Scrape(t, metricsURL)
			res, err := epoch.Run(context.Background(), epoch.Options{Root: mnt, Paths: datagen.Paths(files),
				Workers: 8, Seed: uint64(e) + 7, Want: datagen.Sums(files)})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Mismatches) > 0 {
				t.Fatalf("epoch %d: %d files with wrong bytes, e.g. %s", e+1, len(res.Mismatches), res.Mismatches[0])
			}
			s1, _ := testenv.Scrape(t, metricsURL)
			d := func(name string) float64 { return s1[name] - s0[name] }
			hit, miss, pre := d("cachefs_cache_hit_bytes_total"), d("cachefs_cache_miss_bytes_total"), d("cachefs_cache_prefetched_hit_bytes_total")
			r.nr[e] = (hit - pre) / (hit + miss)
			t.Logf("epoch %d: %.0f files/s, byte hit ratio %.3f, NR hit ratio %.3f, prefetched hit bytes %.0f, prefetch fills %.0f",
				e+1, res.FilesPerSec(), hit/(hit+miss), r.nr[e], pre, d("cachefs_cache_prefetch_fills_total"))
			if e == 0 {
				r.window, r.latency = s1["cachefs_readahead_window_files"], s1["cachefs_readahead_latency_seconds"]
				r.auto = s1["cachefs_readahead_auto"]
			} else {
				r.files = s1["cachefs_readahead_files_total"]
				if got := s1["cachefs_cache_prefetch_fills_total"]; got != r.files {
					t.Errorf("prefetch fills %v, want the files read ahead (%v): nothing else prefetched", got, r.files)
				}
			}
		}
		t.Logf("readahead: auto %v, window %v files, latency %.1f ms, %v of %d files read ahead",
			r.auto, r.window, r.latency*1000, r.files, len(files))
		if r.auto != 1 {
			t.Errorf("cachefs_readahead_auto = %v, want 1 (the default)", r.auto)
		}
		if r.nr[0] != 0 {
			t.Errorf("epoch 1: NR hit ratio %.3f, want 0", r.nr[0])
		}
		if want := float64(min(capacity, total)) / float64(total); r.nr[1] < want-0.05 || r.nr[1] > want+0.05 {
			t.Errorf("epoch 2: NR hit ratio %.3f, want %.3f ± 0.05", r.nr[1], want)
		}
		return r
	}
	t.Run("far", func(t *testing.T) {
		r := run(t, far.Addr, 2*total)
		if r.latency < 0.015 {
			t.Errorf("measured latency %.1f ms behind a 20 ms proxy", r.latency*1000)
		}
		if r.window < 4 {
			t.Errorf("readahead window %v at 20 ms per request, want on (≥ 4)", r.window)
		}
		if r.files < float64(len(files))/4 {
			t.Errorf("%v of %d files read ahead at 20 ms per request, want a quarter or more", r.files, len(files))
		}
	})
	t.Run("local", func(t *testing.T) {
		r := run(t, m.Host, total/2)
		if r.window > 2 || r.files > float64(len(files))/10 {
			t.Errorf("local MinIO: readahead window %v, %v of %d files read ahead (latency %.1f ms); want off or low",
				r.window, r.files, len(files), r.latency*1000)
		}
	})
}

// startMount runs `cachefs mount` with default flags (and a metrics
// address) until the test ends, and returns its mount point and metrics
// URL.
func startMount(t *testing.T, bin, src string, capacity int64, env []string) (mnt, metricsURL string) {
	t.Helper()
	mnt, cacheDir := t.TempDir(), t.TempDir()
	port := testenv.FreePort(t)
	metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	args := mountapi.CommandOptions{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: capacity,
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", port)}.Args()
	cmd := exec.Command(bin, args...)
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
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
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
	return mnt, metricsURL
}
