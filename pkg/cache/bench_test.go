package cache

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkGetHit measures a hit: index lookup, policy touch and opening
// the entry file (the caller's read of the file is not included).
func BenchmarkGetHit(b *testing.B) {
	for _, pol := range []string{PolicyNR, PolicyLRU, PolicyTinyLFU} {
		b.Run(pol, func(b *testing.B) {
			s := testStore(b, Options{Capacity: 1 << 30, Policy: pol})
			const n = 1024
			var ld countingLoader
			keys := make([]Key, n)
			for i := range keys {
				keys[i] = key(fmt.Sprintf("f%04d", i))
				readResult(b, mustGet(b, s, keys[i], 64<<10, ld.load(keys[i])))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					r, err := s.Get(ctx, keys[i%n], 64<<10, ld.load(keys[i%n]))
					if err != nil || !r.Hit {
						b.Errorf("Get: hit=%v err=%v", r.Hit, err)
						return
					}
					r.File.Close()
					i++
				}
			})
		})
	}
}

// BenchmarkGetMiss measures a miss that is admitted (load into memory,
// tmp file, checksum record, two renames, open) and one that is read
// through (the cache is full).
func BenchmarkGetMiss(b *testing.B) {
	for _, size := range []int64{4 << 10, 1 << 20} {
		for _, tc := range []struct {
			name     string
			capacity int64
		}{{"admit", 1 << 40}, {"readthrough", 1}} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, FormatSize(size)), func(b *testing.B) {
				s := testStore(b, Options{Capacity: tc.capacity})
				ctx := context.Background()
				load := func(_ context.Context, p []byte) error { return nil }
				b.SetBytes(size)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					r, err := s.Get(ctx, key(fmt.Sprintf("m%09d", i)), size, load)
					if err != nil || r.Hit {
						b.Fatalf("Get: hit=%v err=%v", r.Hit, err)
					}
					if r.File != nil {
						r.File.Close()
					}
					i++
				}
			})
		}
	}
}
