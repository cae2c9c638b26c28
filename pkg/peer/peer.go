// Package peer is the cluster-wide cache (`cachefs mount
// --cache-scope cluster`): the cache peers of one dataset split its files
// among themselves, each file owned by exactly one peer (rendezvous
// hashing, below; with a manifest and advertised capacities, rendezvous
// with bounded loads, assign.go), and a mount that misses a file it does
// not own asks the owner for the bytes over HTTP (server.go; client.go and
// its transport.go) before it falls back to the backend.
//
// Membership is the one seam for discovery: a Static list (`--peers`), a
// File another program rewrites (`--peers-file`: the CSI node plugin, from
// the Kubernetes discovery of package kubepeer); the read path asks Owner of
// the current Peers on every miss.
//
// The package knows pkg/backend (path rules) and Prometheus; the read path
// (pkg/fusefs) sees it only through the small interfaces it declares.
package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/renameio/v2"
	"github.com/zeebo/xxh3"
)

// Peer is one cache peer of a dataset.
type Peer struct {
	ID   string // stable name: the hashing input; a metric label (no secrets)
	Addr string // host:port of its peer server
	// Capacity is the bytes its cache holds for the dataset, as it
	// advertises (`;capacity=BYTES` in a peer list); 0: not advertised
	// (unbounded). With a manifest, advertised capacities make ownership
	// byte-balanced and capacity-aware (Assign).
	Capacity int64
}

// Membership yields the current peer set of the dataset, this mount
// included. Implementations must be safe for concurrent use and cheap to
// call (the read path calls Peers on every miss): return a shared slice
// that is replaced, never modified, when the set changes.
type Membership interface {
	Peers() []Peer
}

// Static is a Membership that never changes (`--peers`, tests).
type Static []Peer

// Peers returns the list.
func (s Static) Peers() []Peer { return s }

// ErrInvalid marks a bad peer list, id or address.
var ErrInvalid = errors.New("peer: invalid")

// ParsePeers parses `id=host:port,id=host:port;capacity=BYTES,…` (ids
// unique, each [A-Za-z0-9._-], 1–63 bytes; addresses host:port with a
// host; an optional capacity in bytes, > 0) into a list sorted by id.
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		item, opts, hasOpts := strings.Cut(item, ";")
		id, addr, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%w: peer %q is not ID=HOST:PORT", ErrInvalid, item)
		}
		if err := ValidID(id); err != nil {
			return nil, err
		}
		var capacity int64
		if hasOpts {
			v, ok := strings.CutPrefix(opts, "capacity=")
			c, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || c <= 0 {
				return nil, fmt.Errorf("%w: peer %s: %q is not capacity=BYTES (a positive integer)", ErrInvalid, id, opts)
			}
			capacity = c
		}
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%w: peer %s: address %q is not HOST:PORT", ErrInvalid, id, addr)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: peer id %s given twice", ErrInvalid, id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, Addr: addr, Capacity: capacity})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty peer list", ErrInvalid)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ValidID checks a peer id: 1–63 bytes of [A-Za-z0-9._:-] (so an address
// such as 127.0.0.1:7070 is a valid id, the default of --peer-id).
func ValidID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("%w: peer id %q must be 1 to 63 bytes", ErrInvalid, id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return fmt.Errorf("%w: peer id %q: only letters, digits and . _ - : are allowed", ErrInvalid, id)
		}
	}
	return nil
}

// Rendezvous (highest-random-weight) hashing: the owner of a file is the
// peer whose hash of (peer id, file) is highest. When a peer leaves, only
// the files it owned move (each to the peer with its second-highest
// weight); when one joins, it takes the files where it now weighs most,
// 1/N of them in expectation: the minimal movement consistent hashing
// promises, without a ring, virtual nodes or any state. It is a dozen lines
// over xxh3 (already the cache's checksum), so no library: the well-kept
// consistent-hashing packages add ring bookkeeping and their own hash
// choices this does not need, and N (the nodes of one job) is small enough
// that scoring every peer per miss costs nanoseconds.

// FileKey is the hashing input of one file: the dataset identity and the
// path, the fields of its cache key (cache.Key) without the version (a
// rewritten file keeps its owner) and without the block (every block of a
// large file has the one owner).
func FileKey(dataset, path string) string { return dataset + "\x00" + path }

// keyHash and idHash hash a FileKey and a peer id; rweight is the peer's
// rendezvous weight for the key, a mix of the two (one hash of the key per
// lookup, however many peers).
func keyHash(key string) uint64 { return xxh3.HashString(key) }
func idHash(id string) uint64   { return xxh3.HashString(id) }
func rweight(idh, kh uint64) uint64 {
	return mix64(kh ^ idh)
}

// Owner returns the peer that owns key among peers by plain rendezvous
// hashing, without bounds (false when there are none). Ties
// (astronomically rare) go to the smaller id. See Assign for the
// byte-balanced ownership a Cluster uses with a manifest and capacities.
func Owner(peers []Peer, key string) (Peer, bool) {
	var best Peer
	var bestW uint64
	found := false
	kh := keyHash(key)
	for _, p := range peers {
		w := rweight(idHash(p.ID), kh)
		if !found || w > bestW || (w == bestW && p.ID < best.ID) {
			best, bestW, found = p, w, true
		}
	}
	return best, found
}

// ShareFile is the file in the cache directory where a cluster-scope
// mount records its ownership when it starts (`cachefs stats` shows it).
const ShareFile = "epochfs-peer.json"

// Share is what ShareFile holds.
type Share struct {
	Scope      string   `json:"scope"` // "cluster"
	Self       string   `json:"self"`
	Peers      []string `json:"peers"`                 // ids, sorted
	Files      int      `json:"files,omitempty"`       // files of the manifest (0: no manifest)
	OwnedFiles int      `json:"owned_files,omitempty"` // of them, owned by Self
	// OwnedShare is Self's share of the dataset's bytes (with a manifest),
	// else 1/len(Peers), the expectation.
	OwnedShare float64 `json:"owned_share"`
}

// WriteShare writes s to dir/ShareFile (atomically).
func WriteShare(dir string, s Share) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, ShareFile), append(b, '\n'), 0o600, renameio.WithTempDir(dir))
}

// ReadShare reads dir/ShareFile; ok is false when there is none (a
// node-scope cache).
func ReadShare(dir string) (s Share, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, ShareFile))
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("peer: %s: %w", ShareFile, err)
	}
	return s, true, nil
}
