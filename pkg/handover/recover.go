package handover

// Crash recovery (docs/DESIGN.md, "Crash recovery"): a holder keeps a
// duplicate of a running mount's /dev/fuse descriptor with the kernel's
// INIT, asked for over the mount's handover socket (the same root-only,
// uid-checked socket as a handover). When the mount process dies without
// handing over, the connection lives on in the holder's descriptor; a new
// process serves it (NewConn with the held INIT, then Resend: the requests
// the dead process had read are queued again).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// errHeld: Serve answered a holder, not a successor (it serves on).
var errHeld = errors.New("handover: held")

// maxHeldState bounds the state a holder receives or a recovering process
// reads: INIT, its reply, the mount point and the dataset's identity.
const maxHeldState = 1 << 20

// hold sends a holder the descriptor and the state, without freezing.
func hold(c *net.UnixConn, o Offer) error {
	if o.Held == nil {
		return fmt.Errorf("%w: this mount gives no holder its descriptor", ErrRefused)
	}
	st, fd, err := o.Held()
	if err != nil {
		return err
	}
	if err := send(c, st, fd); err != nil {
		return err
	}
	return errHeld
}

// Held is a duplicate of a running mount's descriptor with its state.
type Held struct {
	State
	Fd int // the holder's duplicate of the /dev/fuse descriptor
	// Pid is the process that answered: the serving mount, or another
	// holder (ServeHeld).
	Pid int
}

// Hold asks the mount listening at path for a duplicate of its descriptor
// and its INIT; the mount serves on.
func Hold(ctx context.Context, path, version string) (*Held, error) {
	nc, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	t, err := take(nc, hello{Version: version, Hold: true})
	if err != nil {
		return nil, err
	}
	if len(t.Init) == 0 || len(t.InitOut) == 0 || len(t.State.FS) > maxHeldState {
		unix.Close(t.Fd)
		return nil, fmt.Errorf("%w: a held state without INIT", ErrRefused)
	}
	return &Held{State: t.State, Fd: t.Fd, Pid: t.Pid}, nil
}

// WriteState writes st to w (a pipe to the recovering process) and closes it.
func WriteState(w io.WriteCloser, st State) error {
	err := json.NewEncoder(w).Encode(st)
	return errors.Join(err, w.Close())
}

// ReadState reads the state a holder wrote to the inherited descriptor fd
// (WriteState), at most 1 MiB, within 10 s.
func ReadState(fd int) (State, error) {
	f := os.NewFile(uintptr(fd), "recover-state")
	if f == nil {
		return State{}, fmt.Errorf("handover: recovery state: bad descriptor %d", fd)
	}
	defer f.Close()
	_ = f.SetReadDeadline(time.Now().Add(helloTimeout))
	var st State
	if err := json.NewDecoder(io.LimitReader(f, maxHeldState)).Decode(&st); err != nil {
		return State{}, fmt.Errorf("handover: recovery state on descriptor %d: %w", fd, err)
	}
	return st, nil
}

// ServeHeld answers holders on l with held's descriptor and state until l
// is closed: a holder (the CSI node plugin) lends the connection it holds
// to a process that recovers it (`cachefs mount --supervise
// --recover-from SOCKET`) or holds it too. It hands the connection over to
// no one (a takeover is refused). held is read under the caller's care:
// get returns the current one.
func ServeHeld(l *Listener, get func() (*Held, error), log func(msg string, args ...any)) error {
	return l.Serve(Offer{Held: func() (State, int, error) {
		h, err := get()
		if err != nil {
			return State{}, -1, err
		}
		return h.State, h.Fd, nil
	}}, log)
}
