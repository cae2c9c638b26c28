package manifest

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// genFiles returns n ImageNet-like files in 1000 class directories, with
// posix versions (MTIMENANOS-SIZE) or S3 ETags (32 hex digits).
func genFiles(n int, etags bool) []File {
	files := make([]File, n)
	for i := range files {
		size := int64(16_000 + (i*7919)%500_000)
		v := strconv.FormatInt(1_700_000_000_000_000_000+int64(i)*1_000_003, 10) + "-" + strconv.FormatInt(size, 10)
		if etags {
			v = fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i)*0xbf58476d1ce4e5b9)
		}
		files[i] = File{Path: fmt.Sprintf("train/n%08d/n%08d_%d.JPEG", i%1000, i%1000, i), Size: size, Version: v}
	}
	return files
}

// TestOverheadPerFile1M builds a 1M-file manifest and reports its size on
// disk and the memory it holds beyond the name bytes, per file; the goal is
// at most 100 B/file.
func TestOverheadPerFile1M(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("1M-file manifest skipped in -short mode and under -race")
	}
	for _, etags := range []bool{false, true} {
		files := genFiles(1_000_000, etags)
		start := time.Now()
		m, _, err := Build(files, BuildOptions{Info: Info{Source: "s3://bench/"}})
		if err != nil {
			t.Fatal(err)
		}
		built := time.Since(start)
		data := mustEncode(t, m)
		start = time.Now()
		if _, err := Load(data); err != nil {
			t.Fatal(err)
		}
		loaded := time.Since(start)
		per := float64(m.OverheadBytes()) / float64(m.Files())
		t.Logf("etags=%v: %d files, build %v, load %v, %.1f B/file on disk, names %.1f B/file, overhead %.1f B/file in memory",
			etags, m.Files(), built.Round(time.Millisecond), loaded.Round(time.Millisecond),
			float64(len(data))/float64(m.Files()), float64(m.NameBytes())/float64(m.Files()), per)
		if per > 100 {
			t.Errorf("%.1f B/file of overhead, goal ≤ 100", per)
		}
	}
}

func BenchmarkLoad1M(b *testing.B) {
	for _, etags := range []bool{false, true} {
		b.Run(fmt.Sprintf("etags=%v", etags), func(b *testing.B) {
			m, _, err := Build(genFiles(1_000_000, etags), BuildOptions{Info: Info{Source: "s3://bench/"}})
			if err != nil {
				b.Fatal(err)
			}
			data := mustEncode(b, m)
			runtime.GC()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := Load(data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data))/1e6, "disk-B/file")
			b.ReportMetric(float64(m.OverheadBytes())/1e6, "mem-overhead-B/file")
		})
	}
}

func BenchmarkLookup1M(b *testing.B) {
	files := genFiles(1_000_000, false)
	m, _, err := Build(files, BuildOptions{Info: Info{Source: "s"}})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, ok := m.Find(files[i%len(files)].Path); !ok {
			b.Fatal("not found")
		}
		i += 7919
	}
}
