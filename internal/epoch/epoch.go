// Package epoch reads a dataset the way a data loader does during one
// training epoch: every file once, whole, in a fresh shuffled order, with N
// parallel readers. It checks each file's sha256 against the expected sums
// when they are given. Used by the demo, the mount tests and the benchmarks.
package epoch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Options for one epoch.
type Options struct {
	Root    string   // directory the paths are relative to
	Paths   []string // slash-separated relative paths; shuffled copy is read
	Workers int      // parallel readers; default 8
	Seed    uint64   // shuffle seed (use the epoch number)
	// Want maps a path to its expected sha256; nil skips verification.
	Want map[string][sha256.Size]byte
	// Open, when set, opens a path instead of os.Open of Root/path: for a
	// dataset read some other way, like GETs from an object store.
	Open func(ctx context.Context, path string) (io.ReadCloser, error)
}

// Result of one epoch.
type Result struct {
	Files   int
	Bytes   int64
	Elapsed time.Duration
	// Mismatches lists paths whose bytes differed from Want.
	Mismatches []string
}

// FilesPerSec is the epoch's file rate.
func (r Result) FilesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Files) / r.Elapsed.Seconds()
}

// Shuffled returns a copy of paths in a seeded random order.
func Shuffled(paths []string, seed uint64) []string {
	out := append([]string(nil), paths...)
	rng := rand.New(rand.NewPCG(seed, 0xda3e39cb94b95bdb))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Run reads every path once. The first read error stops the epoch and is
// returned; a checksum mismatch is recorded and the epoch goes on.
func Run(ctx context.Context, o Options) (Result, error) {
	workers := o.Workers
	if workers <= 0 {
		workers = 8
	}
	order := Shuffled(o.Paths, o.Seed)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu       sync.Mutex
		res      Result
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan string)
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for p := range next {
				n, sum, err := o.readFile(ctx, p, buf)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
						cancel()
					}
				} else {
					res.Files++
					res.Bytes += n
					if want, ok := o.Want[p]; ok && want != sum {
						res.Mismatches = append(res.Mismatches, p)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, p := range order {
		select {
		case next <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	res.Elapsed = time.Since(start)
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return res, firstErr
}

// readFile reads the whole of path and returns its size and sha256.
func (o Options) readFile(ctx context.Context, path string, buf []byte) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	var (
		f   io.ReadCloser
		err error
	)
	if o.Open != nil {
		f, err = o.Open(ctx, path)
	} else {
		path = filepath.Join(o.Root, filepath.FromSlash(path))
		f, err = os.Open(path)
	}
	if err != nil {
		return 0, sum, fmt.Errorf("epoch: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return n, sum, fmt.Errorf("epoch: read %s: %w", path, err)
	}
	h.Sum(sum[:0])
	return n, sum, nil
}

// DropPageCache asks the kernel to drop clean page-cache pages so the next
// epoch measures the cache, not the kernel. It needs root; the error says why
// it failed otherwise.
func DropPageCache() error {
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}
