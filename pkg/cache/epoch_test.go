package cache

import (
	"context"
	"fmt"
	"testing"
)

// TestEpochs: with the dataset's size set, the store counts its lookups in
// epochs of that many bytes and reports the current epoch's hit, miss and
// prefetched-hit bytes: under NR with room for half the dataset, epoch 1
// misses everything, epoch 2 hits the half it admitted.
func TestEpochs(t *testing.T) {
	const files, size = 10, 1000
	s := testStore(t, Options{Capacity: files * size / 2})
	if st := s.Stats(); st.Epoch != 0 {
		t.Fatalf("epoch %d before SetEpochBytes, want 0 (unknown)", st.Epoch)
	}
	s.SetEpochBytes(files * size)
	var ld countingLoader
	ctx := context.Background()
	// One file filled by a prefetch: its first lookup is a prefetched hit.
	pre := key("f0")
	if _, err := s.Fill(ctx, pre, size, ld.load(pre)); err != nil {
		t.Fatal(err)
	}
	read := func(from, to int) {
		for i := from; i < to; i++ {
			k := key(fmt.Sprintf("f%d", i))
			r, err := s.Get(ctx, k, size, ld.load(k))
			if err != nil {
				t.Fatal(err)
			}
			readResult(t, r)
		}
	}
	// Epoch 1: f0 prefetched (a hit), f1-f4 admitted, f5-f9 read through;
	// its last lookup crosses D and starts epoch 2, empty.
	read(0, files)
	if st := s.Stats(); st.HitBytes != size || st.MissBytes != 9*size || st.PrefetchedHitBytes != size ||
		st.Epoch != 2 || st.EpochHitBytes+st.EpochMissBytes != 0 {
		t.Fatalf("after epoch 1: %+v, want hit %d, miss %d, prefetched %d bytes, and epoch 2 empty", st, size, 9*size, size)
	}
	// Epochs 2 and 3: f0-f4 hit (none prefetched any more), f5-f9 miss.
	for e := int64(2); e <= 3; e++ {
		read(0, files)
		if st := s.Stats(); st.Epoch != e+1 {
			t.Fatalf("after epoch %d: epoch %d, want %d", e, st.Epoch, e+1)
		}
	}
	// Half an epoch in: its numbers are what it has read so far.
	read(0, files/2)
	st := s.Stats()
	if st.Epoch != 4 || st.EpochHitBytes != 5*size || st.EpochMissBytes != 0 || st.EpochPrefetchedHitBytes != 0 {
		t.Errorf("half of epoch 4: epoch %d, hit %d, miss %d, prefetched %d; want 4, %d, 0, 0", st.Epoch, st.EpochHitBytes, st.EpochMissBytes, st.EpochPrefetchedHitBytes, 5*size)
	}
	read(files/2, files-1)
	st = s.Stats()
	if st.Epoch != 4 || st.EpochHitBytes != 5*size || st.EpochMissBytes != 4*size {
		t.Errorf("epoch 4 but its last file: epoch %d, hit %d, miss %d; want 4, %d, %d", st.Epoch, st.EpochHitBytes, st.EpochMissBytes, 5*size, 4*size)
	}
}
