package backend

import (
	"context"
	"fmt"
)

// openMirror opens a mirror source. Not built yet: see Open.
func openMirror(_ context.Context, src Source, _ Options) (Backend, error) {
	return nil, fmt.Errorf("backend: open %s: %w: the mirror backend is not built in this version; use one of its replicas as the source", src, ErrUnsupported)
}
