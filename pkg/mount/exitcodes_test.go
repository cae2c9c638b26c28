package mount_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

// TestExitCode: each sentinel, wrapped as the packages wrap them, gives its
// documented exit code (the end-to-end table is pkg/csi's TestMountExitCodes).
func TestExitCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("mount: source x: %w", err) }
	for _, tc := range []struct {
		err  error
		want exitcode.Code
	}{
		{nil, exitcode.OK},
		{errors.New("boom"), exitcode.Internal},
		{wrap(manifest.ErrCorrupt), exitcode.Internal},
		{wrap(mount.ErrInvalidConfig), exitcode.Usage},
		{wrap(mountapi.ErrCredentials), exitcode.Usage},
		{wrap(source.ErrInvalidURL), exitcode.Usage},
		{wrap(backend.ErrUnsupported), exitcode.Usage},
		{wrap(cache.ErrInvalidOptions), exitcode.Usage},
		{wrap(backend.ErrNotExist), exitcode.NotFound},
		{wrap(fs.ErrNotExist), exitcode.NotFound},
		{wrap(backend.ErrPermission), exitcode.PermissionDenied},
		{wrap(backend.ErrUnavailable), exitcode.Unavailable},
		{wrap(cache.ErrLocked), exitcode.CacheLocked},
		{fmt.Errorf("%w: %w", mount.ErrCacheDir, fs.ErrPermission), exitcode.CacheUnusable},
		{fmt.Errorf("%w: %w", mount.ErrMountpoint, fs.ErrNotExist), exitcode.Mountpoint},
	} {
		if got := mount.ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
