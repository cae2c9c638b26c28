package mount

// Handover of the FUSE connection between two mount processes (package
// handover; docs/DESIGN.md, "FUSE connection handover"). Every mount
// listens on its cache directory's handover socket (listenHandover); a
// mount started with Config.Takeover takes the connection of the mount
// listening there instead of mounting (takeOver, serveTaken).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/handover/fuseconn"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// ErrTakeover: the running mount could not be taken over (it serves on),
// or the connection was lost after it had handed over.
var ErrTakeover = errors.New("mount: takeover")

// handoverState is a mount's part in handovers. taken is set by takeOver
// and used by serveTaken; init, initOut and conn are set once the mount
// serves (immutable after Start); done is closed once a successor has the
// connection.
type handoverState struct {
	taken   *handover.Taken
	fsState *fusefs.HandoverState
	start   time.Time // when the running mount was asked

	init, initOut []byte         // a taken connection's INIT (else read from the go-fuse server)
	conn          *fuseconn.Conn // a taken connection's loop
	ln            *handover.Listener
	done          chan struct{}

	counters connStats // the connection's handovers, recoveries and stalls, across processes
}

func (m *Mount) mountOptions() fusefs.MountOptions {
	return fusefs.MountOptions{
		FsName:     "cachefs:" + m.src.String(),
		AllowOther: m.cfg.AllowOther,
		Debug:      m.cfg.Debug,
	}
}

// takeOver asks the running mount for its connection and checks that this
// mount can serve it: the same mount point, dataset version and INIT
// answer. It returns once the running mount has exited; before that, any
// error gives the connection back to it.
func (m *Mount) takeOver(ctx context.Context, b backend.Backend, man *manifest.Manifest) error {
	m.handover.start = time.Now()
	t, err := handover.Take(ctx, m.cfg.Takeover, m.cfg.Version)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTakeover, err)
	}
	if err := m.checkTaken(t, b, man); err != nil {
		t.Refuse(err.Error())
		return fmt.Errorf("%w: %w", ErrTakeover, err)
	}
	if err := t.Accept(ctx); err != nil {
		return fmt.Errorf("%w: waiting for the running mount to exit: %w", ErrTakeover, err)
	}
	m.handover.taken = t
	m.log.Info("took over the connection; the running mount exited", "from_version", t.Version,
		"waited", time.Since(m.handover.start).Round(time.Microsecond))
	return nil
}

func (m *Mount) checkTaken(t *handover.Taken, b backend.Backend, man *manifest.Manifest) error {
	if filepath.Clean(t.Mountpoint) != filepath.Clean(m.cfg.Mountpoint) {
		return fmt.Errorf("the running mount serves %s, not %s", t.Mountpoint, m.cfg.Mountpoint)
	}
	var st fusefs.HandoverState
	if err := json.Unmarshal(t.FS, &st); err != nil {
		return fmt.Errorf("file system state: %w", err)
	}
	if want := fusefs.Identity(man, b.ID()); st.Dataset != want {
		return fmt.Errorf("the running mount serves %q, this one would serve %q", st.Dataset, want)
	}
	if err := m.checkInit(t.Init, t.InitOut); err != nil {
		return err
	}
	m.handover.fsState = &st
	return nil
}

// checkInit: the connection's INIT, replayed into this binary's options,
// gets the reply the connection negotiated, byte for byte (a successor
// or a recovering process must not serve it with other settings).
func (m *Mount) checkInit(init, initOut []byte) error {
	got, err := fuseconn.ReplayInit(fusefs.FuseOptions(m.mountOptions()), init)
	if err != nil {
		return err
	}
	if string(got) != string(initOut) {
		return fmt.Errorf("%w: this binary negotiates %x, the connection negotiated %x", fuseconn.ErrInit, got, initOut)
	}
	return nil
}

// serveTaken serves the taken connection with fsys: the kernel first
// resends the requests the old mount held back.
func (m *Mount) serveTaken(fsys *fusefs.FS) (fuseServer, error) {
	t := m.handover.taken
	kind, since := stallTakeover, m.handover.start
	if m.cfg.Recover != nil {
		kind = stallRecovery
		if !t.DiedAt.IsZero() && t.DiedAt.Before(since) {
			since = t.DiedAt // the holder saw the death then
		}
	}
	if err := m.handover.counters.load(t.Counters); err != nil {
		m.log.Warn("the previous process's connection counters are unusable; counting from zero", "err", err)
	}
	dev := fuseconn.Device{Fd: t.Fd}
	raw, err := fsys.Adopt(m.handover.fsState, dev, t.Fd)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTakeover, err)
	}
	conn, err := fuseconn.NewConn(dev, raw, fusefs.FuseOptions(m.mountOptions()), t.Init, t.InitOut, m.cfg.Mountpoint, m.log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTakeover, err)
	}
	if err := conn.Resend(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTakeover, err)
	}
	conn.Start()
	m.handover.init, m.handover.initOut, m.handover.conn = t.Init, t.InitOut, conn
	stall := time.Since(since)
	c := m.handover.counters.record(kind, stall)
	m.log.Info("serving the taken-over connection", "stall", stall.Round(time.Microsecond), "kind", kind,
		"handovers", c.Handovers, "recoveries", c.Recoveries, "open_files", len(m.handover.fsState.Handles), "passthrough_backings", len(m.handover.fsState.Backings),
		"nodes", len(m.handover.fsState.Nodes))
	return conn, nil
}

// listenHandover serves the handover socket: the mount serves on without
// it (no upgrade in place) when it cannot listen.
func (m *Mount) listenHandover() {
	m.handover.done = make(chan struct{})
	ln, err := handover.Listen(mountapi.HandoverSocket(m.cfg.CacheDir))
	if err != nil {
		m.log.Warn("no handover socket: this mount cannot be taken over", "err", err)
		return
	}
	m.handover.ln = ln
	go func() {
		if err := ln.Serve(handover.Offer{Freeze: m.freeze, Thaw: m.fsys.Thaw, Held: m.held}, m.log.Warn); err == nil {
			close(m.handover.done)
		}
	}()
}

// connection returns the FUSE connection's descriptor and the state a
// successor and a holder both get: version, INIT request and reply, mount
// point and the connection's counters (the file system's state, FS, is
// the caller's to add).
func (m *Mount) connection() (handover.State, int, error) {
	fd := m.fsys.DeviceFd()
	if fd < 0 {
		return handover.State{}, -1, errors.New("mount: the connection's descriptor is unknown")
	}
	init, initOut, err := m.initOf()
	if err != nil {
		return handover.State{}, -1, err
	}
	return handover.State{Version: m.cfg.Version, Init: init, InitOut: initOut, Mountpoint: m.cfg.Mountpoint,
		Counters: m.handover.counters.marshal()}, fd, nil
}

// freeze stops serving for a successor and returns what it needs.
func (m *Mount) freeze() (handover.State, int, error) {
	hs, fd, err := m.connection()
	if err != nil {
		return handover.State{}, -1, err
	}
	start := time.Now()
	st, err := m.fsys.Freeze()
	if err != nil {
		return handover.State{}, -1, err
	}
	if hs.FS, err = json.Marshal(st); err != nil {
		m.fsys.Thaw()
		return handover.State{}, -1, err
	}
	m.log.Info("handing over: requests held back", "drained", time.Since(start).Round(time.Microsecond),
		"open_files", len(st.Handles), "nodes", len(st.Nodes))
	return hs, fd, nil
}

// initOf is the connection's INIT request and what this mount answered.
func (m *Mount) initOf() (init, initOut []byte, err error) {
	if m.handover.init != nil {
		return m.handover.init, m.handover.initOut, nil
	}
	srv, ok := m.server.(*fuse.Server)
	if !ok {
		return nil, nil, errors.New("mount: no INIT to hand over")
	}
	init = fuseconn.InitRequest(srv.KernelSettings())
	if initOut, err = fuseconn.ReplayInit(fusefs.FuseOptions(m.mountOptions()), init); err != nil {
		return nil, nil, err
	}
	return init, initOut, nil
}

// handedOverClose bounds how long a mount that handed its connection over
// closes its store, sockets and backend before it exits anyway: its
// successor's readers wait for its end (the cache survives a kill).
const handedOverClose = 2 * time.Second

// closeWithin is close, given up on after d.
func (m *Mount) closeWithin(d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- m.close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		m.log.Warn("handed over: closing took too long; exiting anyway", "waited", d)
		return nil
	}
}
