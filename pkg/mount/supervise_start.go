package mount

// The supervisor's mount processes: their argv and descriptors (start),
// the wait until one serves and answers the supervisor's hold (ready), and
// the connection a holder lends to the first one (borrow).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// errNotRecoverable: the mount serves but refuses holders (a
// listing-based mount that could not make its node table: ErrNoNodeTable).
var errNotRecoverable = errors.New("the mount refuses holders")

// borrowTimeout bounds the connect to the holder at RecoverFrom (its answer
// is bounded by the handover protocol's own timeouts).
const borrowTimeout = 30 * time.Second

// borrow asks the holder at RecoverFrom for the connection and checks it
// is this mount point's (the first process checks the dataset and INIT).
func (c SuperviseConfig) borrow(ctx context.Context) (*handover.Held, error) {
	bctx, cancel := context.WithTimeout(ctx, borrowTimeout)
	defer cancel()
	h, err := handover.Hold(bctx, c.RecoverFrom, c.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: the holder at %s lends no connection: %w", ErrRecoverFrom, c.RecoverFrom, err)
	}
	if filepath.Clean(h.Mountpoint) != filepath.Clean(c.Mountpoint) {
		unix.Close(h.Fd)
		return nil, fmt.Errorf("%w: the holder at %s holds the connection mounted at %s, not %s",
			ErrRecoverFrom, c.RecoverFrom, h.Mountpoint, c.Mountpoint)
	}
	if h.DiedAt.IsZero() {
		h.DiedAt = time.Now() // the holder did not say: the stall is measured from here
	}
	c.Log.Info("supervise: recovering the connection a holder lends", "holder", c.RecoverFrom, "holder_pid", h.Pid,
		"died_at", h.DiedAt)
	return h, nil
}

// start starts a mount process: a fresh mount, one taking over the mount
// at takeover, or one recovering rec (with rec.DiedAt set).
func (c SuperviseConfig) start(rec *handover.Held, takeover string) (*child, error) {
	args := append([]string(nil), c.Args...)
	var extra []*os.File
	if c.Credentials != nil {
		r, err := mountapi.CredentialsPipe(c.Credentials.Lines())
		if err != nil {
			return nil, fmt.Errorf("supervise: %w", err)
		}
		defer r.Close()
		extra = append(extra, r)
		args = append(args, "--"+mountapi.FlagCredentialsFD, strconv.Itoa(3))
	}
	var stateW *os.File
	if rec != nil {
		dev := os.NewFile(uintptr(rec.Fd), "/dev/fuse") // not closed: the fd stays the holder's
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		args = append(args, "--"+mountapi.FlagRecoverFD, strconv.Itoa(3+len(extra)))
		extra, stateW = append(extra, dev, r), w
	}
	if takeover != "" {
		args = append(args, "--"+mountapi.FlagTakeover, takeover)
	}
	cmd := exec.Command(c.Bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = os.Stdout, os.Stderr, extra
	if err := cmd.Start(); err != nil {
		if stateW != nil {
			stateW.Close()
		}
		return nil, fmt.Errorf("supervise: start %s: %w", c.Bin, err)
	}
	if stateW != nil {
		go func() { _ = handover.WriteState(stateW, rec.State) }()
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() { ch.err = cmd.Wait(); close(ch.done) }()
	c.Log.Info("supervise: started the mount process", "pid", cmd.Process.Pid, "recovering", rec != nil,
		"taking_over", takeover != "")
	return ch, nil
}

// ready waits until ch serves and answers a hold on its handover socket
// (Held.Pid is ch's: a mount ch takes over answers on the same path until
// it exits), and returns what it held out (polled: the mount has no other
// signal). A mount that serves but refuses the hold is errNotRecoverable.
func (c SuperviseConfig) ready(ctx context.Context, ch *child) (*handover.Held, error) {
	sock := mountapi.HandoverSocket(c.CacheDir)
	pid := ch.cmd.Process.Pid
	for {
		held, err := handover.Hold(ctx, sock, c.Version)
		switch {
		case err == nil && held.Pid == pid:
			return held, nil
		case err == nil:
			unix.Close(held.Fd) // the mount ch takes over: not ch yet
		case !isDialError(err) && listenerIs(ctx, sock, pid):
			return nil, fmt.Errorf("%w: %w", errNotRecoverable, err)
		}
		select {
		case <-ch.done:
			return nil, fmt.Errorf("supervise: the mount process exited before serving: %w", ch.err)
		case <-ctx.Done():
			_ = ch.cmd.Process.Signal(syscall.SIGTERM)
			<-ch.done
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// isDialError: nothing listens at the socket (yet).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// listenerIs: pid listens at the handover socket path.
func listenerIs(ctx context.Context, path string, pid int) bool {
	got, err := handover.ListenerPid(ctx, path)
	return err == nil && got == pid
}
