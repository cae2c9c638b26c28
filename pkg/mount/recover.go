package mount

// Crash recovery (docs/DESIGN.md, "Crash recovery"): a holder keeps a
// duplicate of the mount's /dev/fuse descriptor (handover.Hold, asked for
// over the handover socket), so the connection outlives a `cachefs` that
// dies without handing over; a new mount started with Config.Recover
// serves it (recoverConn, then serveTaken as after a takeover). Supervise
// is such a holder: `cachefs mount --supervise`.

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/manifest"
)

// ErrRecover: a held connection this mount cannot serve (another mount
// point, dataset version or INIT, or, without a manifest, no node table
// of the connection that can be trusted).
var ErrRecover = errors.New("mount: recover")

// ErrNoNodeTable: a mount without a manifest whose node table could not
// be made: its node ids die with its process, so it refuses holders.
var ErrNoNodeTable = fmt.Errorf("%w: no node table (node ids of this listing-based mount die with its process)", ErrRecover)

// heldDataset is the file system state a holder gets: the dataset's
// identity (node ids of a manifest mount are the manifest's; file handles
// are adopted at their first READ), the token of the connection's
// backing table (its passthrough ids and their handles, in the cache dir:
// backingTablePath) and, without a manifest, of its node table (the node
// ids given to the kernel: nodeTablePath), so that a table of another
// connection is never trusted.
type heldDataset struct {
	Dataset      string `json:"dataset"`
	BackingTable string `json:"backing_table,omitempty"`
	NodeTable    string `json:"node_table,omitempty"`
}

// backingTablePath is where a mount keeps its connection's backing table
// (fusefs.BackingTable); the cache store reads only its entries directory.
func backingTablePath(cacheDir string) string {
	return filepath.Join(cacheDir, "connection", "backing")
}

// nodeTablePath is where a mount without a manifest records its node ids
// (fusefs.NodeTable).
func nodeTablePath(cacheDir string) string {
	return filepath.Join(cacheDir, "connection", "nodes")
}

// held is what a holder gets: INIT, mount point, identity and descriptor.
func (m *Mount) held() (handover.State, int, error) {
	if m.manifest == nil && m.fsys.NodeTable() == nil {
		return handover.State{}, -1, ErrNoNodeTable
	}
	hs, fd, err := m.connection()
	if err != nil {
		return handover.State{}, -1, err
	}
	ds := heldDataset{Dataset: m.fsys.Identity()}
	if t := m.fsys.BackingTable(); t != nil {
		ds.BackingTable = t.Token()
	}
	if t := m.fsys.NodeTable(); t != nil {
		ds.NodeTable = t.Token()
	}
	if hs.FS, err = json.Marshal(ds); err != nil {
		return handover.State{}, -1, err
	}
	return hs, fd, nil
}

// recoverConn checks that this mount can serve the held connection and
// prepares serveTaken: the dead process's node ids are the manifest's (or,
// without one, in the connection's node table, which openNodeTable loads
// once the cache is locked), its file handles are adopted at their first READ, its passthrough backing
// ids and their open handles are in the connection's backing table, which
// openBackingTable maps once the cache is locked (this mount reuses an id
// for new opens of its node and unregisters it at the last RELEASE).
func (m *Mount) recoverConn(b backend.Backend, man *manifest.Manifest) error {
	h := m.cfg.Recover
	m.handover.start = time.Now()
	if filepath.Clean(h.Mountpoint) != filepath.Clean(m.cfg.Mountpoint) {
		return fmt.Errorf("%w: the held connection is mounted at %s, not %s", ErrRecover, h.Mountpoint, m.cfg.Mountpoint)
	}
	var ds heldDataset
	if err := json.Unmarshal(h.FS, &ds); err != nil {
		return fmt.Errorf("%w: held state: %w", ErrRecover, err)
	}
	if want := fusefs.Identity(man, b.ID()); ds.Dataset != want {
		return fmt.Errorf("%w: the held connection served %q, this mount would serve %q", ErrRecover, ds.Dataset, want)
	}
	if man == nil && ds.NodeTable == "" {
		return fmt.Errorf("%w: the held state names no node table (a mount without a manifest from before node tables): the dead process's node ids are unknown", ErrRecover)
	}
	if err := m.checkInit(h.Init, h.InitOut); err != nil {
		return fmt.Errorf("%w: %w", ErrRecover, err)
	}
	m.handover.taken = &handover.Taken{State: h.State, Fd: h.Fd}
	m.handover.fsState = &fusefs.HandoverState{Dataset: ds.Dataset, BackingTable: ds.BackingTable, NodeTable: ds.NodeTable}
	m.log.Info("recovering the connection of a dead mount process", "from_version", h.Version)
	return nil
}

// openBackingTable maps the connection's backing table: a new one for a
// fresh mount, the predecessor's after a takeover or a crash recovery (by
// the token its state names). It runs under the cache lock, so no other
// mount of the cache dir writes it. Without one the mount serves on, with
// passthrough, but a process recovering its connection cannot know its
// backing ids. Recovering without the dead process's table (another
// connection's file, or a holder from before tables), the dead process's
// handle count is unknown too: this one's starts at a random point of its
// 24 bits, so that a new handle is unlikely to be one of its handles still
// open (which would then share a table entry).
func (m *Mount) openBackingTable() *fusefs.BackingTable {
	var token string
	if st := m.handover.fsState; st != nil {
		token = st.BackingTable
	}
	t, loaded, err := fusefs.OpenBackingTable(backingTablePath(m.cfg.CacheDir), token)
	if err != nil {
		m.log.Warn("no backing table: passthrough ids of this connection cannot be recovered after a crash", "err", err)
	}
	switch {
	case m.cfg.Recover != nil && !loaded:
		var r [4]byte
		_, _ = rand.Read(r[:])
		m.handover.fsState.NextFh = uint64(binary.BigEndian.Uint32(r[:]) >> 8)
		m.log.Warn("recovering without the dead process's backing table: opens of the files it left open fail (EIO) until they close",
			"held_token", token != "")
	case m.cfg.Recover != nil:
		m.log.Info("recovered the dead process's backing table", "open_backing_handles", len(t.Records()))
	}
	return t
}

// openNodeTable opens the node table of a mount without a manifest (nil
// with one): a new one for a fresh mount; the predecessor's after a
// takeover or a crash recovery, by the token its state names. A recovery
// whose table is not the connection's, corrupt, over the limits or
// incomplete is refused (ErrRecover: its node ids are unknown). A takeover
// then starts a new table, which records the nodes of the handover state.
// Without a table a fresh mount serves on, but refuses holders. It runs
// under the cache lock, so no other mount of the cache dir writes it.
func (m *Mount) openNodeTable(man *manifest.Manifest) (*fusefs.NodeTable, error) {
	if man != nil || m.cfg.noNodeTable {
		return nil, nil
	}
	lim := fusefs.NodeTableLimits{
		MaxRecords: cmp.Or(m.cfg.ListingCacheEntries, fusefs.DefaultListingCacheEntries),
		MaxBytes:   cmp.Or(m.cfg.MaxListingMemory, fusefs.DefaultMaxListingMemory),
	}
	path := nodeTablePath(m.cfg.CacheDir)
	var token string
	if st := m.handover.fsState; st != nil {
		token = st.NodeTable
	}
	if token != "" {
		t, err := fusefs.OpenNodeTable(path, token, lim)
		switch {
		case err == nil && m.cfg.Recover != nil:
			m.log.Info("recovered the dead process's node table", "nodes", len(t.Records()))
			return t, nil
		case err == nil:
			return t, nil
		case m.cfg.Recover != nil:
			return nil, fmt.Errorf("%w: %w", ErrRecover, err)
		}
		m.log.Warn("the running mount's node table is unusable; starting a new one with the handed-over nodes", "err", err)
	}
	t, err := fusefs.OpenNodeTable(path, "", lim)
	if err != nil {
		m.log.Warn("no node table: this mount cannot be recovered after a crash (it refuses holders)", "err", err)
		return nil, nil
	}
	return t, nil
}
