// Package all wires every backend: Open turns a source.Source into the
// Backend of its kind (pkg/backend/posix, s3, nfs, cephfs, mirror). It is
// the one place that imports them all; pkg/backend holds the interface they
// implement and so cannot import them (that would be a cycle). Callers that
// open a source URL import this package; a caller that needs one kind only
// may import that backend's package.
//
// It must not know how any backend works: it only dispatches on the kind.
package all

import (
	"context"
	"fmt"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/cephfs"
	"github.com/epochfs/epochfs/pkg/backend/mirror"
	"github.com/epochfs/epochfs/pkg/backend/nfs"
	"github.com/epochfs/epochfs/pkg/backend/posix"
	"github.com/epochfs/epochfs/pkg/backend/s3"
	"github.com/epochfs/epochfs/pkg/source"
)

// Open returns a Backend for src. It checks that the dataset is reachable
// (the posix directory exists, the s3 bucket answers a listing with these
// credentials, the nfs export mounts) so that a bad source fails here,
// before anything is mounted. Each kind's Open documents the rest; cephfs
// returns ErrUnsupported in the default cgo-free build. A mirror opens each
// replica through Open.
func Open(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	switch src.Kind {
	case source.KindPosix:
		return posix.Open(ctx, src, opts)
	case source.KindS3:
		return s3.Open(ctx, src, opts)
	case source.KindCephFS:
		return cephfs.Open(ctx, src, opts)
	case source.KindNFS:
		return nfs.Open(ctx, src, opts)
	case source.KindMirror:
		return mirror.Open(ctx, src, opts, Open)
	default:
		return nil, fmt.Errorf("backend: open: %w: unknown source kind %q", source.ErrInvalidURL, src.Kind)
	}
}
