// Package cache is EpochFS's node-local disk store: the NR (no-replacement)
// cache that sits between the FUSE layer and a dataset's real home.
//
// A Store keeps whole files (or fixed-size blocks of large files) of
// read-only datasets in a local directory. On a miss it calls a Loader given
// by the caller, and when the policy admits the entry it writes the bytes to
// a temporary file, records an xxh3-128 checksum in that file's extended
// attribute user.epochfs.sum and renames it into place (one file, one
// rename), so an entry is either complete or absent. On a filesystem
// without user xattrs the record goes to a .sum sidecar file instead,
// renamed into place before the data. Entry
// files are byte-exact copies of the dataset bytes (offset 0 is byte 0 of the
// entry) so that a caller can hand the descriptor to the kernel, e.g. for
// FUSE passthrough.
//
// The default policy is NR: admit on first miss while the entry fits, and
// once the cache is full admit nothing and evict nothing. Under the access
// pattern of deep-learning training (every file once per epoch, in a fresh
// random order) that freezes the cached set and makes every epoch from the
// second on hit exactly capacity/dataset of the bytes, while LRU, FIFO and
// random replacement thrash. LRU, FIFO, Random and TinyLFU exist only so
// that benchmarks can show the difference on the same data.
//
// The store survives restarts: Open rescans the directory, removes debris
// of interrupted writes and verifies each recovered entry's checksum before
// it is first served. One process at a time owns a cache directory (an
// exclusive flock on <dir>/LOCK); ReadInfo inspects a directory without the
// lock.
//
// Layout of a cache directory:
//
//	<dir>/LOCK                     flock target; holds the owner's pid
//	<dir>/epochfs-cache.json       format version, policy and capacity
//	<dir>/entries/<xx>/<id>        entry bytes, <xx> = first 2 hex digits of <id>;
//	                               xattr user.epochfs.sum = "epochfs-sum 1 xxh3-128 <32 hex> <size>\n"
//	<dir>/entries/<xx>/<id>.sum    the same record, for a data file without the xattr
//	<dir>/entries/<xx>/*.tmp       writes in progress (removed at Open)
//
// An entry's record is its data file's xattr when it has one, else its
// sidecar. Sidecar-only entries are what builds before the xattr record
// wrote (they are still recovered and verified); such builds treat an
// xattr-only entry as data without a record and remove it, so a cache
// directory moved back and forth between versions loses entries, never
// serves wrong bytes. The format version in epochfs-cache.json is therefore
// unchanged (1). Copying a cache directory without its xattrs (cp without
// --preserve=xattr, rsync without -X) likewise empties it at the next Open.
//
// where <id> is the hex SHA-256 of the length-prefixed key fields, so no key
// (whatever bytes its path holds) names a file outside the directory.
//
// This package must not know about FUSE, CSI, Kubernetes or any storage
// backend: bytes come in only through the Loader, and leave as an *os.File
// or a byte slice.
package cache
