package fusefs

// The cluster-wide cache (Options.Peers, `cachefs mount --cache-scope
// cluster`; pkg/peer): the cache peers of a dataset split its files, each
// owned by one peer. A file this mount owns goes through the cache as in
// node scope (admitted under the policy, NR: until full, never evicted). A
// file it does not own is never admitted here: a lookup of it hits only
// when it was cached before (store.GetNoAdmit), and on a miss its bytes
// come from the owner (Peers.Read), else, when the owner fails, is down,
// slow, or answers another version or bytes that fail their check, from
// the backend, uncached. No reader error comes from a peer: only the
// backend's own failure is one. Readahead fills only owned files.
//
// The owner's side is ReadForPeer, which the peer server calls: from the
// cache, or fetched from the backend and admitted (an owned file), in one
// coalesced fetch with the mount's own readers of it.

import (
	"context"
	"fmt"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
)

// Peers is the cluster-wide cache as the read path sees it
// (pkg/peer.Cluster implements it).
type Peers interface {
	// Owns reports whether this mount owns path (admits it).
	Owns(path string) bool
	// Read fills p with bytes [off, off+len(p)) of version of path, a
	// file of size bytes, from its owner, checked; any error means "read
	// it from the backend".
	Read(ctx context.Context, path, version string, size, off int64, p []byte) error
}

// owns reports whether path is this mount's to admit.
func (f *FS) owns(path string) bool {
	return f.opts.Peers == nil || f.opts.Peers.Owns(path)
}

// get is the read path's one cache lookup of a span of n: through the
// cache (admitting) when this mount owns n, else without admission, from
// the owner peer, then the backend (load).
func (f *FS) get(n file, span cache.KeySpan, load cache.Loader) (cache.Result, error) {
	if f.owns(n.path) {
		return f.store.Get(f.ctx, span.Key, span.Length, load)
	}
	peers := f.opts.Peers
	return f.store.GetNoAdmit(f.ctx, span.Key, span.Length, func(ctx context.Context, p []byte) error {
		err := peers.Read(ctx, n.path, n.version, n.size, span.Offset, p)
		if err == nil {
			return nil
		}
		f.log.Debug("fusefs: peer read failed, reading from the backend", "path", n.path, "err", err)
		return load(ctx, p)
	})
}

// ReadForPeer serves a peer's read of bytes [off, off+n) of version of
// path (size bytes), which must be exactly one cache span of the file
// (peers must agree on --whole-file-max and --block-size): from the cache
// or the backend, admitted when this mount owns the file, never asked of
// another peer. With a manifest, a version or size other than the
// manifest's is backend.ErrChanged and an unknown path
// backend.ErrNotExist.
func (f *FS) ReadForPeer(ctx context.Context, path, version string, size, off, n int64) ([]byte, error) {
	if f.manifest != nil {
		i, ok := f.manifest.Find(path)
		if !ok || f.manifest.IsDir(i) {
			return nil, fmt.Errorf("fusefs: peer read of %q: %w", path, backend.ErrNotExist)
		}
		if f.manifest.Version(i) != version || f.manifest.Size(i) != size {
			return nil, fmt.Errorf("fusefs: peer read of %q: %w: the manifest names another version", path, backend.ErrChanged)
		}
	}
	node := file{fsys: f, path: path, version: version, size: size}
	var span cache.KeySpan
	found := false
	for _, s := range f.spans(node) {
		if s.Offset == off && s.Length == n {
			span, found = s, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("fusefs: peer read of %q: [%d, +%d) is not one cache span here (do the peers share --whole-file-max and --block-size?)", path, off, n)
	}
	load := f.loader(path, version, off)
	var res cache.Result
	var err error
	if f.owns(path) {
		res, err = f.store.Get(f.ctx, span.Key, span.Length, load)
	} else { // the asker's view of the members differs: serve, keep nothing
		res, err = f.store.GetNoAdmit(f.ctx, span.Key, span.Length, load)
	}
	if err != nil {
		return nil, err
	}
	if res.File == nil {
		return res.Data, nil
	}
	defer res.File.Close()
	buf := make([]byte, n)
	if _, err := res.File.ReadAt(buf, 0); err != nil && int64(len(buf)) != n {
		return nil, err
	}
	return buf, nil
}
