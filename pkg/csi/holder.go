package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// The node plugin as a holder of its mounts' FUSE connections (issue 26,
// docs/DESIGN.md "CSI"): after a launch, and for each mount it re-adopts,
// it asks the mount's handover socket for a duplicate of its /dev/fuse
// descriptor (handover.Hold), keeps it with the held state, and lends both
// on a per-dataset socket under the state dir (handover.ServeHeld). While
// it holds, the connection outlives every process of the mount, the
// mounter's pod included: a recovering `cachefs mount --supervise
// --recover-from SOCKET` serves it on (recover.go).

// holderVersion is the version a holder gives in its hello (for the
// mount's log).
const holderVersion = "csi-node"

// holdWait bounds how long hold asks a mount that does not answer yet (a
// supervised mount's child is still starting).
const holdWait = 10 * time.Second

// heldMount is the connection of one dataset mount the node plugin holds.
// sock and ln are immutable; mu guards held (its Fd, from the first hold,
// never changes; its State is refreshed) and stopWatch.
type heldMount struct {
	sock string // the lending socket, <state dir>/node/held/KEY.sock
	ln   *handover.Listener
	conn uint32 // the FUSE connection's number (fusectl) at the mount point

	mu        sync.Mutex
	held      *handover.Held
	stopWatch func() // stops the watch of the dataset's supervisor; nil: none
}

// get is what the lending socket answers: the held descriptor and state.
func (h *heldMount) get() (*handover.Held, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cp := *h.held
	return &cp, nil
}

// setState replaces the held state (its counters), keeping the descriptor.
func (h *heldMount) setState(st handover.State) {
	h.mu.Lock()
	h.held.State = st
	h.mu.Unlock()
}

// holders are the held connections by dataset key; its own lock, taken
// with or without a dataset's lock, never with nodeState.mu.
type holders struct {
	mu sync.Mutex
	m  map[string]*heldMount
}

func (hs *holders) get(key string) *heldMount {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.m[key]
}

func (hs *holders) put(key string, h *heldMount) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m == nil {
		hs.m = map[string]*heldMount{}
	}
	hs.m[key] = h
}

func (hs *holders) take(key string) *heldMount {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[key]
	delete(hs.m, key)
	return h
}

// heldPath is the lending socket of a dataset. A long state dir is fine:
// mountapi.SocketAddr reaches paths past sockaddr_un's 108 bytes.
func (n *nodeState) heldPath(key string) string {
	return filepath.Join(n.cfg.dir, "held", key+".sock")
}

// askHold asks the mount of ds for a hold, retrying a socket that does not
// answer yet for up to wait. A mount that refuses (a listing mount, or
// one of an older binary) is not retried.
func askHold(ds *datasetMount, wait time.Duration) (*handover.Held, error) {
	sock := mountapi.HandoverSocket(ds.CacheDir)
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := handover.Hold(ctx, sock, holderVersion)
		cancel()
		if err == nil {
			if h.Mountpoint != ds.MountPoint {
				unix.Close(h.Fd)
				return nil, fmt.Errorf("csi: the mount at %s holds %s, not %s", sock, h.Mountpoint, ds.MountPoint)
			}
			return h, nil
		}
		if errors.Is(err, handover.ErrRefused) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hold makes the node plugin a holder of ds's connection (refreshing the
// held state if it holds already) and watches its supervisor. A mount that
// refuses leaves it without a hold: a death of that mount is repaired as
// before (unmounted and mounted again). Called with ds's lock held.
func (n *nodeState) hold(ds *datasetMount, wait time.Duration) {
	if h := n.holds.get(ds.Key); h != nil {
		n.refreshHold(ds, h)
		n.watch(ds, h)
		return
	}
	held, err := askHold(ds, wait)
	if err != nil {
		n.cfg.log.Info("dataset mount not held: a death of its processes is repaired by a new mount", "key", ds.Key, "err", err)
		return
	}
	path := n.heldPath(ds.Key)
	ln, err := handover.Listen(path)
	if err != nil {
		unix.Close(held.Fd)
		n.cfg.log.Warn("dataset mount not held: cannot listen on its lending socket", "key", ds.Key, "err", err)
		return
	}
	conn, _ := fuseConn(ds.MountPoint)
	h := &heldMount{sock: path, ln: ln, held: held, conn: conn}
	key := ds.Key
	go func() {
		_ = handover.ServeHeld(ln, h.get, func(msg string, args ...any) {
			n.cfg.log.Info(msg, append([]any{"key", key}, args...)...)
		})
	}()
	n.holds.put(ds.Key, h)
	n.watch(ds, h)
	n.cfg.log.Info("holding the dataset mount's FUSE connection", "key", ds.Key, "pid", held.Pid, "socket", path)
}

// refreshHold asks the mount again for its state (its connection counters
// change with each takeover or recovery) and keeps it, with the first
// descriptor. Called with ds's lock held.
func (n *nodeState) refreshHold(ds *datasetMount, h *heldMount) {
	held, err := askHold(ds, 0)
	if err != nil {
		return // not serving now: the watch or the health check sees why
	}
	unix.Close(held.Fd) // the same connection as the one held
	h.setState(held.State)
}

// unhold stops holding ds's connection: the watch stops, the lending
// socket closes and goes, the descriptor closes. Called with ds's lock
// held, before a mount is stopped or mounted anew.
func (n *nodeState) unhold(key string) {
	h := n.holds.take(key)
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.stopWatch != nil {
		h.stopWatch()
		h.stopWatch = nil
	}
	fd := h.held.Fd
	h.mu.Unlock()
	_ = h.ln.Close()
	_ = os.Remove(h.sock)
	unix.Close(fd)
}
