package reliability

import (
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/faultproxy"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/mount"
)

// TestBackendFaults reads files through a mount whose S3 traffic crosses a
// proxy that breaks 10% of the object GETs (5xx, resets, stalls, truncated
// bodies, wrong Content-Length). Every read returns the source's bytes or
// EIO; none hangs past the read deadline.
func TestBackendFaults(t *testing.T) {
	reads := envInt("RELIABILITY_READS", 3000)
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "faults")
	files := smallSpec(200, 21).Plan()
	mi.PutFiles(t, "faults", "ds/", files)
	want := datagen.Sums(files)
	proxy, err := faultproxy.Start(faultproxy.Options{Target: mi.Endpoint, Rate: 0.10, Seed: 7, Stall: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)

	const deadline = 8 * time.Second
	root := t.TempDir()
	m := mounttest.Start(t, mount.Config{
		Source: "s3://faults/ds?endpoint=" + proxy.URL, Mountpoint: root, MetricsAddr: "127.0.0.1:0",
		// 1 byte: nothing is admitted, so every open is a backend read.
		CacheSize:   1,
		ReadTimeout: deadline,
		Backend:     backend.Options{RequestTimeout: time.Second},
	})

	var (
		wrong, eio, ok atomic.Int64
		other          sync.Map
		maxLatency     atomic.Int64
		next           atomic.Int64
		wg             sync.WaitGroup
	)
	start := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for next.Add(1) <= int64(reads) {
				f := files[rng.IntN(len(files))]
				t0 := time.Now()
				b, err := os.ReadFile(join(root, f.Path))
				lat := time.Since(t0)
				for old := maxLatency.Load(); int64(lat) > old && !maxLatency.CompareAndSwap(old, int64(lat)); old = maxLatency.Load() {
				}
				switch {
				case err == nil && sha256.Sum256(b) == want[f.Path]:
					ok.Add(1)
				case err == nil:
					wrong.Add(1)
				case errors.Is(err, syscall.EIO):
					eio.Add(1)
				default:
					other.Store(err.Error(), true)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	faults, requests := proxy.Counts()
	retries := int64(scrape(t, m.MetricsAddr(), "cachefs_backend_retries_total"))
	t.Logf("RESULT backend-faults: reads=%d ok=%d wrong=%d eio=%d requests=%d faults=%v retries=%d max_latency=%s elapsed=%s",
		reads, ok.Load(), wrong.Load(), eio.Load(), requests, faults, retries, time.Duration(maxLatency.Load()).Round(time.Millisecond), elapsed.Round(time.Second))

	if wrong.Load() != 0 {
		t.Errorf("%d reads returned wrong bytes", wrong.Load())
	}
	other.Range(func(k, _ any) bool {
		t.Errorf("a read failed with %v, want EIO", k)
		return true
	})
	if got := time.Duration(maxLatency.Load()); got > deadline+2*time.Second {
		t.Errorf("slowest read took %s, over the %s deadline", got, deadline)
	}
	var injected int64
	for _, n := range faults {
		injected += n
	}
	if injected == 0 || retries == 0 {
		t.Errorf("no faults injected (%v) or no retries (%d): the test did not test anything", faults, retries)
	}
	if ok.Load() < int64(reads)*9/10 {
		t.Errorf("only %d of %d reads succeeded: retries should absorb most 10%% faults", ok.Load(), reads)
	}
}

// TestBackendOutage stops MinIO under a mount: cached files keep being
// served, uncached reads fail fast with EIO and a log line, and everything
// recovers when MinIO returns, with no remount.
func TestBackendOutage(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "outage")
	files := smallSpec(60, 5).Plan()
	mi.PutFiles(t, "outage", "ds/", files)
	want := datagen.Sums(files)
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	logs := &logBuffer{}
	root := t.TempDir()
	mounttest.Start(t, mount.Config{
		Source: "s3://outage/ds?endpoint=" + mi.Endpoint, Mountpoint: root,
		CacheSize: 1 << 30, ReadTimeout: 10 * time.Second, Logger: logs.logger(),
	})
	cached, uncached := files[:30], files[30:]
	for _, f := range cached {
		if _, err := os.ReadFile(join(root, f.Path)); err != nil {
			t.Fatal(err)
		}
	}

	mi.Stop()
	for _, f := range cached {
		b, err := os.ReadFile(join(root, f.Path))
		if err != nil || sha256.Sum256(b) != want[f.Path] {
			t.Fatalf("cached %s during the outage: %v (or wrong bytes)", f.Path, err)
		}
	}
	var slowest time.Duration
	for _, f := range uncached[:5] {
		t0 := time.Now()
		_, err := os.ReadFile(join(root, f.Path))
		slowest = max(slowest, time.Since(t0))
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("uncached %s during the outage: %v, want EIO", f.Path, err)
		}
	}
	if slowest > 8*time.Second {
		t.Errorf("an uncached read during the outage took %s: not failing fast", slowest)
	}
	if l := logs.String(); !containsAll(l, "I/O error", uncached[0].Path) {
		t.Errorf("no log line names the failed file:\n%s", l)
	}

	t0 := time.Now()
	mi.Restart(t)
	restarted := time.Since(t0)
	var recovered time.Duration
	for _, f := range uncached {
		b, err := os.ReadFile(join(root, f.Path))
		if err != nil || sha256.Sum256(b) != want[f.Path] {
			t.Fatalf("%s after MinIO returned: %v (or wrong bytes)", f.Path, err)
		}
		if recovered == 0 {
			recovered = time.Since(t0) - restarted
		}
	}
	t.Logf("RESULT backend-outage: cached_reads_ok=%d uncached_eio=5 slowest_eio=%s first_read_after_restart=%s (minio restart took %s)",
		len(cached), slowest.Round(time.Millisecond), recovered.Round(time.Millisecond), restarted.Round(time.Millisecond))
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
