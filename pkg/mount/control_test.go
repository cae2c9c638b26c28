package mount_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/prefetch"
)

const (
	ctlWholeMax  = 64 << 10
	ctlBlockSize = 16 << 10
)

var ctlSpec = datagen.Spec{Files: 300, Classes: 6, MedianSize: 20_000, MinSize: 1000, MaxSize: 150_000, Seed: 21}

// unmountable mounts cfg and returns the mount and an idempotent unmount
// (also run at cleanup).
func unmountable(t *testing.T, cfg mount.Config) (*mount.Mount, func()) {
	t.Helper()
	m, err := mount.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unmount := func() {
		once.Do(func() {
			if err := m.Unmount(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unmount)
	return m, unmount
}

// readAll reads every file through the mount in a random order and counts
// the files whose bytes differ from the dataset's.
func readAll(t *testing.T, mnt string, files []datagen.File, sums map[string][32]byte, rng *rand.Rand) (mismatches int) {
	t.Helper()
	order := rng.Perm(len(files))
	for _, i := range order {
		f := files[i]
		b, err := os.ReadFile(filepath.Join(mnt, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Errorf("read %s: %v", f.Path, err)
			mismatches++
			continue
		}
		if sha256.Sum256(b) != sums[f.Path] {
			t.Errorf("%s: wrong bytes through the mount", f.Path)
			mismatches++
		}
	}
	return mismatches
}

// TestPrefetchThroughControlWhileServing prefetches through the control
// socket of a running mount while readers read the mount, checks every byte
// they read, then checks that a later mount of the same source on the same
// cache directory hits exactly what is cached.
func TestPrefetchThroughControlWhileServing(t *testing.T) {
	testenv.RequireFUSE(t)
	src, files := testenv.WriteDataset(t, ctlSpec)
	total := datagen.TotalSize(files)
	sums := datagen.Sums(files)
	cacheDir := t.TempDir()
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: total / 2,
		WholeFileMax: ctlWholeMax, BlockSize: ctlBlockSize}
	m, unmount := unmountable(t, cfg)
	if fi, err := os.Stat(mountapi.ControlSocket(cacheDir)); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v %v", fi, err)
	}

	// Readers go round the dataset until the prefetch is over, and once more.
	var prefetchDone atomic.Bool
	var wg sync.WaitGroup
	var mismatches, passes atomic.Int64
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for {
				over := prefetchDone.Load()
				mismatches.Add(int64(readAll(t, cfg.Mountpoint, files, sums, rng)))
				passes.Add(1)
				if over {
					return
				}
			}
		}()
	}
	var events []string
	sum, err := mountapi.RemotePrefetch(context.Background(), cacheDir,
		mountapi.ControlRequest{Source: src, Workers: 4, ProgressIntervalMS: 5},
		func(ev mountapi.ControlEvent) { events = append(events, ev.Type) })
	prefetchDone.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prefetch: %s; readers made %d passes; events %d", sum.Message, passes.Load(), len(events))
	if mismatches.Load() != 0 {
		t.Fatalf("%d reads through the mount returned wrong bytes during the prefetch", mismatches.Load())
	}
	if len(events) == 0 || events[0] != mountapi.EventStarted {
		t.Errorf("events %v: want started first", events)
	}
	if sum.State != prefetch.StateCacheFull || sum.CachedBytes == 0 || sum.UsedBytes > cfg.CacheSize {
		t.Errorf("summary %+v", sum)
	}

	// Nothing in flight now: a second prefetch finds nothing more that fits
	// and reports the truth, which the mount's store agrees with.
	again, err := mountapi.RemotePrefetch(context.Background(), cacheDir, mountapi.ControlRequest{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.FetchedBytes != 0 || again.State != prefetch.StateCacheFull || again.CachedBytes < sum.CachedBytes ||
		again.CachedBytes != m.Stats().UsedBytes {
		t.Errorf("second prefetch %+v; store used %d", again, m.Stats().UsedBytes)
	}
	if n := readAll(t, cfg.Mountpoint, files, sums, rand.New(rand.NewPCG(9, 9))); n != 0 {
		t.Fatalf("%d wrong files after the prefetch", n)
	}
	unmount()
	if _, err := os.Stat(mountapi.ControlSocket(cacheDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left after unmount: %v", err)
	}

	// A later mount's epoch hits exactly what is cached.
	cfg.Mountpoint = t.TempDir()
	later, _ := unmountable(t, cfg)
	if n := readAll(t, cfg.Mountpoint, files, sums, rand.New(rand.NewPCG(3, 3))); n != 0 {
		t.Fatalf("%d wrong files in the later mount", n)
	}
	st := later.Stats()
	if st.HitBytes != again.CachedBytes || st.HitBytes+st.MissBytes != total || st.Admissions != 0 {
		t.Errorf("later epoch: hit %d + miss %d bytes (admitted %d); want hit %d of %d", st.HitBytes, st.MissBytes, st.Admissions, again.CachedBytes, total)
	}
	t.Logf("later epoch byte hit ratio %.3f (cache/dataset %.3f)", float64(st.HitBytes)/float64(total), float64(cfg.CacheSize)/float64(total))
}

// slowBackend delays every read.
type slowBackend struct {
	backend.Backend
	delay time.Duration
}

func (s slowBackend) ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.Backend.ReadAt(ctx, path, version, p, off)
}

// TestRemotePrefetchCancel cancels the client mid-way: the mount stops,
// reports the truth, and a later request completes the rest.
func TestRemotePrefetchCancel(t *testing.T) {
	testenv.RequireFUSE(t)
	src, files := testenv.WriteDataset(t, ctlSpec)
	total := datagen.TotalSize(files)
	// A cache dir path longer than a sockaddr_un holds.
	cacheDir := filepath.Join(t.TempDir(), strings.Repeat("long-directory-name-", 6))
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 2 * total}
	mount.WrapBackend(&cfg, func(b backend.Backend) backend.Backend { return slowBackend{b, 5 * time.Millisecond} })
	m, _ := unmountable(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	sum, err := mountapi.RemotePrefetch(ctx, cacheDir, mountapi.ControlRequest{Workers: 2, ProgressIntervalMS: 10},
		func(ev mountapi.ControlEvent) {
			if ev.Type == mountapi.EventProgress && ev.Progress.DoneFiles >= 20 {
				cancel()
			}
		})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", sum.Message)
	if sum.State != prefetch.StateInterrupted || sum.CachedFiles < 20 || sum.CachedFiles >= int64(len(files)) ||
		sum.CachedBytes != m.Stats().UsedBytes {
		t.Errorf("cancelled prefetch: %+v; store used %d", sum, m.Stats().UsedBytes)
	}
	rest, err := mountapi.RemotePrefetch(context.Background(), cacheDir, mountapi.ControlRequest{Workers: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rest.State != prefetch.StateComplete || rest.AlreadyBytes != sum.CachedBytes || rest.FetchedBytes != total-sum.CachedBytes {
		t.Errorf("rerun: %+v", rest)
	}
}

func TestControlRefusals(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	if _, err := datagen.Write(src, datagen.Spec{Files: 50, Classes: 2, MedianSize: 20_000, MinSize: 1000, MaxSize: 100_000}); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 1 << 30}
	mount.WrapBackend(&cfg, func(b backend.Backend) backend.Backend { return slowBackend{b, 20 * time.Millisecond} })
	unmountable(t, cfg)

	// One prefetch at a time: start a slow one, then ask again.
	started := make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := mountapi.RemotePrefetch(context.Background(), cacheDir, mountapi.ControlRequest{Workers: 1},
			func(ev mountapi.ControlEvent) { once.Do(func() { close(started) }) })
		firstDone <- err
	}()
	<-started

	for _, tc := range []struct {
		name string
		req  mountapi.ControlRequest
		want string
	}{
		{"another dataset", mountapi.ControlRequest{Source: t.TempDir()}, "is used by a mount of"},
		{"bad source", mountapi.ControlRequest{Source: "s3:///x"}, "bucket"},
		{"another split", mountapi.ControlRequest{WholeFileMax: 1 << 20}, "same split"},
		{"busy", mountapi.ControlRequest{Source: "file://" + src}, "already running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mountapi.RemotePrefetch(context.Background(), cacheDir, tc.req, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RemotePrefetch: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if err := <-firstDone; err != nil {
		t.Errorf("first prefetch: %v", err)
	}
	if _, err := mountapi.RemotePrefetch(context.Background(), t.TempDir(), mountapi.ControlRequest{}, nil); !errors.Is(err, mountapi.ErrNoControl) {
		t.Errorf("no mount: %v, want ErrNoControl", err)
	}
}

// TestControlDataset: a mount tells what it serves (OpDataset): the size
// of the manifest it loaded, or no size without one.
func TestControlDataset(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	man, _, err := manifest.Build([]manifest.File{{Path: "a", Size: 1000, Version: "v"}, {Path: "d/b", Size: 234, Version: "v"}},
		manifest.BuildOptions{Info: manifest.Info{Source: "file://" + src}})
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "m")
	if _, err := man.WriteFile(local); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		manifest string
		want     mountapi.DatasetInfo
	}{
		// With a manifest the mount counts epochs: the first, nothing read yet.
		{local, mountapi.DatasetInfo{Source: src, ID: "file://" + src, Manifest: true, Bytes: 1234, Files: 2, Epoch: 1}},
		{mountapi.ManifestNone, mountapi.DatasetInfo{Source: src, ID: "file://" + src}},
	} {
		cacheDir := t.TempDir()
		_, unmount := unmountable(t, mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 1 << 20, Manifest: tc.manifest})
		got, err := mountapi.RemoteDataset(context.Background(), cacheDir)
		if err != nil || got != tc.want {
			t.Errorf("--manifest %q: RemoteDataset = %+v, %v; want %+v", tc.manifest, got, err, tc.want)
		}
		unmount()
		if _, err := mountapi.RemoteDataset(context.Background(), cacheDir); !errors.Is(err, mountapi.ErrNoControl) {
			t.Errorf("after unmount: %v, want ErrNoControl", err)
		}
	}
}
