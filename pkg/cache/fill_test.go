package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestFill: Fill admits like a miss of Get but counts no lookup and opens
// nothing; a later Get hits what it filled.
func TestFill(t *testing.T) {
	s := testStore(t, Options{Capacity: 10_000})
	var ld countingLoader
	a, b, big := key("a"), key("b"), key("big")
	ctx := context.Background()

	tests := []struct {
		name  string
		key   Key
		size  int64
		want  FillResult
		loads int64
	}{
		{"miss, admitted", a, 4000, FillResult{Cached: true, Loaded: true, Prefetched: true}, 1},
		{"held: nothing to do", a, 4000, FillResult{Cached: true}, 0},
		{"second entry", b, 5000, FillResult{Cached: true, Loaded: true, Prefetched: true}, 1},
		{"does not fit: read, not admitted", big, 2000, FillResult{Loaded: true}, 1},
	}
	for _, tt := range tests {
		ld.calls.Store(0)
		got, err := s.Fill(ctx, tt.key, tt.size, ld.load(tt.key))
		if err != nil || got != tt.want || ld.calls.Load() != tt.loads {
			t.Fatalf("%s: Fill = %+v, %v with %d loads; want %+v with %d loads", tt.name, got, err, ld.calls.Load(), tt.want, tt.loads)
		}
	}
	want := Stats{Entries: 2, UsedBytes: 9000, CapacityBytes: 10_000, Admissions: 2, Rejections: 1, Policy: PolicyNR,
		PrefetchFills: 2, PrefetchFillBytes: 9000}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats after fills:\n got %+v\nwant %+v", got, want)
	}
	for _, k := range []Key{a, b} {
		size := map[Key]int64{a: 4000, b: 5000}[k]
		r := mustGet(t, s, k, size, failLoader(t))
		if !r.Hit {
			t.Fatalf("Get(%s) after Fill: not a hit", k)
		}
		checkBytes(t, k, readResult(t, r), size)
	}
	if st := s.Stats(); st.Hits != 2 || st.Misses != 0 || st.HitBytes != 9000 || st.PrefetchedHits != 2 || st.PrefetchedHitBytes != 9000 {
		t.Fatalf("Stats after Gets: %+v, want 2 hits of 9000 bytes, both prefetched", st)
	}
	// A second lookup of a prefetched entry is a hit, no longer a
	// prefetched one; an entry a Get admitted is never one.
	mustGet(t, s, a, 4000, failLoader(t)).File.Close()
	c := key("c")
	mustGet(t, s, c, 500, ld.load(c)).File.Close()
	mustGet(t, s, c, 500, failLoader(t)).File.Close()
	if st := s.Stats(); st.Hits != 4 || st.PrefetchedHits != 2 || st.PrefetchFills != 2 || st.Admissions != 3 {
		t.Fatalf("Stats after more Gets: %+v, want 4 hits, 2 prefetched, 2 prefetch fills of 3 admissions", st)
	}
}

func TestFillErrors(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	k := key("f")
	boom := errors.New("boom")
	ctx := context.Background()
	tests := []callCase{
		{"negative size", k, -1, func(context.Context, []byte) error { return nil }, "cache: fill " + k.String() + ": negative size -1"},
		{"nil loader", k, 1, nil, "cache: fill " + k.String() + ": nil loader"},
		{"load error", k, 10, func(context.Context, []byte) error { return boom }, "cache: load " + k.String() + ": boom"},
	}
	for _, tt := range tests {
		got, err := s.Fill(ctx, tt.key, tt.size, tt.load)
		if err == nil || err.Error() != tt.want || got != (FillResult{}) {
			t.Errorf("%s: %+v, %v; want error %q", tt.name, got, err, tt.want)
		}
	}
	if st := s.Stats(); st.LoadErrors != 1 || st.Misses != 0 || st.Entries != 0 {
		t.Fatalf("Stats: %+v", st)
	}
	s.Close()
	if _, err := s.Fill(ctx, k, 10, func(context.Context, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fill after Close: %v, want ErrClosed", err)
	}
}

// TestFillCoalescesWithGet: concurrent Fills and Gets of one key share one
// load; only the Gets count (misses).
func TestFillCoalescesWithGet(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	k := key("f")
	release, loading := make(chan struct{}), make(chan struct{}, 8)
	var ld countingLoader
	load := func(ctx context.Context, p []byte) error {
		loading <- struct{}{}
		<-release
		return ld.load(k)(ctx, p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				r, err := s.Fill(context.Background(), k, 50_000, load)
				if err == nil && r != (FillResult{Cached: true, Loaded: true}) && r != (FillResult{Cached: true, Loaded: true, Prefetched: true}) && r != (FillResult{Cached: true}) {
					err = fmt.Errorf("Fill: %+v", r)
				}
				errs <- err
				return
			}
			r, err := s.Get(context.Background(), k, 50_000, load)
			if err == nil {
				if r.File == nil {
					err = errors.New("Get: no file")
				} else {
					r.File.Close()
				}
			}
			errs <- err
		}()
	}
	<-loading // one fill is loading; callers that come later join it (or hit)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if ld.calls.Load() != 1 || st.Admissions != 1 || st.Hits+st.Misses != 4 {
		t.Fatalf("%d loads, Stats %+v; want 1 load, 1 admission, 4 counted lookups (the Gets)", ld.calls.Load(), st)
	}
}

// TestReadThroughDataNotReused: bytes read through (not admitted) belong to
// the caller; later fills, which reuse the store's buffers, never change
// them. Both ways of reading through: a failed write (the buffer was
// taken for an admission) and a full cache.
func TestReadThroughDataNotReused(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	var ld countingLoader
	broken := key("broken")
	breakShard(t, dir, broken)
	const size = 30_000
	check := func(k Key, r Result) []byte {
		if r.File != nil || r.Data == nil {
			t.Fatalf("%s: want read-through Data", k)
		}
		return r.Data
	}
	kept := map[Key][]byte{broken: check(broken, mustGet(t, s, broken, size, ld.load(broken)))}
	for i := 0; s.Stats().Admissions < 30; i++ {
		k := key(fmt.Sprint(i))
		if k.id()[:2] != broken.id()[:2] {
			readResult(t, mustGet(t, s, k, size, ld.load(k)))
		}
	}
	for i := 0; s.Stats().UsedBytes+size <= 1<<20; i++ {
		k := key(fmt.Sprint("fill", i))
		if k.id()[:2] != broken.id()[:2] {
			readResult(t, mustGet(t, s, k, size, ld.load(k)))
		}
	}
	full := key("full")
	kept[full] = check(full, mustGet(t, s, full, size, ld.load(full)))
	for i := range 30 {
		k := key(fmt.Sprint("more", i))
		readResult(t, mustGet(t, s, k, size, ld.load(k)))
	}
	for k, b := range kept {
		if !bytes.Equal(b, content(k, size)) {
			t.Fatalf("read-through bytes of %s changed after later fills", k)
		}
	}
	if st := s.Stats(); st.WriteErrors != 1 {
		t.Fatalf("Stats %+v, want 1 write error", st)
	}
}

// TestLoaderGetsFullBuffer: whatever the pooled buffer's size class, the
// Loader gets exactly the entry's size, and the entry holds what it loaded.
func TestLoaderGetsFullBuffer(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	for i, size := range []int64{1, 4095, 4096, 4097, 70_000, 1 << 20} {
		k := key(fmt.Sprint(i))
		load := func(_ context.Context, p []byte) error {
			if int64(len(p)) != size {
				return fmt.Errorf("len(p) = %d, want %d", len(p), size)
			}
			fill(k, p)
			return nil
		}
		r := mustGet(t, s, k, size, load)
		checkBytes(t, k, readResult(t, r), size)
	}
}

func TestBufClass(t *testing.T) {
	tests := []struct {
		size int64
		want int
	}{
		{0, -1}, {1, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {1 << 20, 8}, {1<<20 + 1, 9},
		{1 << maxBufShift, maxBufShift - minBufShift}, {1<<maxBufShift + 1, -1},
	}
	for _, tt := range tests {
		if got := bufClass(tt.size); got != tt.want {
			t.Errorf("bufClass(%d) = %d, want %d", tt.size, got, tt.want)
		}
		if tt.want >= 0 {
			b := getBuf(tt.size)
			if int64(len(b)) != tt.size || cap(b) != 1<<(tt.want+minBufShift) {
				t.Errorf("getBuf(%d): len %d cap %d", tt.size, len(b), cap(b))
			}
			putBuf(b)
		}
	}
}

// TestBufFreeListBounded: returned buffers are reused, and the free lists
// never hold more than maxPooledBytes.
func TestBufFreeListBounded(t *testing.T) {
	b := getBuf(100 << 10)
	p := &b[:1][0]
	putBuf(b)
	if c := getBuf(120 << 10); &c[:1][0] != p {
		t.Error("a returned buffer of the same class was not reused")
	} else {
		putBuf(c)
	}
	var held [][]byte
	for range 2 * maxPooledBytes / (8 << 20) {
		held = append(held, getBuf(8<<20))
	}
	for _, b := range held {
		putBuf(b)
	}
	if n := pooledBytes(); n > maxPooledBytes || n < maxPooledBytes/2 {
		t.Errorf("free lists hold %d bytes after returning %d, bound %d", n, len(held)*(8<<20), maxPooledBytes)
	}
}
