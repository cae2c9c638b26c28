package posix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"strconv"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Put writes data to a temporary file in p's directory (created as needed)
// and renames it over p, all inside the dataset root.
func (b *posixBackend) Put(ctx context.Context, p string, data []byte) error {
	p, err := backend.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("posix: put: %w: the root is a directory", backend.ErrInvalidPath)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("posix: put %q: %w", p, err)
	}
	if dir := path.Dir(p); dir != "." {
		if err := b.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("posix: put %q: %w", p, mapPosixErr(err))
		}
	}
	tmp := p + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
	if err := b.root.WriteFile(tmp, data, 0o644); err != nil {
		_ = b.root.Remove(tmp)
		return fmt.Errorf("posix: put %q: %w", p, mapPosixErr(err))
	}
	if err := b.root.Rename(tmp, p); err != nil {
		_ = b.root.Remove(tmp)
		return fmt.Errorf("posix: put %q: %w", p, mapPosixErr(err))
	}
	return nil
}

var _ backend.Putter = (*posixBackend)(nil)
