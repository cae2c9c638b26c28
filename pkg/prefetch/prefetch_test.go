package prefetch_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/prefetch"
)

// A small image-like dataset whose larger files (> wholeMax) are cached in
// blocks, so both kinds of keys are exercised.
var spec = datagen.Spec{Files: 120, Classes: 6, MedianSize: 20_000, MinSize: 1000, MaxSize: 150_000, Seed: 11}

const (
	wholeMax  = 64 << 10
	blockSize = 16 << 10
)

type dataset struct {
	dir    string
	files  []datagen.File
	total  int64
	byPath map[string]datagen.File
}

func makeDataset(t testing.TB) dataset {
	t.Helper()
	dir := t.TempDir()
	files, err := datagen.Write(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	d := dataset{dir: dir, files: files, total: datagen.TotalSize(files), byPath: map[string]datagen.File{}}
	for _, f := range files {
		d.byPath[f.Path] = f
	}
	return d
}

// index builds b's manifest by a walk.
func index(t testing.TB, b backend.Backend) *manifest.Manifest {
	t.Helper()
	m, _, err := manifest.Index(context.Background(), b, manifest.IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openStore(t testing.TB, dir string, capacity int64) *cache.Store {
	t.Helper()
	s, err := cache.Open(cache.Options{Dir: dir, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func run(t testing.TB, ctx context.Context, cfg prefetch.Config) prefetch.Summary {
	t.Helper()
	if cfg.WholeFileMax == 0 {
		cfg.WholeFileMax, cfg.BlockSize = wholeMax, blockSize
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	p, err := prefetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", sum.State, sum.Message)
	return sum
}

// cachedBytes returns, by reading the store with the keys the FUSE layer
// forms (its own formula, not cache.FileKeys), the bytes of d held in s,
// and fails the test if any held entry has other bytes than the dataset.
func cachedBytes(t *testing.T, s *cache.Store, b backend.Backend, d dataset) (held int64, fullFiles int) {
	t.Helper()
	ctx := context.Background()
	for _, f := range d.files {
		e, err := b.Stat(ctx, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		content := datagen.Content(f)
		type span struct{ block, off, n int64 }
		var spans []span
		if f.Size <= wholeMax {
			spans = []span{{0, 0, f.Size}}
		} else {
			for idx := int64(0); idx*blockSize < f.Size; idx++ {
				spans = append(spans, span{idx + 1, idx * blockSize, min(blockSize, f.Size-idx*blockSize)})
			}
		}
		all := true
		for _, sp := range spans {
			key := cache.Key{Dataset: b.ID(), Path: f.Path, Version: e.Version, Block: sp.block}
			if !s.Contains(key) {
				all = false
				continue
			}
			res, err := s.Get(ctx, key, sp.n, func(context.Context, []byte) error {
				return errors.New("held entry was not a hit")
			})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			got := make([]byte, sp.n)
			if _, err := res.File.ReadAt(got, 0); err != nil && sp.n > 0 {
				t.Fatal(err)
			}
			res.File.Close()
			if !bytes.Equal(got, content[sp.off:sp.off+sp.n]) {
				t.Fatalf("%s: cached bytes differ from the dataset", key)
			}
			held += sp.n
		}
		if all {
			fullFiles++
		}
	}
	return held, fullFiles
}

func TestDefaultsMatchFUSE(t *testing.T) {
	if cache.DefaultWholeFileMax != fusefs.DefaultWholeFileMax || cache.DefaultBlockSize != fusefs.DefaultBlockSize {
		t.Fatalf("cache defaults %d/%d differ from fusefs's %d/%d: prefetch and mount would form different keys",
			cache.DefaultWholeFileMax, cache.DefaultBlockSize, fusefs.DefaultWholeFileMax, fusefs.DefaultBlockSize)
	}
}

func TestCompleteThenResume(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	cacheDir := t.TempDir()
	s := openStore(t, cacheDir, 2*d.total)

	first := run(t, context.Background(), prefetch.Config{Backend: b, Store: s})
	if first.State != prefetch.StateComplete || !strings.HasPrefix(first.Message, "complete") {
		t.Fatalf("first run: %+v", first)
	}
	if first.Files != int64(len(d.files)) || first.Bytes != d.total || first.CachedFiles != first.Files ||
		first.CachedBytes != d.total || first.FetchedFiles != first.Files || first.FetchedBytes != d.total ||
		first.AlreadyFiles != 0 || first.PercentBytes != 100 || first.Manifest {
		t.Errorf("first run summary: %+v", first)
	}
	held, full := cachedBytes(t, s, b, d)
	if held != d.total || full != len(d.files) {
		t.Errorf("store holds %d bytes, %d full files; want %d, %d", held, full, d.total, len(d.files))
	}

	// Resume in a new process: reopen the store.
	s.Close()
	s = openStore(t, cacheDir, 2*d.total)
	second := run(t, context.Background(), prefetch.Config{Backend: b, Store: s})
	if second.State != prefetch.StateComplete || second.FetchedFiles != 0 || second.FetchedBytes != 0 ||
		second.AlreadyFiles != int64(len(d.files)) || second.AlreadyBytes != d.total {
		t.Errorf("second run summary: %+v", second)
	}
	if !strings.Contains(second.Message, "0 files, 0B by this run") {
		t.Errorf("second run message %q does not say it cached nothing new", second.Message)
	}
	if st := s.Stats(); st.Misses != 0 || st.Admissions != 0 {
		t.Errorf("second run read through the store: %+v", st)
	}
}

// nrSimulate returns the bytes NR keeps when reading d's entries once in
// path order into an empty cache of capacity bytes.
func nrSimulate(t *testing.T, b backend.Backend, capacity int64) (int64, int) {
	t.Helper()
	m := index(t, b)
	var used int64
	full := 0
	m.Walk(func(i int, p string) bool {
		all := true
		for _, sp := range cache.FileKeys(b.ID(), p, m.Version(i), m.Size(i), wholeMax, blockSize) {
			if used+sp.Length <= capacity {
				used += sp.Length
			} else {
				all = false
			}
		}
		if all {
			full++
		}
		return true
	})
	return used, full
}

func TestCapacityBoundary(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	for _, tc := range []struct {
		name     string
		capacity int64
	}{
		{"tiny", 1000},
		{"a sixteenth", d.total / 16},
		{"half", d.total / 2},
		{"all but one byte", d.total - 1},
		{"exactly the dataset", d.total},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), tc.capacity)
			sum := run(t, context.Background(), prefetch.Config{Backend: b, Store: s, Workers: 8})
			wantBytes, wantFiles := nrSimulate(t, b, tc.capacity)
			held, full := cachedBytes(t, s, b, d)
			st := s.Stats()
			switch {
			case st.UsedBytes > tc.capacity:
				t.Fatalf("used %d > capacity %d", st.UsedBytes, tc.capacity)
			case held != wantBytes || full != wantFiles:
				t.Errorf("store holds %d bytes / %d files; NR in path order keeps %d / %d", held, full, wantBytes, wantFiles)
			case sum.CachedBytes != held || sum.CachedFiles != int64(full) || sum.UsedBytes != st.UsedBytes:
				t.Errorf("summary says %d bytes / %d files, used %d; the store holds %d / %d, used %d",
					sum.CachedBytes, sum.CachedFiles, sum.UsedBytes, held, full, st.UsedBytes)
			}
			wantPct := float64(int64(float64(held)*1000/float64(d.total))) / 10
			if sum.PercentBytes != wantPct || sum.PercentBytes > 100*float64(held)/float64(d.total) {
				t.Errorf("percent %.1f, want %.1f (never above the truth)", sum.PercentBytes, wantPct)
			}
			if tc.capacity < d.total {
				if sum.State != prefetch.StateCacheFull || !strings.HasPrefix(sum.Message, "cache full at") {
					t.Errorf("capacity %d < dataset %d: state %q, message %q", tc.capacity, d.total, sum.State, sum.Message)
				}
				if sum.NotFitFiles != int64(len(d.files)-full) || sum.NotFitBytes != d.total-held {
					t.Errorf("not fit %d files / %d bytes, want %d / %d", sum.NotFitFiles, sum.NotFitBytes, len(d.files)-full, d.total-held)
				}
			} else if sum.State != prefetch.StateComplete {
				t.Errorf("capacity = dataset: state %q", sum.State)
			}
			if sum.FetchedBytes != held || sum.FetchedFiles != int64(full) {
				t.Errorf("fetched %d bytes / %d files, want %d / %d", sum.FetchedBytes, sum.FetchedFiles, held, full)
			}
		})
	}
}

// gateBackend lets n reads through, then blocks every other read until its
// context ends; started counts the reads that began.
type gateBackend struct {
	backend.Backend
	allow   int64
	started atomic.Int64
	reached chan struct{} // closed when a read past allow begins
	once    sync.Once
}

func (g *gateBackend) ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error) {
	if g.started.Add(1) > g.allow {
		g.once.Do(func() { close(g.reached) })
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return g.Backend.ReadAt(ctx, path, version, p, off)
}

func TestInterruptedRunIsTruthfulAndResumes(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	cacheDir := t.TempDir()
	s := openStore(t, cacheDir, 2*d.total)
	gate := &gateBackend{Backend: b, allow: 40, reached: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-gate.reached; time.Sleep(50 * time.Millisecond); cancel() }()
	p, err := prefetch.New(prefetch.Config{Backend: gate, Store: s, WholeFileMax: wholeMax, BlockSize: blockSize, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", sum.Message)
	held, full := cachedBytes(t, s, b, d)
	if sum.State != prefetch.StateInterrupted || !strings.HasPrefix(sum.Message, "interrupted at") {
		t.Fatalf("state %q, message %q", sum.State, sum.Message)
	}
	if sum.CachedBytes != held || sum.CachedFiles != int64(full) || held == 0 || held >= d.total {
		t.Errorf("summary says %d bytes / %d files; the store holds %d / %d (dataset %d)", sum.CachedBytes, sum.CachedFiles, held, full, d.total)
	}
	if sum.FailedFiles != 0 {
		t.Errorf("an interruption counted %d failures", sum.FailedFiles)
	}
	if pr := p.Progress(); pr.Phase != prefetch.PhaseDone {
		t.Errorf("phase after Run: %q", pr.Phase)
	}

	// Consistent on disk: no temporary files once the store is closed and
	// reopened, and every entry verifies.
	s.Close()
	s = openStore(t, cacheDir, 2*d.total)
	_ = filepath.WalkDir(cacheDir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			t.Errorf("leftover %s", p)
		}
		return nil
	})
	if h, _ := cachedBytes(t, s, b, d); h != held {
		t.Errorf("after reopening the store holds %d bytes, before %d", h, held)
	}
	if st := s.Stats(); st.CorruptDropped != 0 {
		t.Errorf("%d corrupt entries", st.CorruptDropped)
	}

	again := run(t, context.Background(), prefetch.Config{Backend: b, Store: s})
	if again.State != prefetch.StateComplete || again.AlreadyBytes != held || again.FetchedBytes != d.total-held {
		t.Errorf("rerun: %+v", again)
	}
}

func TestInterruptedWhileListing(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	s := openStore(t, t.TempDir(), d.total)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sum := run(t, ctx, prefetch.Config{Backend: b, Store: s})
	if sum.State != prefetch.StateInterrupted || sum.CachedBytes != 0 || !strings.Contains(sum.Message, "listing") {
		t.Errorf("%+v", sum)
	}
}

func TestManifestAndWalkFormTheSameKeys(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	m := index(t, b)
	s := openStore(t, t.TempDir(), 2*d.total)
	withManifest := run(t, context.Background(), prefetch.Config{Backend: b, Store: s, Manifest: m})
	if withManifest.State != prefetch.StateComplete || !withManifest.Manifest {
		t.Fatalf("%+v", withManifest)
	}
	walked := run(t, context.Background(), prefetch.Config{Backend: b, Store: s})
	if walked.State != prefetch.StateComplete || walked.FetchedBytes != 0 || walked.AlreadyFiles != int64(len(d.files)) {
		t.Errorf("a walk after a manifest prefetch fetched again: %+v", walked)
	}
}

func TestChangedFileFails(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	m := index(t, b)
	victim := d.files[3].Path
	if err := os.WriteFile(filepath.Join(d.dir, victim), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, t.TempDir(), 2*d.total)
	sum := run(t, context.Background(), prefetch.Config{Backend: b, Store: s, Manifest: m})
	if sum.State != prefetch.StateFailed || sum.FailedFiles != 1 || sum.CachedFiles != int64(len(d.files)-1) ||
		len(sum.Errors) != 1 || !strings.Contains(sum.Errors[0], victim) || !strings.HasPrefix(sum.Message, "incomplete at") {
		t.Errorf("%+v", sum)
	}
}

func TestEmptyDataset(t *testing.T) {
	b := backendtest.Open(t, t.TempDir())
	s := openStore(t, t.TempDir(), 1<<20)
	sum := run(t, context.Background(), prefetch.Config{Backend: b, Store: s})
	if sum.State != prefetch.StateComplete || sum.Files != 0 || sum.PercentBytes != 100 {
		t.Errorf("%+v", sum)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	b := backendtest.Open(t, t.TempDir())
	s := openStore(t, t.TempDir(), 1<<20)
	for _, tc := range []struct {
		name string
		cfg  prefetch.Config
		want string
	}{
		{"no backend", prefetch.Config{Store: s}, "required"},
		{"no store", prefetch.Config{Backend: b}, "required"},
		{"tiny block", prefetch.Config{Backend: b, Store: s, BlockSize: 100}, "BlockSize"},
		{"negative whole", prefetch.Config{Backend: b, Store: s, WholeFileMax: -1}, "WholeFileMax"},
		{"negative workers", prefetch.Config{Backend: b, Store: s, Workers: -1}, "Workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := prefetch.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error about %s", err, tc.want)
			}
		})
	}
}

// peakBackend records the most reads in flight at once; the first reads
// wait until want of them are in flight together, and every read yields
// the processor a while before it returns, so that goroutines that may
// start another read get the chance to.
type peakBackend struct {
	backend.Backend
	want     int64
	inflight atomic.Int64
	peak     atomic.Int64
	full     chan struct{}
	once     sync.Once
}

func (b *peakBackend) ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error) {
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1)
	for {
		old := b.peak.Load()
		if n <= old || b.peak.CompareAndSwap(old, n) {
			break
		}
	}
	if n >= b.want {
		b.once.Do(func() { close(b.full) })
	}
	select {
	case <-b.full:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	for range 200 {
		runtime.Gosched()
	}
	return b.Backend.ReadAt(ctx, path, version, p, off)
}

// TestWorkersBoundReads: Workers reads run at once, never more, although
// more goroutines fetch (the others write into the cache).
func TestWorkersBoundReads(t *testing.T) {
	d := makeDataset(t)
	const workers = 3
	b := &peakBackend{Backend: backendtest.Open(t, d.dir), want: workers, full: make(chan struct{})}
	s := openStore(t, t.TempDir(), 2*d.total)
	sum := run(t, context.Background(), prefetch.Config{Backend: b, Store: s, WholeFileMax: wholeMax, BlockSize: blockSize, Workers: workers})
	if sum.State != prefetch.StateComplete {
		t.Fatalf("state %q", sum.State)
	}
	if got := b.peak.Load(); got != workers {
		t.Fatalf("%d reads in flight at the peak, want exactly Workers = %d", got, workers)
	}
	if held, _ := cachedBytes(t, s, b.Backend, d); held != d.total {
		t.Fatalf("store holds %d of %d bytes", held, d.total)
	}
}
