//go:build !ceph

package cephfs

import (
	"context"
	"fmt"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Built reports whether this build can open cephfs:// sources.
const Built = false

// openCephFS: this build has no libcephfs (the default build is cgo-free).
func openCephFS(_ context.Context, src source.Source, _ backend.Options) (backend.Backend, error) {
	return nil, fmt.Errorf("backend: open %s: %w: this build of EpochFS lacks the cephfs backend (it is cgo-free); "+
		"use a build with it (`make build-ceph`, go build -tags ceph,pacific, as in the cluster image), "+
		"or mount CephFS with the kernel client and use the mount path (e.g. /mnt/cephfs/dataset) as the source", src, backend.ErrUnsupported)
}
