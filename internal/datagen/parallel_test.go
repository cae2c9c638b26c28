package datagen

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestEachParallel: every index once, and after a failure the first error
// is returned and the calls not yet started are skipped.
func TestEachParallel(t *testing.T) {
	var seen [100]atomic.Int32
	if err := eachParallel(len(seen), 4, func(i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("index %d called %d times, want once", i, n)
		}
	}
	boom := errors.New("boom")
	var calls atomic.Int32
	err := eachParallel(10_000, 1, func(i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if n := calls.Load(); n > 10 {
		t.Errorf("%d calls after the 4th failed with one worker, want the rest skipped", n)
	}
}
