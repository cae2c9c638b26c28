package cache

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/epochfs/epochfs/pkg/units"
)

// BenchmarkGetHit measures a hit: index lookup, policy touch and opening
// the entry file (the caller's read of the file is not included).
func BenchmarkGetHit(b *testing.B) {
	b.Run(PolicyNR, func(b *testing.B) {
		s := testStore(b, Options{Capacity: 1 << 30})
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

// BenchmarkGetMiss measures a miss that is admitted (load into memory,
// tmp file with the checksum in its xattr, one rename, open; "admit-sidecar":
// the checksum in a .sum sidecar, i.e. two tmp files and two renames, the
// format of filesystems without user xattrs) and one that is read through
// (the cache is full). The loader does not touch the buffer, so the cost
// is the store's alone.
func BenchmarkGetMiss(b *testing.B) {
	for _, size := range []int64{4 << 10, 128 << 10, 1 << 20} {
		for _, tc := range []struct {
			name     string
			capacity int64
			sidecar  bool
		}{{"admit", 1 << 40, false}, {"admit-sidecar", 1 << 40, true}, {"readthrough", 1, false}} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, units.FormatSize(size)), func(b *testing.B) {
				s := testStore(b, Options{Capacity: tc.capacity, sidecar: tc.sidecar})
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

// BenchmarkFill measures what a prefetch costs the store per entry: Fill
// of a new key (load, write, no open), with both record formats, on 2
// goroutines per CPU like parallel prefetch workers.
func BenchmarkFill(b *testing.B) {
	for _, size := range []int64{128 << 10} {
		for _, f := range formats {
			b.Run(fmt.Sprintf("%s/%s", f.name, units.FormatSize(size)), func(b *testing.B) {
				s := testStore(b, Options{Capacity: 1 << 40, sidecar: f.sidecar})
				ctx := context.Background()
				load := func(_ context.Context, p []byte) error { return nil }
				var n atomic.Int64
				b.SetBytes(size)
				b.ReportAllocs()
				b.SetParallelism(2)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r, err := s.Fill(ctx, key(fmt.Sprintf("m%09d", n.Add(1))), size, load)
						if err != nil || !r.Cached {
							b.Errorf("Fill: %+v %v", r, err)
							return
						}
					}
				})
			})
		}
	}
}
