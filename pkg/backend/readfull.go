package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ReadFull reads exactly len(p) bytes of the file at path, version
// version, from off: b.ReadAt, with a short read (the file ended before p
// was full: it shrank, or the caller's size is stale) turned into an error
// wrapping io.ErrUnexpectedEOF, and an io.EOF that comes with a full p
// dropped. Other errors are ReadAt's.
//
// Its signature fits a cache Loader once path, version and off are bound
// (fusefs and prefetch fill the cache through it); this package does not
// import the cache.
func ReadFull(ctx context.Context, b Backend, path, version string, p []byte, off int64) error {
	n, err := b.ReadAt(ctx, path, version, p, off)
	if n == len(p) && (err == nil || errors.Is(err, io.EOF)) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: got %d of %d bytes at offset %d (the file shrank?)", io.ErrUnexpectedEOF, n, len(p), off)
	}
	return err
}
