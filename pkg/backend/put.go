package backend

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"strconv"

	"github.com/minio/minio-go/v7"
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

// Put writes data to a temporary file in p's directory (created as needed)
// and renames it over p, all inside the dataset root.
func (b *posixBackend) Put(ctx context.Context, p string, data []byte) error {
	p, err := CleanPath(p)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("posix: put: %w: the root is a directory", ErrInvalidPath)
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

// Put stores data as the object at p with one PUT (S3 replaces objects
// atomically), retried like reads.
func (b *s3Backend) Put(ctx context.Context, p string, data []byte) error {
	p, err := CleanPath(p)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("s3: put: %w: the root is a prefix", ErrInvalidPath)
	}
	_, err = b.retry.do(ctx, "put", b.retryable, func(ctx context.Context) error {
		// Ceph RGW refuses the x-amz-content-sha256 minio-go signs an empty
		// body with (XAmzContentSHA256Mismatch); an empty object goes up as
		// UNSIGNED-PAYLOAD, which every S3 server takes.
		_, err := b.core.Client.PutObject(ctx, b.bucket, b.key(p), bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true, DisableContentSha256: len(data) == 0})
		return err
	})
	if err != nil {
		return b.mapErr("put", p, err)
	}
	return nil
}

var (
	_ Putter = (*posixBackend)(nil)
	_ Putter = (*s3Backend)(nil)
)
