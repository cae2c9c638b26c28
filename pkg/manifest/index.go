package manifest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Defaults of IndexOptions.
const (
	DefaultIndexWorkers = 16
	sumChunk            = 4 << 20
)

// IndexOptions configure Index.
type IndexOptions struct {
	// Workers bounds the concurrent List calls (and, with Checksum, the
	// concurrent file reads). Default DefaultIndexWorkers (16).
	Workers int
	// Checksum reads every file and records its sha256 (read with the
	// listed version, so the sum matches the version).
	Checksum bool
	// Progress, when set, is updated as the walk goes; the caller may read
	// it at any time (e.g. to draw a progress bar).
	Progress *Progress
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
	// Now stamps Info.Created. Default time.Now.
	Now func() time.Time
}

// Progress counts the work of an Index call so far. Safe for concurrent use.
type Progress struct {
	Dirs        atomic.Int64 // directories listed
	Files       atomic.Int64 // files found
	Bytes       atomic.Int64 // their total size
	Summed      atomic.Int64 // files checksummed
	SummedBytes atomic.Int64 // bytes read for checksums
}

// IndexStats summarises an Index call.
type IndexStats struct {
	Files   int
	Dirs    int // the root included
	Bytes   int64
	Skipped int64 // names skipped by the backend's listings and by Build
	Elapsed time.Duration
}

// Index walks every directory of b with up to Workers concurrent List
// calls and builds a manifest of every file. The metadata directory
// ".epochfs" at the dataset root is left out. Names the backend skips
// (see source.ValidName) are counted in Skipped.
func Index(ctx context.Context, b backend.Backend, opts IndexOptions) (*Manifest, IndexStats, error) {
	start := time.Now()
	if opts.Workers <= 0 {
		opts.Workers = DefaultIndexWorkers
	}
	if opts.Progress == nil {
		opts.Progress = &Progress{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	skippedBefore := backend.Skipped(b)
	files, dirs, err := walk(ctx, b, opts.Workers, opts.Progress)
	if err != nil {
		return nil, IndexStats{}, err
	}
	if opts.Checksum {
		if err := checksum(ctx, b, files, opts.Workers, opts.Progress); err != nil {
			return nil, IndexStats{}, err
		}
	}
	m, skipped, err := Build(files, BuildOptions{
		Info:   Info{Source: b.ID(), Created: opts.Now(), Checksums: opts.Checksum},
		Dirs:   dirs,
		Logger: opts.Logger,
	})
	if err != nil {
		return nil, IndexStats{}, err
	}
	return m, IndexStats{
		Files:   m.Files(),
		Dirs:    m.Dirs(),
		Bytes:   m.TotalBytes(),
		Skipped: backend.Skipped(b) - skippedBefore + int64(skipped),
		Elapsed: time.Since(start),
	}, nil
}

// walk lists every directory breadth first with up to workers concurrent
// List calls and returns the files and the directories (root excluded).
func walk(ctx context.Context, b backend.Backend, workers int, prog *Progress) ([]File, []string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		queue    = []string{""}
		inflight = 0 // directories popped and being listed
		files    []File
		dirs     []string
		firstErr error
	)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				for len(queue) == 0 && inflight > 0 && firstErr == nil {
					cond.Wait()
				}
				if len(queue) == 0 || firstErr != nil {
					mu.Unlock()
					cond.Broadcast()
					return
				}
				dir := queue[len(queue)-1]
				queue = queue[:len(queue)-1]
				inflight++
				mu.Unlock()

				entries, err := b.List(ctx, dir)

				mu.Lock()
				inflight--
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("manifest: index: list %q: %w", dir, err)
						cancel()
					}
				} else {
					prog.Dirs.Add(1)
					for _, e := range entries {
						p := e.Name
						if dir != "" {
							p = dir + "/" + e.Name
						}
						switch {
						case dir == "" && e.Name == ".epochfs":
							// the dataset's own metadata
						case e.IsDir:
							queue = append(queue, p)
							dirs = append(dirs, p)
						default:
							files = append(files, File{Path: p, Size: e.Size, Version: e.Version})
							prog.Files.Add(1)
							prog.Bytes.Add(e.Size)
						}
					}
				}
				mu.Unlock()
				cond.Broadcast()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("manifest: index: %w", err)
	}
	return files, dirs, nil
}

// checksum reads every file with up to workers concurrent readers and sets
// its Sum.
func checksum(ctx context.Context, b backend.Backend, files []File, workers int, prog *Progress) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, sumChunk)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) || ctx.Err() != nil {
					return
				}
				sum, err := sumFile(ctx, b, files[i], buf, prog)
				if err != nil {
					once.Do(func() {
						firstErr = fmt.Errorf("manifest: index: checksum %q: %w", files[i].Path, err)
						cancel()
					})
					return
				}
				files[i].Sum = sum
				prog.Summed.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func sumFile(ctx context.Context, b backend.Backend, f File, buf []byte, prog *Progress) ([]byte, error) {
	h := sha256.New()
	var off int64
	for off < f.Size {
		want := buf[:min(int64(len(buf)), f.Size-off)]
		n, err := b.ReadAt(ctx, f.Path, f.Version, want, off)
		h.Write(want[:n])
		off += int64(n)
		prog.SummedBytes.Add(int64(n))
		if errors.Is(err, io.EOF) && off < f.Size {
			return nil, fmt.Errorf("%w: file shrank to %d bytes since it was listed", backend.ErrChanged, off)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return h.Sum(nil), nil
}

// Drift is the difference between a manifest and its dataset now.
type Drift struct {
	Missing []string // in the manifest, gone from the dataset (or now a directory)
	New     []string // in the dataset, not in the manifest
	Changed []Change // in both, with another size, version or checksum
}

// Change is one file that differs.
type Change struct {
	Path string
	What string // e.g. "size 10 → 12", "version a → b"
}

// Empty reports no drift.
func (d Drift) Empty() bool { return len(d.Missing)+len(d.New)+len(d.Changed) == 0 }

// Diff compares an older manifest with a newer one (e.g. one just built by
// Index). Checksums are compared when both have them.
func Diff(old, cur *Manifest) Drift {
	var d Drift
	old.Walk(func(i int, p string) bool {
		j, ok := cur.Find(p)
		if !ok || cur.IsDir(j) {
			d.Missing = append(d.Missing, p)
			return true
		}
		var what []string
		if a, b := old.Size(i), cur.Size(j); a != b {
			what = append(what, fmt.Sprintf("size %d → %d", a, b))
		}
		if a, b := old.Version(i), cur.Version(j); a != b {
			what = append(what, fmt.Sprintf("version %s → %s", a, b))
		}
		if a, b := old.Checksum(i), cur.Checksum(j); a != nil && b != nil && string(a) != string(b) {
			what = append(what, fmt.Sprintf("sha256 %x → %x", a, b))
		}
		if what != nil {
			d.Changed = append(d.Changed, Change{Path: p, What: strings.Join(what, ", ")})
		}
		return true
	})
	cur.Walk(func(j int, p string) bool {
		if i, ok := old.Find(p); !ok || old.IsDir(i) {
			d.New = append(d.New, p)
		}
		return true
	})
	return d
}
