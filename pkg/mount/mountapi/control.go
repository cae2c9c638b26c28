package mountapi

// The control endpoint: a unix socket inside the cache directory through
// which other processes on the node drive a running mount. A mount holds its
// cache directory's lock, so `cachefs prefetch` cannot open the store while
// the mount runs; instead it asks the mount, over this socket, to run the
// prefetch against the mount's own store, and shows the progress the mount
// streams back. The node plugin asks it for its metrics and for the size of
// the dataset it serves, so that it never opens a tenant's dataset itself.
//
// Protocol (JSON lines): the client sends one ControlRequest line. For
// OpPrefetch the server answers with ControlEvent lines: "started", then
// "progress" every ProgressIntervalMS, then exactly one "summary" or
// "error", and closes the connection. A client that closes its sending side
// (or hangs up) cancels its prefetch; the server still sends the
// (interrupted) summary. OpMetrics and OpDataset are answered by one event
// ("metrics", "dataset" or "error"). OpUnmount (`cachefs umount`) names the
// mount point the client means: when it is the mount's, the mount answers
// "unmounting" and then unmounts as on SIGTERM (lazily when readers hold
// files open); otherwise "error".
//
// The socket is <cache-dir>/control.sock, mode 0600 (and the cache
// directory is 0700): only its owner (root, in a node plugin) may connect.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ControlSocketName is the control socket's name inside the cache directory.
const ControlSocketName = "control.sock"

// Control operations (ControlRequest.Op).
const (
	OpPrefetch = "prefetch"
	// OpMetrics asks for the mount's Prometheus metrics: one EventMetrics
	// event carrying them in the text exposition format.
	OpMetrics = "metrics"
	// OpDataset asks for what the mount serves: one EventDataset event.
	OpDataset = "dataset"
	// OpUnmount asks the mount serving ControlRequest.Mountpoint to stop:
	// one EventUnmounting event, then the mount unmounts.
	OpUnmount = "unmount"
)

// Event types of ControlEvent.
const (
	EventStarted  = "started"
	EventProgress = "progress"
	EventSummary  = "summary"
	EventError    = "error"
	EventMetrics  = "metrics"
	EventDataset  = "dataset"
	// EventUnmounting: the mount is unmounting (OpUnmount); Pid is its
	// process.
	EventUnmounting = "unmounting"
)

// ErrNoControl is returned (wrapped) by the clients when no mount serves a
// control socket in the cache directory.
var ErrNoControl = errors.New("mount: no mount serves a control socket in this cache directory")

// ControlRequest is the one line a client sends.
type ControlRequest struct {
	Op string `json:"op"` // OpPrefetch, OpMetrics or OpDataset
	// Source is the client's dataset URL; when set (OpPrefetch) it must
	// name the mount's dataset.
	Source string `json:"source,omitempty"`
	// Workers bounds the concurrent backend reads; 0: prefetch's default.
	Workers int `json:"workers,omitempty"`
	// WholeFileMax and BlockSize, when not 0, must equal the mount's (the
	// mount's split decides the keys it reads).
	WholeFileMax int64 `json:"whole_file_max,omitempty"`
	BlockSize    int64 `json:"block_size,omitempty"`
	// ProgressIntervalMS is the period of progress events; 0: 500 ms.
	ProgressIntervalMS int `json:"progress_interval_ms,omitempty"`
	// Mountpoint (OpUnmount) is the absolute, clean mount point the client
	// means; the mount refuses another.
	Mountpoint string `json:"mountpoint,omitempty"`
}

// ControlEvent is one line the server sends.
type ControlEvent struct {
	Type     string            `json:"type"`
	Started  *PrefetchStarted  `json:"started,omitempty"`
	Progress *PrefetchProgress `json:"progress,omitempty"`
	Summary  *PrefetchSummary  `json:"summary,omitempty"`
	Error    string            `json:"error,omitempty"`
	Metrics  string            `json:"metrics,omitempty"` // EventMetrics: text exposition format
	Dataset  *DatasetInfo      `json:"dataset,omitempty"`
	Pid      int               `json:"pid,omitempty"` // EventUnmounting
}

// DatasetInfo is what a mount serves (EventDataset). Bytes and Files come
// from the manifest the mount loaded, within its own memory limit; without
// a manifest they are unknown (zero, Manifest false). A mount that refuses
// its manifest does not run, so it answers nothing.
type DatasetInfo struct {
	Source   string `json:"source"`   // the mount's source URL
	ID       string `json:"id"`       // the backend ID (the cache keys' dataset)
	Manifest bool   `json:"manifest"` // the mount serves from a manifest
	Bytes    int64  `json:"bytes"`    // the manifest's total bytes of files
	Files    int64  `json:"files"`    // the manifest's files
	// Epoch is the mount's current epoch of lookups, from 1: an epoch is
	// Bytes of lookups (cache.Store.SetEpochBytes); 0 without a manifest.
	// The Epoch…Bytes are the current epoch's hit, miss and prefetched-hit
	// bytes (cache.Stats).
	Epoch                   int64 `json:"epoch,omitempty"`
	EpochHitBytes           int64 `json:"epoch_hit_bytes,omitempty"`
	EpochMissBytes          int64 `json:"epoch_miss_bytes,omitempty"`
	EpochPrefetchedHitBytes int64 `json:"epoch_prefetched_hit_bytes,omitempty"`
}

// PrefetchStarted describes the prefetch a mount runs for a client.
type PrefetchStarted struct {
	Pid           int    `json:"pid"`
	Source        string `json:"source"`
	Dataset       string `json:"dataset"`
	Manifest      bool   `json:"manifest"`
	WholeFileMax  int64  `json:"whole_file_max"`
	BlockSize     int64  `json:"block_size"`
	CapacityBytes int64  `json:"capacity_bytes"`
}

// ControlSocket returns the path of the control socket of a mount whose
// cache directory is cacheDir.
func ControlSocket(cacheDir string) string { return filepath.Join(cacheDir, ControlSocketName) }

// HandoverSocketName is the handover socket of a mount in its cache
// directory: `cachefs mount --takeover` connects to it (pkg/handover).
const HandoverSocketName = "handover.sock"

// HandoverSocket returns the path of the handover socket of a mount whose
// cache directory is cacheDir.
func HandoverSocket(cacheDir string) string { return filepath.Join(cacheDir, HandoverSocketName) }

// SocketAddr returns an address for the unix socket at path that fits in a
// sockaddr_un (108 bytes): path itself, or /proc/self/fd/N/NAME through an
// open descriptor of its directory. done releases the descriptor.
func SocketAddr(path string) (addr string, done func(), err error) {
	if len(path) < 100 {
		return path, func() {}, nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path)), func() { d.Close() }, nil
}

// ListenSocket listens on the unix socket at path, mode 0600, for the mount
// that holds the cache directory's lock: a socket file already there is a
// dead mount's and is replaced. Closing the listener leaves the file (the
// address may be a /proc path, and a successor may listen on the same one).
// Connecting needs write permission on the socket, which the umask denies
// to others until the chmod (and the cache directory is 0700 anyway).
func ListenSocket(path string) (*net.UnixListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	addr, done, err := SocketAddr(path)
	if err != nil {
		return nil, err
	}
	defer done()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
