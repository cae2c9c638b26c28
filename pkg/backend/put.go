package backend

import (
	"context"
	"fmt"
)

// Putter is the one write a Backend may offer: storing a small object at a
// dataset path, replacing it whole (readers see the old bytes or the new,
// never a mix). It exists for metadata kept next to the dataset — the
// manifest at .epochfs/manifest (`cachefs index --upload`) — and is never
// called on the data path: mounts stay read-only. posix and s3 implement it;
// a mirror does not (store the object in each replica).
type Putter interface {
	Put(ctx context.Context, path string, data []byte) error
}

// Put stores data at p in b, or in the first Backend b wraps that is a
// Putter. Errors: ErrUnsupported when none is, ErrInvalidPath,
// ErrPermission.
func Put(ctx context.Context, b Backend, p string, data []byte) error {
	if pt, ok := as[Putter](b); ok {
		return pt.Put(ctx, p, data)
	}
	return fmt.Errorf("put %q: %w: this source cannot store objects (a mirror: store it in each replica)", p, ErrUnsupported)
}
