package cache

import "errors"

var (
	// ErrLocked is returned (wrapped, naming the directory and the holder's
	// pid when known) by Open when another Store, in this process or
	// another one, holds the cache directory.
	ErrLocked = errors.New("cache: cache directory is locked by another store")

	// ErrClosed is returned by Get after Close.
	ErrClosed = errors.New("cache: store is closed")

	// ErrInvalidOptions is wrapped by every Options validation error of Open.
	ErrInvalidOptions = errors.New("cache: invalid options")

	// ErrNotCacheDir is wrapped by ReadInfo when the directory holds no
	// epochfs-cache.json.
	ErrNotCacheDir = errors.New("cache: not an epochfs cache directory")
)
