// Package source is the grammar of dataset source URLs: the source kinds,
// Source, Parse and String, the nfs option limits, the version scheme a
// source's backend reports, the name rule every dataset path component
// follows, and the cache policy names a volume may ask for.
//
// It is a leaf that only parses and prints. It must not know how a source is
// reached (no network clients, no file I/O, no credentials) nor how its data
// is cached: pkg/backend opens a Source, pkg/cache stores what it reads. The
// CSI driver, the job controller and everything else that only names sources
// import this package rather than pkg/backend, so they link no backend
// client.
package source

import "errors"

// ErrInvalidURL is what every Parse error wraps: a malformed source URL; the
// message names the bad part.
var ErrInvalidURL = errors.New("invalid source URL")

// Limits and defaults of the nfs URL options (Source.Conns and
// Source.ReadSize).
const (
	// DefaultNFSConns is the number of TCP connections an nfs backend
	// reads over in parallel (one call at a time on each).
	DefaultNFSConns = 8
	// MaxNFSConns bounds the conns option.
	MaxNFSConns = 64
	// DefaultNFSReadSize is the largest READ an nfs backend asks for; the
	// server's rtmax (FSINFO) lowers it.
	DefaultNFSReadSize = 1 << 20
	// MinNFSReadSize and MaxNFSReadSize bound the rsize option.
	MinNFSReadSize = 4 << 10
	MaxNFSReadSize = 16 << 20
)

// Kind names the type of a dataset source.
type Kind string

// Source kinds.
const (
	KindPosix  Kind = "posix"  // a local or kernel-mounted directory
	KindS3     Kind = "s3"     // a bucket prefix on any S3-compatible server
	KindCephFS Kind = "cephfs" // CephFS through libcephfs (builds with the ceph tag)
	KindNFS    Kind = "nfs"    // NFSv3 through a pure-Go client
	KindMirror Kind = "mirror" // the same dataset in several places
)

// Source is a parsed dataset source URL. Which fields are set depends on
// Kind; the others are zero. A Source never holds credentials: Parse rejects
// URLs that carry them, and credentials reach a backend only through its
// options (pkg/backend).
//
// Source is comparable with reflect.DeepEqual, and Parse(s.String()) yields
// a Source equal to s for every s returned by Parse.
type Source struct {
	Kind Kind

	// Path is the absolute, cleaned directory for posix; the absolute path
	// inside the file system for cephfs; the absolute export path for nfs.
	Path string

	// Bucket and Prefix locate an s3 dataset. Prefix is a clean relative
	// path (see CleanPath) without a trailing slash; "" is the whole bucket.
	Bucket string
	Prefix string
	// Endpoint is the S3 server as "scheme://host[:port]"; empty means AWS.
	Endpoint string
	// Region is the S3 region; empty lets the client discover it.
	Region string
	// PathStyle selects path-style requests (http://host/bucket/key) over
	// virtual-host style. It defaults to true when Endpoint is set.
	PathStyle bool

	// Host is "host[:port]" of the cephfs monitor or the nfs server.
	Host string
	// User is the cephfs client name (e.g. "admin"); never a secret.
	User string
	// FS is the cephfs file system name; empty means the default one.
	FS string

	// UID and GID are the AUTH_UNIX identity of nfs requests (the uid and
	// gid options; default 0, root, which servers may squash).
	UID, GID uint32
	// MountPort is the nfs server's MOUNT port (the mountport option); 0
	// means the port of Host when the server serves MOUNT there, else the
	// portmapper's answer.
	MountPort int
	// Conns is the number of nfs connections reads are spread over (the
	// conns option, 1 to MaxNFSConns); 0 means DefaultNFSConns.
	Conns int
	// ReadSize caps one nfs READ in bytes (the rsize option, MinNFSReadSize
	// to MaxNFSReadSize); 0 means DefaultNFSReadSize. The server's rtmax
	// lowers it.
	ReadSize int

	// Replicas are the places of a mirror, in the order given (at least 2,
	// none of them a mirror).
	Replicas []Source
}

// PosixVersionScheme is Source.VersionScheme of a posix directory: its
// versions are "MTIMENANOS-SIZE-CTIMENANOS-INO" (see pkg/backend's Entry.Version).
const PosixVersionScheme = "posix-mtime-size-ctime-ino"

// VersionScheme names the format of the versions the source's backend
// reports, for whoever keys data by them (the cache records it and drops
// entries keyed under another scheme, rather than keeping them unreachable
// and holding their room). It is "" for the formats of the first release
// (S3 ETags), PosixVersionScheme for a posix directory since its versions
// gained the ctime and inode, and for a mirror "mirror:" + that when a
// replica is posix (mirror versions embed the replica's own), whichever
// replicas are up.
func (s Source) VersionScheme() string {
	switch s.Kind {
	case KindPosix:
		return PosixVersionScheme
	case KindMirror:
		for _, r := range s.Replicas {
			if r.Kind == KindPosix {
				return "mirror:" + PosixVersionScheme
			}
		}
	}
	return ""
}
