package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
)

// Key identifies cached bytes. A changed Version is a different key (a
// miss, never stale bytes).
type Key struct {
	Dataset string // backend identity, e.g. "s3://127.0.0.1:9000/bucket/prefix"
	Path    string // path within the dataset
	Version string // ETag or mtime+size token
	Block   int64  // 0: the whole file; n >= 1: the n-th fixed-size block of a large file
}

// String formats the key for logs and errors: dataset, path, version and,
// for a block, "#n".
func (k Key) String() string {
	s := k.Dataset + ":" + strconv.Quote(k.Path) + "@" + k.Version
	if k.Block != 0 {
		s += "#" + strconv.FormatInt(k.Block, 10)
	}
	return s
}

// id returns the entry's file name: the hex SHA-256 of the key fields, each
// length-prefixed (uvarint) so that no two distinct keys share an encoding
// even when a field holds NUL bytes, followed by Block as 8 big-endian
// bytes. The id is 64 lower-case hex digits whatever the key holds, so a
// key can never name a file outside the cache directory.
func (k Key) id() string {
	h := sha256.New()
	var b [binary.MaxVarintLen64]byte
	for _, f := range [...]string{k.Dataset, k.Path, k.Version} {
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	binary.BigEndian.PutUint64(b[:8], uint64(k.Block))
	h.Write(b[:8])
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// isID reports whether name is a well-formed entry id.
func isID(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
