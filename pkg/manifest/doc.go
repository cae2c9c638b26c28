// Package manifest is the dataset manifest: a compact, sorted, versioned
// index of every file of a dataset (path, size, version token, optional
// sha256) that lets a mount serve names and attributes without listing the
// backend, and lets `cachefs index --verify` report drift.
//
// Build makes a Manifest from a list of files (skipping, with a warning and a
// count, paths that would escape the mount); Index builds one from any
// backend with parallel listing; Encode/WriteFile serialise it; Load/ReadFile/
// Fetch parse it back. Load treats its input as hostile: it never panics,
// allocates at most a bounded multiple of the input size, and returns either
// a complete Manifest or an error wrapping ErrCorrupt (or ErrUnsupported for a
// newer format version), never a half-loaded one.
//
// The package knows the backend (for path rules and for Index/Verify); it
// knows nothing of caching, FUSE or CSI.
//
// # In memory
//
// Entries (the root, every directory and every file) are numbered in
// breadth-first order, each directory's children contiguous and sorted by
// name. One []byte holds every base name; per entry there is a 4-byte name
// end offset, an 8-byte size (a negative size encodes "directory number d"),
// a 4-byte version end offset into a second []byte of encoded versions
// (typically 12–23 bytes: an S3 ETag is kept as 16 binary bytes, a posix
// "MTIMENANOS-SIZE-CTIMENANOS-INO" version as three varints, see below),
// and 32 bytes of sha256 when the manifest has checksums. Per directory
// there are two 4-byte indexes. So a file costs about 30–40 bytes beyond
// its name bytes (+32 with checksums); Manifest.OverheadBytes reports the
// exact figure (bench/RESULTS.md). Lookup of a name in a
// directory is a binary search over its children; readdir is a contiguous
// range; the inode of entry i can simply be i+1.
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
//	body         compLen bytes: one zstd frame
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
// Names are backend.ValidName components, strictly increasing (bytewise)
// within a directory; full paths are at most MaxPathLen bytes. Anything else
// — a count that disagrees with the header, trailing bytes, an unsorted or
// duplicate name, an over-long path — is ErrCorrupt. The file order is the
// order of paths compared component by component (as if "/" sorted before
// every other byte), which is also the order of Walk.
package manifest
