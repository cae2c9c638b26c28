package fusefs

// Readahead of whole small files (Options.ReadaheadFiles). A data loader
// opens one file per worker at a time, so a cold epoch runs at most as many
// backend fetches as it has workers, each paying the fetch and the cache
// write in series. When an open of a small file misses, the next
// ReadaheadFiles files of its directory (in name order) are fetched into
// the cache in the background with cache.Store.Fill, which counts no hit
// or miss: the hit and miss counters keep counting readers' opens only, and
// a file read ahead is a hit when a reader opens it later (in any epoch,
// the first included).
//
// Readahead never queues: when the background fetches are at their bound
// (4 × ReadaheadFiles, or 4 × AutoMaxFiles on auto; and readaheadMaxBytes
// of files, since each fetch holds its file in memory) or the cache has no room left for the next file
// (counting the readahead in flight), the rest of the window is skipped.
// So once an NR cache is full, readahead stops costing backend requests. A
// file already being read ahead (the windows of two misses in one
// directory overlap) is skipped too, so it holds one slot, not two.
//
// The window is Options.ReadaheadFiles when pinned, or, with
// ReadaheadFilesAuto (the mount's default), follows the backend's measured
// latency (readahead_auto.go): on for a far store, off for a local one.
// A file a reader opens after readahead cached it is a hit (counted in
// cache.Stats.PrefetchedHits too, the first time); the fill itself is a
// prefetch fill (cache.Stats.PrefetchFills), never a hit or a miss.
//
// State: FS.readahead (fs.go).

// readaheadMaxBytes bounds the bytes of whole files being read ahead (each
// is held in memory while fetched): 64 fetches of ImageNet-sized files are
// a few MB, but of files near WholeFileMax (8 MiB) half a GiB. One file is
// always allowed.
const readaheadMaxBytes = 128 << 20

// readaheadFiles fetches files (small, not cached) into the cache in the
// background, within the bound.
func (f *FS) readaheadFiles(files []file) {
	for _, n := range files {
		if n.size > f.opts.WholeFileMax || !f.owns(n.path) {
			continue // (cluster scope: another peer's file is never admitted here)
		}
		span := f.spans(n)[0]
		if f.store.Contains(span.Key) {
			continue
		}
		// Room for it, counting the readahead already in flight, and
		// memory: at most readaheadMaxBytes in flight.
		inflight := f.readahead.fileBytes.Add(n.size)
		if st := f.store.Stats(); st.UsedBytes+inflight > st.CapacityBytes || (inflight > readaheadMaxBytes && inflight > n.size) {
			f.readahead.fileBytes.Add(-n.size)
			return
		}
		select {
		case f.readahead.fileSem <- struct{}{}:
		default:
			f.readahead.fileBytes.Add(-n.size)
			return
		}
		f.readahead.mu.Lock()
		_, dup := f.readahead.files[n.path]
		if !dup {
			f.readahead.files[n.path] = struct{}{}
		}
		f.readahead.mu.Unlock()
		if dup {
			f.readahead.fileBytes.Add(-n.size)
			<-f.readahead.fileSem
			continue
		}
		go func() {
			defer func() {
				f.readahead.mu.Lock()
				delete(f.readahead.files, n.path)
				f.readahead.mu.Unlock()
				f.readahead.fileBytes.Add(-n.size)
				<-f.readahead.fileSem
			}()
			res, err := f.store.Fill(f.ctx, span.Key, span.Length, f.wholeLoader(n, span.Offset, nil))
			if err != nil {
				// The reader's own open reports it, if it comes.
				f.log.Debug("fusefs: readahead of a file failed", "path", n.path, "err", err)
				return
			}
			if res.Prefetched { // not a reader's fetch it joined
				counters.filesReadAhead.Add(1)
			}
		}()
	}
}
