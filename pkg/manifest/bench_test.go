package manifest

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Version kinds of genFiles.
const (
	kindETag = "etag" // S3 ETags: 32 distinct hex digits
	// posix versions of builds before the ctime and inode:
	// "MTIMENANOS-SIZE" (tag 2).
	kindPosixMtime = "posix-mtime-size"
	// posix "MTIMENANOS-SIZE-CTIMENANOS-INO" (tag 5) of files written
	// in place or renamed into place: the ctime 0–5 ms after the mtime,
	// ext4-like inode numbers (~12M, 4 varint bytes).
	kindPosixWritten = "posix-ctime-ino-written"
	// the same for files extracted from an archive (tar x, rsync -t, cp
	// -p): the mtime from the archive, years before the ctime (the
	// extraction time).
	kindPosixExtracted = "posix-ctime-ino-extracted"
)

var versionKinds = []string{kindETag, kindPosixMtime, kindPosixWritten, kindPosixExtracted}

// genFiles returns n ImageNet-like files in 1000 class directories, with
// versions of the given kind.
func genFiles(n int, kind string) []File {
	files := make([]File, n)
	for i := range files {
		size := int64(16_000 + (i*7919)%500_000)
		mtime := int64(1_700_000_000_000_000_000) + int64(i)*1_000_003
		ino := uint64(12_345_678 + i)
		var v string
		switch kind {
		case kindETag:
			v = fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i)*0xbf58476d1ce4e5b9)
		case kindPosixMtime:
			v = fmt.Sprintf("%d-%d", mtime, size)
		case kindPosixWritten:
			v = fmt.Sprintf("%d-%d-%d-%d", mtime, size, mtime+int64(i*7919)%5_000_000, ino)
		case kindPosixExtracted:
			mtime = 1_300_000_000_000_000_000 + int64(i)*86_400_000_003 // a day apart
			ctime := int64(1_764_000_000_000_000_000) + int64(i)*20_011 // 50k files/s
			v = fmt.Sprintf("%d-%d-%d-%d", mtime, size, ctime, ino)
		default:
			panic(kind)
		}
		files[i] = File{Path: fmt.Sprintf("train/n%08d/n%08d_%d.JPEG", i%1000, i%1000, i), Size: size, Version: v}
	}
	return files
}

// TestOverheadPerFile1M builds a 1M-file manifest of each version kind and
// reports its size on disk and the memory it holds beyond the name bytes,
// per file; the goal is at most 100 B/file.
func TestOverheadPerFile1M(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("1M-file manifest skipped in -short mode and under -race")
	}
	for _, kind := range versionKinds {
		files := genFiles(1_000_000, kind)
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
		t.Logf("%-26s %d files, build %v, load %v, %.1f B/file on disk, names %.1f B/file, in memory %.1f B/file (overhead beyond the names %.1f)",
			kind+":", m.Files(), built.Round(time.Millisecond), loaded.Round(time.Millisecond),
			float64(len(data))/float64(m.Files()), float64(m.NameBytes())/float64(m.Files()),
			float64(m.MemoryBytes())/float64(m.Files()), per)
		if per > 100 {
			t.Errorf("%.1f B/file of overhead, goal ≤ 100", per)
		}
	}
}

func BenchmarkLoad1M(b *testing.B) {
	for _, kind := range versionKinds {
		b.Run(kind, func(b *testing.B) {
			m, _, err := Build(genFiles(1_000_000, kind), BuildOptions{Info: Info{Source: "s3://bench/"}})
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
	files := genFiles(1_000_000, kindPosixWritten)
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
