// Package handover moves a live FUSE connection from one `cachefs mount`
// process to another, so that an upgrade does not unmount (docs/DESIGN.md,
// "FUSE connection handover"). The running mount listens on a root-only
// unix socket in its cache directory (Listen, Serve); a new process
// connects (Take), receives the /dev/fuse descriptor (SCM_RIGHTS) with the
// kernel's INIT request, what the running mount negotiated and the file
// system's state, and serves the connection with its own request loop
// (Conn). The running mount holds back new requests, finishes those in
// flight, hands over and exits without unmounting; the new one has the
// kernel resend the requests held back (Conn.Resend) once it has exited.
//
// The package knows go-fuse's protocol types and the kernel's, nothing of
// the dataset: the file system's state is an opaque JSON document.
package handover

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// State is what a running mount hands over besides the descriptor.
type State struct {
	// Version is the running binary's version (for the log).
	Version string `json:"version"`
	// Init is the kernel's INIT request (header and InitIn), InitOut what
	// the running mount answered.
	Init    []byte `json:"init"`
	InitOut []byte `json:"init_out"`
	// Mountpoint is where the connection is mounted.
	Mountpoint string `json:"mountpoint"`
	// FS is the file system's state (fusefs.HandoverState).
	FS json.RawMessage `json:"fs"`
	// Counters are the connection's handover and recovery counts and
	// stalls so far (pkg/mount's, opaque here): each process serving the
	// connection carries them on, so they count across processes.
	Counters json.RawMessage `json:"counters,omitempty"`
	// DiedAt is when the process serving the connection was seen dead:
	// set by the holder that lends it to a recovering process (the stall
	// is measured from it); zero for a handover.
	DiedAt time.Time `json:"died_at,omitzero"`
}

// Limits of the protocol: a hostile or broken peer cannot make either side
// allocate more or wait longer.
const (
	maxHelloBytes = 4 << 10
	maxStateBytes = 1 << 30 // a backend tree of ~5M nodes
	helloTimeout  = 10 * time.Second
	// replyTimeout bounds how long the running mount stays frozen waiting
	// for the new one's answer (it validates the state meanwhile).
	replyTimeout = 60 * time.Second
)

// ErrRefused: the other side refused or broke off the handover.
var ErrRefused = errors.New("handover: refused")

type hello struct {
	Version string `json:"version"`
	// Hold asks for a duplicate of the descriptor and the INIT, without a
	// handover: a holder that recovers the mount if its process dies
	// (Hold, recover.go).
	Hold bool `json:"hold,omitempty"`
}

// Listener is a running mount's handover socket.
type Listener struct {
	ln   *net.UnixListener
	path string
	kept int // the socket of the successor that took the connection, kept open; -1: none
}

// Listen listens on path (a socket left there by a dead mount is
// replaced; the caller holds the cache directory's lock), mode 0600.
func Listen(path string) (*Listener, error) {
	ln, err := mountapi.ListenSocket(path) // the successor listens on the same path
	if err != nil {
		return nil, fmt.Errorf("handover: socket %s: %w", path, err)
	}
	return &Listener{ln: ln, path: path, kept: -1}, nil
}

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Release closes the successor's socket that Serve kept open, which tells
// it that this process can read no request any more: the process's end
// does it, and a test that plays both sides in one process.
func (l *Listener) Release() {
	if l.kept >= 0 {
		unix.Close(l.kept)
		l.kept = -1
	}
}

// Offer is the running mount's side of one handover: Freeze stops serving
// and returns the state and the /dev/fuse descriptor (still the caller's),
// Thaw serves on after a failed handover.
type Offer struct {
	Freeze func() (State, int, error)
	Thaw   func()
	// Held returns what a holder gets (the state without the file
	// system's, and the descriptor, still the caller's); nil refuses
	// holders.
	Held func() (State, int, error)
}

// Serve answers successors until one has taken the connection, then
// returns nil: the caller must exit without unmounting, and soon (the
// successor waits for this process's end, which it sees as the socket's).
// It returns the accept error once the listener is closed.
func (l *Listener) Serve(o Offer, log func(msg string, args ...any)) error {
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return err
		}
		kept, err := l.offer(c, o)
		if errors.Is(err, errHeld) {
			c.Close()
			continue
		}
		if err == nil {
			l.kept = kept // c's duplicate: the socket stays open
			c.Close()
			l.ln.Close()
			return nil
		}
		log("handover refused; serving on", "err", err)
		c.Close()
	}
}

func (l *Listener) offer(c *net.UnixConn, o Offer) (int, error) {
	if _, err := samePeer(c); err != nil {
		return -1, err
	}
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	r := bufio.NewReaderSize(io.LimitReader(c, maxHelloBytes), maxHelloBytes)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return -1, fmt.Errorf("handover: hello: %w", err)
	}
	var h hello
	if err := json.Unmarshal(line, &h); err != nil {
		return -1, fmt.Errorf("handover: hello: %w", err)
	}
	if h.Hold {
		return -1, hold(c, o)
	}
	if o.Freeze == nil {
		return -1, fmt.Errorf("%w: this socket only holds the connection; it hands over to no one", ErrRefused)
	}
	st, fd, err := o.Freeze()
	if err != nil {
		return -1, err
	}
	if err := send(c, st, fd); err != nil {
		o.Thaw()
		return -1, err
	}
	_ = c.SetDeadline(time.Now().Add(replyTimeout))
	answer, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(answer) != "ok" {
		o.Thaw()
		return -1, fmt.Errorf("%w by %s: %q %v", ErrRefused, h.Version, strings.TrimSpace(answer), err)
	}
	// Keep the socket open until this process ends (a descriptor the Go
	// runtime does not own, so no finalizer closes it): its end is how
	// the successor learns that no request can be read here any more.
	kept := -1
	raw, err := c.SyscallConn()
	if err == nil {
		_ = raw.Control(func(s uintptr) { kept, _ = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	}
	return kept, nil
}

// send writes the state's length with the descriptor, then the state.
func send(c *net.UnixConn, st State, fd int) error {
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("handover: state: %w", err)
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(body)))
	_ = c.SetDeadline(time.Now().Add(replyTimeout))
	if _, _, err := c.WriteMsgUnix(n[:], unix.UnixRights(fd), nil); err != nil {
		return fmt.Errorf("handover: send descriptor: %w", err)
	}
	if _, err := c.Write(body); err != nil {
		return fmt.Errorf("handover: send state: %w", err)
	}
	return nil
}

// samePeer refuses a peer of another uid (the socket is 0600 in a 0700
// directory already: this is the second lock) and returns the peer's pid.
func samePeer(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(s uintptr) { cred, cerr = unix.GetsockoptUcred(int(s), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("handover: peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return 0, fmt.Errorf("%w: peer uid %d is not ours", ErrRefused, cred.Uid)
	}
	return int(cred.Pid), nil
}

// Taken is a connection received from a running mount, not yet accepted.
type Taken struct {
	State
	Fd int // the /dev/fuse descriptor, now this process's
	// Pid is the process that sent it (SO_PEERCRED when it connected).
	Pid  int
	conn *net.UnixConn
	r    *bufio.Reader
}

// Take asks the running mount listening at path for its connection.
func Take(ctx context.Context, path, version string) (*Taken, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	t, err := take(c, hello{Version: version})
	if err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

func take(c *net.UnixConn, h hello) (*Taken, error) {
	pid, err := samePeer(c)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(h)
	_ = c.SetDeadline(time.Now().Add(replyTimeout))
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("handover: hello: %w", err)
	}
	var n [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	got, oobn, _, _, err := c.ReadMsgUnix(n[:], oob)
	if err != nil {
		return nil, fmt.Errorf("handover: receive descriptor: %w", err)
	}
	fd, err := rights(oob[:oobn])
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	if _, err := io.ReadFull(r, n[got:]); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handover: receive state: %w", err)
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > maxStateBytes {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: state of %d bytes (at most %d)", ErrRefused, size, maxStateBytes)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handover: receive state: %w", err)
	}
	t := &Taken{Fd: fd, Pid: pid, conn: c, r: r}
	if err := json.Unmarshal(body, &t.State); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handover: state: %w", err)
	}
	return t, nil
}

func rights(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("%w: no descriptor received (%v)", ErrRefused, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%w: want one descriptor, got %d (%v)", ErrRefused, len(fds), err)
	}
	unix.CloseOnExec(fds[0])
	return fds[0], nil
}

// Refuse gives the connection back: the running mount serves on.
func (t *Taken) Refuse(reason string) {
	_, _ = t.conn.Write([]byte("refused: " + strings.ReplaceAll(reason, "\n", " ") + "\n"))
	t.conn.Close()
	unix.Close(t.Fd)
}

// Accept takes the connection: the running mount exits. It returns once
// it has (its end of the socket closed): from then on no request can be
// read by it, and Conn.Resend may run.
func (t *Taken) Accept(ctx context.Context) error {
	defer t.conn.Close()
	_ = t.conn.SetDeadline(time.Time{})
	if _, err := t.conn.Write([]byte("ok\n")); err != nil {
		return fmt.Errorf("handover: accept: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, t.r)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ListenerPid is the pid of the process listening at the handover socket
// path (SO_PEERCRED of a connection it has not answered yet): it tells a
// mount that refuses holders from one not listening yet.
func ListenerPid(ctx context.Context, path string) (int, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	return samePeer(c)
}

// dial connects to the handover socket at path.
func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	addr, done, err := mountapi.SocketAddr(path)
	if err != nil {
		return nil, fmt.Errorf("handover: connect %s: %w", path, err)
	}
	defer done()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, fmt.Errorf("handover: connect %s: %w", path, err)
	}
	return nc.(*net.UnixConn), nil
}
