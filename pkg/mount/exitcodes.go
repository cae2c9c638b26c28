package mount

import (
	"errors"
	"io/fs"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

// ExitCode classifies an error of New, Start or Run into the exit code of
// `cachefs mount` (see package exitcode), by the sentinels of this package,
// pkg/backend and pkg/cache; anything else is exitcode.Internal.
func ExitCode(err error) exitcode.Code {
	switch {
	case err == nil:
		return exitcode.OK
	case errors.Is(err, cache.ErrLocked):
		return exitcode.CacheLocked
	case errors.Is(err, ErrCacheDir):
		return exitcode.CacheUnusable
	case errors.Is(err, ErrMountpoint):
		return exitcode.Mountpoint
	case errors.Is(err, ErrInvalidConfig), errors.Is(err, mountapi.ErrCredentials), errors.Is(err, source.ErrInvalidURL),
		errors.Is(err, backend.ErrUnsupported), errors.Is(err, cache.ErrInvalidOptions):
		return exitcode.Usage
	case errors.Is(err, backend.ErrPermission), errors.Is(err, fs.ErrPermission):
		return exitcode.PermissionDenied
	case errors.Is(err, backend.ErrNotExist), errors.Is(err, fs.ErrNotExist):
		return exitcode.NotFound // fs.ErrNotExist: a --manifest file
	case errors.Is(err, backend.ErrUnavailable):
		return exitcode.Unavailable
	}
	return exitcode.Internal
}
