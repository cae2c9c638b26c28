// Package datagen generates deterministic image-like datasets: class
// directories holding files whose sizes follow a log-normal distribution
// clamped to [MinSize, MaxSize], like ImageNet's JPEGs (median ≈ 110 KB).
//
// The same Spec always yields the same names, sizes and bytes, so a test or
// benchmark can regenerate a file's expected content instead of storing it.
// The package writes to a local directory; uploading to S3 is the caller's
// business (it knows nothing of backends or caches).
package datagen

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Spec describes a dataset. Zero fields take the documented defaults.
type Spec struct {
	Files   int    // number of files; default 2000
	Classes int    // number of class directories; default 20
	Seed    uint64 // RNG seed; default 1
	// MedianSize is the log-normal median in bytes; default 110 KB.
	MedianSize int64
	// Sigma is the log-normal shape; default 0.9 (mean ≈ 1.5 × median).
	Sigma float64
	// MinSize and MaxSize clamp sizes; defaults 16 KB and 5 MB.
	MinSize, MaxSize int64
	// TotalBytes, when > 0, replaces MedianSize by the median that brings
	// the dataset's total size closest to TotalBytes (sizes keep the
	// MinSize..MaxSize clamps, so it must lie in [Files×MinSize,
	// Files×MaxSize]). The draws do not depend on the median, so the same
	// Seed and TotalBytes always give the same files.
	TotalBytes int64
}

// File is one generated file.
type File struct {
	Path string // slash-separated, relative to the dataset root
	Size int64
	Seed uint64 // content seed; Content(Seed, Size) yields the bytes
}

func (s Spec) withDefaults() Spec {
	s.Files = cmp.Or(s.Files, 2000)
	s.Classes = cmp.Or(s.Classes, 20)
	s.Seed = cmp.Or(s.Seed, 1)
	s.MedianSize = cmp.Or(s.MedianSize, 110_000)
	s.Sigma = cmp.Or(s.Sigma, 0.9)
	s.MinSize = cmp.Or(s.MinSize, 16_000)
	s.MaxSize = cmp.Or(s.MaxSize, 5_000_000)
	return s
}

// Validate reports a spec that cannot be generated.
func (s Spec) Validate() error {
	s = s.withDefaults()
	switch {
	case s.Files < 0 || s.Classes < 0:
		return errors.New("datagen: files and classes must be positive")
	case s.MinSize < 0 || s.MaxSize < s.MinSize:
		return fmt.Errorf("datagen: size range [%d, %d] is empty", s.MinSize, s.MaxSize)
	case s.Sigma < 0:
		return errors.New("datagen: sigma must be positive")
	case s.TotalBytes < 0:
		return errors.New("datagen: total bytes must be positive")
	case s.TotalBytes > 0 && (s.TotalBytes < int64(s.Files)*s.MinSize || s.TotalBytes > int64(s.Files)*s.MaxSize):
		return fmt.Errorf("datagen: %d files of %d..%d bytes cannot total %d bytes (want %d..%d)",
			s.Files, s.MinSize, s.MaxSize, s.TotalBytes, int64(s.Files)*s.MinSize, int64(s.Files)*s.MaxSize)
	}
	return nil
}

// draw is one file's random draws: its normal deviate and content seed.
type draw struct {
	z    float64
	seed uint64
}

func (s Spec) draws() []draw {
	rng := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	ds := make([]draw, s.Files)
	for i := range ds {
		ds[i].z = rng.NormFloat64()
		ds[i].seed = rng.Uint64()
	}
	return ds
}

func (s Spec) size(median int64, z float64) int64 {
	size := int64(math.Exp(math.Log(float64(median)) + s.Sigma*z))
	return min(max(size, s.MinSize), s.MaxSize)
}

// Median returns the log-normal median the dataset is drawn with:
// MedianSize (or its default), or the one solved for TotalBytes.
func (s Spec) Median() int64 {
	s = s.withDefaults()
	if s.TotalBytes <= 0 {
		return s.MedianSize
	}
	return s.solveMedian(s.draws())
}

// solveMedian returns the median whose total is closest to TotalBytes.
// The total grows with the median, so a binary search finds it.
func (s Spec) solveMedian(ds []draw) int64 {
	total := func(m int64) int64 {
		var n int64
		for _, d := range ds {
			n += s.size(m, d.z)
		}
		return n
	}
	lo, hi := int64(1), s.MaxSize*1000 // total(hi) is Files×MaxSize for any sane Sigma
	for lo < hi {
		mid := lo + (hi-lo)/2
		if total(mid) < s.TotalBytes {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo > 1 && s.TotalBytes-total(lo-1) < total(lo)-s.TotalBytes {
		lo--
	}
	return lo
}

// Plan returns the files of the dataset, in generation order. It does not
// touch the disk.
func (s Spec) Plan() []File {
	s = s.withDefaults()
	ds := s.draws()
	median := s.MedianSize
	if s.TotalBytes > 0 {
		median = s.solveMedian(ds)
	}
	files := make([]File, s.Files)
	for i, d := range ds {
		files[i] = File{
			Path: fmt.Sprintf("n%08d/img_%07d.jpg", i%s.Classes, i),
			Size: s.size(median, d.z),
			Seed: d.seed,
		}
	}
	return files
}

// Sizes returns the sizes of the dataset's files, in generation order (the
// Size of every file of Plan), without building their paths: for listings
// of millions of files that never reach a disk.
func (s Spec) Sizes() []int64 {
	s = s.withDefaults()
	ds := s.draws()
	median := s.MedianSize
	if s.TotalBytes > 0 {
		median = s.solveMedian(ds)
	}
	sizes := make([]int64, len(ds))
	for i, d := range ds {
		sizes[i] = s.size(median, d.z)
	}
	return sizes
}

// Reader returns a reader of a file's content: size bytes from a ChaCha8
// stream keyed by seed (incompressible, like JPEG data).
func Reader(seed uint64, size int64) io.Reader {
	var key [32]byte
	for i := range 4 {
		v := seed*0x9e3779b97f4a7c15 + uint64(i)
		for j := range 8 {
			key[i*8+j] = byte(v >> (8 * j))
		}
	}
	return io.LimitReader(rand.NewChaCha8(key), size)
}

// Content returns a file's bytes.
func Content(f File) []byte {
	b := make([]byte, f.Size)
	_, _ = io.ReadFull(Reader(f.Seed, f.Size), b)
	return b
}

// Sum returns the sha256 of a file's content without keeping it in memory.
func Sum(f File) [sha256.Size]byte {
	h := sha256.New()
	_, _ = io.Copy(h, Reader(f.Seed, f.Size))
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Write generates the dataset under dir (created if missing) and returns its
// files. Existing files are overwritten.
func Write(dir string, s Spec) ([]File, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	files := s.Plan()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("datagen: %w", err)
		}
		if err := writeFile(p, f); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// WriteParallel is Write with up to workers files written at once: for
// datasets of a million small files, where Write's one file at a time is
// bound by the create/close round trips.
func WriteParallel(dir string, s Spec, workers int) ([]File, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	files := s.Plan()
	if err := makeDirs(dir, Paths(files)); err != nil {
		return nil, err
	}
	err := eachParallel(len(files), workers, func(i int) error {
		return writeFile(filepath.Join(dir, filepath.FromSlash(files[i].Path)), files[i])
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

func writeFile(p string, f File) error {
	out, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("datagen: %w", err)
	}
	if _, err := io.Copy(out, Reader(f.Seed, f.Size)); err != nil {
		out.Close()
		return fmt.Errorf("datagen: write %s: %w", p, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("datagen: close %s: %w", p, err)
	}
	return nil
}

// TotalSize returns the sum of the files' sizes.
func TotalSize(files []File) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

// Paths returns the files' paths, in the files' order.
func Paths(files []File) []string {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	return paths
}

// Sums returns every file's sha256 (Sum) by path, what a reader of the
// dataset checks its bytes against.
func Sums(files []File) map[string][sha256.Size]byte {
	m := make(map[string][sha256.Size]byte, len(files))
	for _, f := range files {
		m[f.Path] = Sum(f)
	}
	return m
}

// SumsParallel is Sums computed by up to workers goroutines.
func SumsParallel(files []File, workers int) map[string][sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(files))
	var wg sync.WaitGroup
	var next atomic.Int64
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(files); i = int(next.Add(1) - 1) {
				sums[i] = Sum(files[i])
			}
		}()
	}
	wg.Wait()
	m := make(map[string][sha256.Size]byte, len(files))
	for i, f := range files {
		m[f.Path] = sums[i]
	}
	return m
}
