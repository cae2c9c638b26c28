// Package backend is the read-only view of a dataset's real home: the
// Backend interface, its sentinel errors, the path rules (CleanPath), the
// retry policy and Retrier, the listing caps (ListLimits, ListGuard), timing
// for metrics (WithObserver) and the optional abilities. The backends
// themselves are one package each: pkg/backend/posix (a local or
// kernel-mounted directory), s3 (an S3 bucket prefix), nfs (an NFSv3 export
// read with a pure-Go client), cephfs (libcephfs, in builds with the ceph
// tag only) and mirror (several of those); pkg/backend/all opens a Source of
// any kind. pkg/source parses source URLs.
//
// Optional abilities are separate interfaces found by type assertion, through
// wrappers (Unwrapper), each with a helper: RetryCounter (Retries),
// SkipCounter (Skipped), Unwrapper, Putter (Put), ReplicaStatser
// (ReplicaStats) and ChecksumSetter (SetChecksums). Callers hand backends
// three interfaces of their own: Observer (WithObserver), Egress
// (Options.Egress) and ListMemory (ListLimits.Memory).
//
// A Backend lists directories, stats entries and reads byte ranges. It knows
// nothing of caching, FUSE or CSI: those sit to its left on the data path
// (backend ← cache ← fusefs ← csi) and depend on it, never the reverse; nor
// does this package know any one backend.
//
// Paths are slash-separated, relative to the dataset root, with no leading or
// trailing slash; the root itself is "". Every method documents the sentinel
// errors it returns; anything else is an I/O failure that callers surface as
// EIO.
package backend

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Implementations wrap them (errors.Is works) with a
// component prefix and the offending path.
var (
	// ErrNotExist: no entry at that path.
	ErrNotExist = errors.New("no such file or directory")
	// ErrNotDir: List was called on a file.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: ReadAt was called on a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrChanged: the object's current version differs from the version the
	// caller expects; the caller must not use stale bytes.
	ErrChanged = errors.New("object changed since it was listed")
	// ErrInvalidPath: a path that is not a clean relative dataset path
	// (absolute, "..", NUL, control characters, over-long component).
	ErrInvalidPath = errors.New("invalid path")
	// ErrUnsupported: a source kind that this build cannot open.
	ErrUnsupported = errors.New("unsupported source")
	// ErrPermission: the backend refused access (bad or missing
	// credentials, a bucket policy, file permissions).
	ErrPermission = errors.New("permission denied")
	// ErrUnavailable: the backend's server could not be reached or kept
	// failing transiently (connection refused, DNS, timeouts, 5xx) until
	// the retries ran out. Wrapped together with the last cause.
	ErrUnavailable = errors.New("backend unavailable")
)

// Entry describes one file or directory of the dataset.
type Entry struct {
	// Name is the base name (no slash). The root's name is "".
	Name string
	// IsDir tells a directory (or S3 common prefix) from a file.
	IsDir bool
	// Size in bytes; 0 for directories.
	Size int64
	// ModTime is the last modification time when the backend knows it
	// (zero for S3 common prefixes).
	ModTime time.Time
	// Version identifies the content: the ETag (unquoted) for S3,
	// "MTIMENANOS-SIZE-CTIMENANOS-INO" for posix and cephfs,
	// "MTIMENANOS-SIZE-CTIMENANOS-FILEID" for nfs (from the server's
	// attributes), "REPLICA:SIZE:VERSION" for a mirror. Equal versions
	// mean equal bytes. Empty for directories.
	Version string
}

// Backend is a read-only dataset source. Implementations are safe for
// concurrent use.
type Backend interface {
	// Stat returns the entry at path ("" is the root, always a directory).
	// Errors: ErrNotExist, ErrInvalidPath.
	Stat(ctx context.Context, path string) (Entry, error)

	// List returns the direct children of the directory at path, sorted by
	// Name, each with Name set to its base name. Children whose names would
	// escape the dataset (see ValidName) are skipped and counted, never
	// returned. With ListLimits in ctx (WithListLimits) it stops fetching
	// at the first cap it passes and returns a *ListLimitError, never a
	// partial listing (listlimit.go). Errors: ErrNotExist, ErrNotDir,
	// ErrInvalidPath, ErrListTooLarge.
	List(ctx context.Context, path string) ([]Entry, error)

	// ReadAt reads up to len(p) bytes of the file at path starting at off,
	// like io.ReaderAt: it returns n < len(p) only with an error, io.EOF at
	// the end of the file. When version is not empty and the file's current
	// version differs, it returns ErrChanged and no bytes. Errors:
	// ErrNotExist, ErrIsDir, ErrChanged, ErrInvalidPath, context errors.
	ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error)

	// ID names the dataset's identity for cache keys: the same dataset
	// reached by the same URL yields the same ID across processes and
	// restarts; it never contains credentials.
	ID() string

	// Close releases connections and background work.
	Close() error
}
