package datagen

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sync/errgroup"
)

// makeDirs creates under dir the parent directory of every slash-separated
// relative path, each once.
func makeDirs(dir string, paths []string) error {
	made := map[string]bool{}
	for _, p := range paths {
		d := path.Dir(p)
		if made[d] {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			return fmt.Errorf("datagen: %w", err)
		}
		made[d] = true
	}
	return nil
}

// eachParallel calls fn(0) … fn(n-1) on up to workers goroutines (at least
// one) and returns the first error; once one failed, the calls not yet
// started are skipped.
func eachParallel(n, workers int, fn func(i int) error) error {
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(max(workers, 1))
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}
