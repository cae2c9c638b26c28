package cache

import (
	"context"
	"sync"
	"testing"
)

// TestGetNoAdmit: bytes another cache peer owns are served but never
// admitted, coalesced, counted as misses; a key already held is a hit.
func TestGetNoAdmit(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	var ld countingLoader
	k := Key{Dataset: "d", Path: "other/peer.jpg", Version: "v"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.GetNoAdmit(context.Background(), k, 1000, ld.load(k))
			if err != nil {
				t.Error(err)
				return
			}
			if r.File != nil || r.Hit {
				t.Error("a non-admitted Get returned a cache file or a hit")
			}
			checkBytes(t, k, readResult(t, r), 1000)
		}()
	}
	wg.Wait()
	st := s.Stats()
	if st.Entries != 0 || st.UsedBytes != 0 || st.Admissions != 0 || st.Rejections != 0 || st.Misses != 8 || st.MissBytes != 8000 {
		t.Errorf("stats %+v: want nothing admitted or rejected, 8 misses", st)
	}
	if n := ld.calls.Load(); n < 1 || n > 8 {
		t.Errorf("%d loads", n)
	}
	// Held (cached before): a hit.
	own := Key{Dataset: "d", Path: "mine.jpg", Version: "v"}
	mustGet(t, s, own, 500, ld.load(own))
	r, err := s.GetNoAdmit(context.Background(), own, 500, failLoader(t))
	if err != nil || !r.Hit {
		t.Fatalf("GetNoAdmit of a held key: hit %v, %v", r.Hit, err)
	}
	checkBytes(t, own, readResult(t, r), 500)
}
