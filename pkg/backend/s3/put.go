package s3

import (
	"bytes"
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Put stores data as the object at p with one PUT (S3 replaces objects
// atomically), retried like reads.
func (b *s3Backend) Put(ctx context.Context, p string, data []byte) error {
	p, err := backend.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("s3: put: %w: the root is a prefix", backend.ErrInvalidPath)
	}
	_, err = b.retry.Do(ctx, "put", b.retryable, func(ctx context.Context) error {
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

var _ backend.Putter = (*s3Backend)(nil)
