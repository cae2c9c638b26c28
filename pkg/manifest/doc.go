// Package manifest is the dataset manifest: a compact, sorted, versioned
// index of every file of a dataset (path, size, version token, optional
// sha256) that lets a mount serve names and attributes without listing the
// backend, and lets `cachefs index --verify` report drift.
//
// Build makes a Manifest from a list of files (skipping, with a warning and a
// count, paths that would escape the mount); Index builds one from any
// backend with parallel listing; Encode/WriteFile serialise it; Load/ReadFile/
// Fetch parse it back. Load treats its input as hostile: it never panics,
// checks from the header, before decompressing anything, that the manifest
// fits a memory limit (LoadLimit; DefaultMaxMemory) and that the body is
// one zstd frame declaring its size, decompresses it as a stream into the
// in-memory records, and returns either a complete Manifest or an error
// wrapping ErrCorrupt (ErrTooLarge over the limit, ErrUnsupported for a
// newer format version), never a half-loaded one. ReadInfo returns what the
// header says once the file's checksum matches, reading it as a stream and
// never decompressing it, for callers that only need the totals.
//
// The package knows the backend (for path rules and for Index/Verify); it
// knows nothing of caching, FUSE or CSI.
//
// # In memory
//
// Entries (the root, every directory and every file) are numbered in
// breadth-first order, each directory's children contiguous and sorted by
// name. They are held as one record per entry in a single []byte, in blocks
// of 16 entries: a record is the body's entry without its checksum — the
// name front-coded (uvarint bytes shared with the previous entry, uvarint
// suffix length, suffix), the tag, and for a file the version payload and
// the uvarint size — except that the first entry of every block shares
// nothing (its whole name is there). Beside the records: one 8-byte offset
// per block, a bit per entry telling directories, two 4-byte indexes per
// directory (its entry number and its children's first entry), and 32 bytes
// of sha256 per entry when the manifest has checksums. Versions stay
// encoded as on disk (an S3 ETag as 16 binary bytes, a posix
// "MTIMENANOS-SIZE-CTIMENANOS-INO" version as three varints, see below).
// So an ImageNet-like file (a 20-byte name sharing ~14 bytes with its
// neighbour, an ETag, a 3-byte size) costs about 26 bytes in all, its name
// included (+32 with checksums); Manifest.MemoryBytes reports the exact
// figure (bench/RESULTS.md). Reaching entry i decodes at most 15 records
// before it; Lookup of a name in a directory is a binary search over the
// whole names of the blocks' first entries, then a scan of one block;
// readdir is a contiguous range; the inode of entry i can simply be i+1.
//
// # On disk (format versions 1 and 2)
//
// All integers are little-endian; uvarint/varint are encoding/binary's.
//
//	magic        8 bytes  "EPOCHFSM"
//	version      uint16   2 when an entry has tag 5, else 1 (readable by builds from before tag 5)
//	flags        uint16   bit 0: every file has a sha256; other bits must be 0
//	files        uvarint  number of files
//	dirs         uvarint  number of directories, the root included
//	bytes        uvarint  sum of the file sizes
//	created      varint   creation time, Unix nanoseconds
//	source       uvarint length (≤ 4096) + bytes: the backend ID it was built from
//	bodyLen      uvarint  length of the body once decompressed
//	compLen      uvarint  length of the compressed body that follows
//	body         compLen bytes: exactly one zstd frame, declaring bodyLen as its content size
//	checksum     16 bytes: XXH3-128 (high half first, big-endian) of every byte before it
//
// The checksum catches truncation and corruption; it is not a signature.
//
// The decompressed body is one record per directory, breadth first: the
// root, then the directories in the order their entries appear in the
// records before them. A record is
//
//	n            uvarint  number of children
//	n times:
//	  shared     uvarint  bytes shared with the previous sibling's name (0 for the first)
//	  suffixLen  uvarint  + suffix bytes: the rest of the name
//	  tag        byte     0 directory; 1–5 file, with its version encoded as:
//	                      1 raw: uvarint length (≤ 1024) + bytes (printable, no control characters)
//	                      2 "MTIMENANOS-SIZE", the posix version of builds before tag 5:
//	                        varint MTIMENANOS (SIZE is the file's size)
//	                      3 lowercase hex (e.g. an S3 ETag): byte n (1–64) + n bytes
//	                      4 lowercase hex + "-" + decimal N (multipart ETag): byte n + n bytes + uvarint N
//	                      5 posix "MTIMENANOS-SIZE-CTIMENANOS-INO" (format version 2 only):
//	                        varint MTIMENANOS, varint CTIMENANOS − MTIMENANOS, uvarint INO
//	  size       uvarint  (files only)
//	  sha256     32 bytes (files only, when flag bit 0 is set)
//
// Names are source.ValidName components, strictly increasing (bytewise)
// within a directory; full paths are at most MaxPathLen bytes. Anything else
// — a count that disagrees with the header, trailing bytes, an unsorted or
// duplicate name, an over-long path — is ErrCorrupt. The file order is the
// order of paths compared component by component (as if "/" sorted before
// every other byte), which is also the order of Walk.
package manifest
