package manifest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// Values of Discover's loc besides a location.
const (
	// LocAuto looks for the manifest at DefaultPath in the dataset and
	// returns none when it is missing.
	LocAuto = ""
	// LocNone never uses a manifest.
	LocNone = "none"
)

// Discover returns the manifest that a mount or a prefetch of the dataset
// served by b uses, selected by loc:
//
//   - LocAuto (""): DefaultPath inside the dataset, fetched through b;
//     nil when it does not exist.
//   - LocNone ("none"): nil.
//   - a URL (anything with "://", e.g. s3://bucket/prefix/manifest?endpoint=…):
//     the object it names, read through a backend opened with opts.
//   - anything else: a local file.
//
// where describes the location looked at, for logs and errors ("" for
// LocNone). A manifest that was asked for explicitly and cannot be loaded,
// or an auto manifest that exists but does not load, is an error naming
// where. So is one built by a `cachefs index` from before posix versions
// held the ctime and inode (ErrLegacyVersions): none of its posix versions
// can match the files any more, and a mount must not serve cache entries
// keyed by versions that a same-size rewrite restoring the mtime fools.
// The manifest is loaded within DefaultMaxMemory (see DiscoverMax).
func Discover(ctx context.Context, b backend.Backend, loc string, opts backend.Options) (m *Manifest, where string, err error) {
	return DiscoverMax(ctx, b, loc, opts, 0)
}

// DiscoverMax is Discover refusing (with ErrTooLarge) a manifest that
// would take more than maxMemory bytes in memory (0: DefaultMaxMemory),
// from what its header announces, before decompressing anything.
func DiscoverMax(ctx context.Context, b backend.Backend, loc string, opts backend.Options, maxMemory int64) (m *Manifest, where string, err error) {
	m, where, err = DiscoverLimit(ctx, b, loc, opts, maxMemory)
	if err == nil && m != nil && m.LegacyPosixVersions() > 0 {
		return nil, where, fmt.Errorf("manifest %s: %w (%d files; it was built by an older cachefs index): "+
			"rebuild it with `cachefs index`, or mount with --manifest none", where, ErrLegacyVersions, m.LegacyPosixVersions())
	}
	return m, where, err
}

// DiscoverLimit is DiscoverMax without the refusal of legacy posix
// versions, for callers that only read the manifest.
func DiscoverLimit(ctx context.Context, b backend.Backend, loc string, opts backend.Options, maxMemory int64) (m *Manifest, where string, err error) {
	switch {
	case loc == LocNone:
		return nil, "", nil
	case loc == LocAuto:
		where = b.ID() + "/" + DefaultPath
		m, err = Fetch(ctx, b, DefaultPath, maxMemory)
		if errors.Is(err, backend.ErrNotExist) {
			return nil, where, nil
		}
	case isURL(loc):
		where = loc
		m, err = fetchURL(ctx, loc, opts, maxMemory)
	default:
		where = loc
		m, err = ReadFile(loc, maxMemory)
	}
	if err != nil {
		return nil, where, fmt.Errorf("manifest %s: %w", where, err)
	}
	return m, where, nil
}

// isURL tells a manifest location naming an object from a local file.
func isURL(loc string) bool { return strings.Contains(loc, "://") }

// fetchURL loads a manifest object named by a source URL: the URL of its
// directory plus its name, e.g. s3://bucket/prefix/.epochfs/manifest?endpoint=….
func fetchURL(ctx context.Context, loc string, opts backend.Options, maxMemory int64) (*Manifest, error) {
	b, name, err := openURLDir(ctx, loc, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return Fetch(ctx, b, name, maxMemory)
}

// openURLDir opens the backend of the directory of the object a URL names,
// and returns the object's name in it.
func openURLDir(ctx context.Context, loc string, opts backend.Options) (backend.Backend, string, error) {
	p, query, _ := strings.Cut(loc, "?")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || i == len(p)-1 || strings.HasSuffix(p[:i], ":/") {
		return nil, "", fmt.Errorf("%w: want a URL ending in the manifest's name", source.ErrInvalidURL)
	}
	dir, name := p[:i], p[i+1:]
	if query != "" {
		dir += "?" + query
	}
	src, err := source.Parse(dir)
	if err != nil {
		return nil, "", err
	}
	b, err := all.Open(ctx, src, opts)
	if err != nil {
		return nil, "", err
	}
	return b, name, nil
}

// Store writes an encoded manifest where Discover with the same loc finds
// it, and returns where:
//
//   - LocAuto (""): DefaultPath inside the dataset served by b (b must be
//     able to store objects: a directory or S3, see backend.Putter).
//   - a URL: the object it names, through a backend opened with opts.
//   - anything else: a local file, written atomically.
func Store(ctx context.Context, b backend.Backend, loc string, opts backend.Options, data []byte) (where string, err error) {
	switch {
	case loc == LocNone:
		return "", fmt.Errorf("manifest: cannot store to %q", loc)
	case loc == LocAuto:
		where = b.ID() + "/" + DefaultPath
		err = backend.Put(ctx, b, DefaultPath, data)
	case strings.Contains(loc, "://"):
		where = loc
		var d backend.Backend
		var name string
		if d, name, err = openURLDir(ctx, loc, opts); err == nil {
			err = backend.Put(ctx, d, name, data)
			d.Close()
		}
	default:
		where = loc
		err = writeFileAtomic(loc, data)
	}
	if err != nil {
		return where, fmt.Errorf("store manifest %s: %w", where, err)
	}
	return where, nil
}
