package mount_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"

	"github.com/epochfs/epochfs/internal/fakes3"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestEndlessListingRefused: two real FUSE mounts in this process, without
// a manifest, of an S3 server (internal/fakes3 on 127.0.0.1) whose
// directory endless/ answers IsTruncated=true forever, each page 1,000 new
// keys of 100 bytes, and whose empty/ answers empty truncated pages
// forever. Mount A caps entries (--max-dir-entries 10000, so 200 pages),
// mount B memory (--max-listing-memory 2MiB). Both list endless/ at once, A lists empty/:
// each directory fails with EFBIG, the process's heap (runtime.ReadMemStats,
// sampled every 5 ms while listing) stays within 64 MiB of where it
// started, each mount logs one ERROR line naming the directory and the
// flag, and counts it in cachefs_listing_refusals_total; the ordinary
// directory ok/ still lists and reads on both mounts, and a second readdir
// of the refused directory does not list it again.
//
// On the code before the caps the listings run on: the server's backstop
// (400,000 keys per directory, so that the test fails instead of taking the
// machine's memory) is listed whole by each mount, the heap grows by
// hundreds of MiB and readdir succeeds.
func TestEndlessListingRefused(t *testing.T) {
	s := &fakes3.Server{Bucket: "data", Objects: map[string][]byte{"ok/a": []byte("a"), "ok/b": []byte("bb")},
		Endless: []string{"endless/"}, EmptyPages: []string{"empty/"}, KeyLen: 100, Backstop: 400_000}
	s.Start(t)
	start := func(cfg mount.Config, log *testenv.SyncBuffer) *mount.Mount {
		cfg.Source, cfg.Manifest, cfg.CacheSize, cfg.MetricsAddr = s.Source(), mountapi.ManifestNone, 1<<20, "127.0.0.1:0"
		cfg.ReadTimeout = time.Minute
		cfg.Backend.Credentials = backend.Credentials{AccessKey: "k", SecretKey: "s"}
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
		return mounttest.Start(t, cfg)
	}
	var logA, logB testenv.SyncBuffer
	mntA, mntB := t.TempDir(), t.TempDir()
	a := start(mount.Config{Mountpoint: mntA, MaxDirEntries: 10_000}, &logA)
	b := start(mount.Config{Mountpoint: mntB, MaxListingMemory: 2 << 20}, &logB)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	readdir := func(dir string) error {
		_, err := os.ReadDir(dir)
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	t0 := time.Now()
	for i, dir := range []string{filepath.Join(mntA, "endless"), filepath.Join(mntB, "endless"), filepath.Join(mntA, "empty")} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t1 := time.Now()
			errs[i] = readdir(dir)
			t.Logf("readdir %s: %v in %v", dir, errs[i], time.Since(t1).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base)
	t.Logf("refusals took %v; heap in use %d MiB before, peak %d MiB (+%d MiB); pages: endless %d, empty %d",
		took.Round(time.Millisecond), base>>20, peak.Load()>>20, grew>>20, s.Pages("endless/"), s.Pages("empty/"))
	for i, name := range []string{"A endless", "B endless", "A empty"} {
		if !errors.Is(errs[i], syscall.EFBIG) {
			t.Errorf("readdir of %s: %v, want EFBIG", name, errs[i])
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mount A's log:\n%s\nmount B's log:\n%s", logA.String(), logB.String())
		}
	})
	if grew > 64<<20 {
		t.Errorf("heap grew by %d MiB while listing, want at most 64 MiB", grew>>20)
	}

	// The refusal is remembered: no new list request.
	pages := s.Pages("endless/")
	if err := readdir(filepath.Join(mntA, "endless")); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("second readdir of A endless: %v, want EFBIG", err)
	}
	if n := s.Pages("endless/"); n != pages {
		t.Errorf("second readdir listed the refused directory again (%d more pages)", n-pages)
	}

	// The rest of each mount serves on.
	for _, mnt := range []string{mntA, mntB} {
		es, err := os.ReadDir(filepath.Join(mnt, "ok"))
		if err != nil || len(es) != 2 {
			t.Errorf("%s: readdir ok: %v, %v; want a and b", mnt, es, err)
		}
		if got, err := os.ReadFile(filepath.Join(mnt, "ok", "b")); err != nil || string(got) != "bb" {
			t.Errorf("%s: read ok/b: %q, %v", mnt, got, err)
		}
	}

	for _, c := range []struct {
		name string
		m    *mount.Mount
		log  *testenv.SyncBuffer
		caps map[string]int // cap label (and flag, but for listing-pages) → refusals
	}{
		{"A", a, &logA, map[string]int{"max-dir-entries": 1, "listing-pages": 1}},
		{"B", b, &logB, map[string]int{"max-listing-memory": 1}},
	} {
		var lines []string
		for _, l := range strings.Split(c.log.String(), "\n") {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, "listing refused") {
				lines = append(lines, l)
			}
		}
		if len(lines) != len(c.caps) {
			t.Errorf("mount %s: %d listing-refused ERROR lines, want %d:\n%s", c.name, len(lines), len(c.caps), strings.Join(lines, "\n"))
		}
		metrics := scrape(t, c.m.MetricsAddr())
		for label, n := range c.caps {
			if !strings.Contains(c.log.String(), "cap="+label) {
				t.Errorf("mount %s: no log line names cap %s:\n%s", c.name, label, strings.Join(lines, "\n"))
			}
			flag := label
			if label == backend.CapListingPages {
				flag = mountapi.FlagMaxDirEntries // the page cap is derived from it
			}
			if !strings.Contains(c.log.String(), "--"+flag) {
				t.Errorf("mount %s: no log line names --%s:\n%s", c.name, flag, strings.Join(lines, "\n"))
			}
			want := `cachefs_listing_refusals_total{cap="` + label + `"} ` + string(rune('0'+n))
			if !strings.Contains(metrics, want) {
				t.Errorf("mount %s: metrics lack %q", c.name, want)
			}
		}
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
