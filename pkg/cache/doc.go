// Package cache is EpochFS's node-local disk store: the NR (no-replacement)
// cache that sits between the FUSE layer and a dataset's real home.
//
// A Store keeps whole files (or fixed-size blocks of large files) of
// read-only datasets in a local directory. On a miss it calls a Loader given
// by the caller and, when the policy admits the entry, writes the bytes to a
// temporary file, records their xxh3-128 checksum in that file's extended
// attribute user.epochfs.sum and renames it into place (one file, one
// rename), so an entry is either complete or absent. On a filesystem without
// user xattrs the record goes to a .sum sidecar file instead, which is
// renamed into place before the data file. Entry files are byte-exact
// copies of the dataset bytes (offset 0 is byte 0 of the entry), so that a
// caller can hand the descriptor to the kernel, e.g. for FUSE passthrough.
//
// The policy is NR: admit on first miss while the entry fits, and once
// the cache is full admit nothing and evict nothing. Under the access
// pattern of deep-learning training (every file once per epoch, in a fresh
// random order) that freezes the cached set and makes every epoch from the
// second on hit exactly capacity/dataset of the bytes, while LRU, FIFO and
// random replacement thrash. NR is the only policy in this package; the
// Store takes any Policy (Options.Policy) so that benchmarks can compare
// others on the same data (bench/policies).
//
// The store survives restarts: Open rescans the directory, removes debris
// of interrupted writes and verifies each recovered entry's checksum before
// it is first served. One process at a time owns a cache directory (an
// exclusive flock on <dir>/LOCK); ReadInfo (info.go) describes a directory
// from its files, without the lock.
//
// Layout of a cache directory:
//
//	<dir>/LOCK                     flock target; holds the owner's pid
//	<dir>/epochfs-cache.json       format version, policy, capacity and key scheme
//	<dir>/entries/<xx>/<id>        entry bytes, <xx> = first 2 hex digits of <id>;
//	                               xattr user.epochfs.sum = "epochfs-sum 1 xxh3-128 <32 hex> <size>\n"
//	<dir>/entries/<xx>/<id>.sum    the same record, for a data file without the xattr
//	<dir>/entries/<xx>/*.tmp       writes in progress (removed at Open)
//
// where <id> is the hex SHA-256 of the length-prefixed key fields, so no key
// (whatever bytes its path holds) names a file outside the directory.
//
// An entry's record is its data file's xattr when it has one, else its
// sidecar. Builds from before the record moved into the xattr wrote
// sidecars only; their entries are still recovered and verified. Those
// builds, in turn, take an entry whose record is only in the xattr for data
// without a record and remove it. So a cache directory moved back and forth
// between versions loses entries but never serves wrong bytes, and the
// format version in epochfs-cache.json stays 1. Copying a cache directory
// without its xattrs (cp without --preserve=xattr, rsync without -X)
// likewise empties it at the next Open.
//
// Options.KeyScheme names the format of the versions in the keys (the
// source's version scheme). An Open with a scheme other than the one
// recorded removes every entry: their keys, made from versions of the old
// format (e.g. posix mtime+size, before the ctime and inode), can never be
// asked for again, and under NR would hold their room forever. Builds from
// before the field record none (""); an Open without a scheme drops nothing.
//
// Files: store.go is the Store (its index, Open, Stats, Close); get.go the
// lookups (Get, GetNoAdmit, Fill); flight.go the one shared fill of a
// missed entry; admit.go admission, eviction and the end of an entry's
// write; disk.go every read and write of the directory's files (entries,
// records, temporary files, the rescan, the lock and metadata); info.go
// ReadInfo.
//
// This package must not know about FUSE, CSI, Kubernetes or any storage
// backend: bytes come in only through the Loader, and leave as an *os.File
// or a byte slice.
package cache
