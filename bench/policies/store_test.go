package policies

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/cache"
)

func key(path string) cache.Key { return cache.Key{Dataset: "sim://ds", Path: path, Version: "v1"} }

// get gets key through s and checks its bytes; it reports whether it hit.
func get(t testing.TB, s *cache.Store, k cache.Key, size int64) bool {
	t.Helper()
	r, err := s.Get(context.Background(), k, size, load(k))
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	got := r.Data
	if r.File != nil {
		got, err = io.ReadAll(r.File)
		r.File.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]byte, size)
	content(k, want)
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s): %d bytes that differ from the loaded ones", k, len(got))
	}
	return r.Hit
}

// TestNew: every name builds its policy; another name is an error.
func TestNew(t *testing.T) {
	for _, name := range Names() {
		p, err := New(name, 1<<20, 0)
		if err != nil || p.Name() != name {
			t.Fatalf("New(%q): %v, %v", name, p, err)
		}
	}
	if _, err := New("arc", 1, 0); err == nil || !strings.Contains(err.Error(), `unknown policy "arc"`) {
		t.Fatalf("New(arc): %v", err)
	}
}

// TestStoreWithPolicies runs a Store with each policy: a miss then a hit,
// a reopen with a smaller capacity (the replacing policies evict down to
// it at Open), concurrent Gets over a small capacity (entries evicted while
// others are written, used bytes exact), and Close stopping the policy's
// goroutines.
func TestStoreWithPolicies(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			dir := t.TempDir()
			s := openStore(t, dir, name, 100_000)
			if get(t, s, key("a"), 2000) || !get(t, s, key("a"), 2000) {
				t.Fatal("want a miss, then a hit")
			}
			for i := range 49 {
				get(t, s, key(fmt.Sprintf("f%02d", i)), 2000)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = openStore(t, dir, name, 30_000)
			st := s.Stats()
			switch {
			case st.Policy != name:
				t.Fatalf("Stats.Policy %q", st.Policy)
			case name == cache.PolicyNR && (st.Entries != 50 || st.Evictions != 0):
				t.Fatalf("NR after shrink: %+v, want all 50 entries kept", st)
			case name != cache.PolicyNR && (st.UsedBytes > 30_000 || st.Evictions != 50-st.Entries):
				t.Fatalf("%s after shrink: %+v, want used <= 30000", name, st)
			}

			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 200 {
						n := (i*7 + g*13) % 60
						get(t, s, key(fmt.Sprintf("c%d", n)), int64(1000+n*100))
					}
				})
			}
			wg.Wait()
			info, err := cache.ReadInfo(dir)
			if st := s.Stats(); err != nil || info.UsedBytes != st.UsedBytes || info.Entries != st.Entries || info.TempFiles != 0 ||
				(name != cache.PolicyNR && st.UsedBytes > st.CapacityBytes) {
				t.Fatalf("after concurrent Gets: stats %+v, disk %+v, %v", st, info, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d goroutines before, %d after Close", before, runtime.NumGoroutine())
				}
			}
		})
	}
}
