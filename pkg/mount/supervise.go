package mount

// Supervise: `cachefs mount --supervise`, a small parent that holds a
// duplicate of the mount's /dev/fuse descriptor and starts a new mount
// process on it when the serving one dies (docs/DESIGN.md, "Crash
// recovery"). A separate process rather than a goroutine of the mount: a
// crash, an OOM kill or kill -9 of the mount must not take the holder.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// SuperviseConfig configures Supervise.
type SuperviseConfig struct {
	// Bin and Args start the mount (Args without the program name);
	// a recovery appends --recover-fd 3 (fd 3 the connection, fd 4 its
	// state).
	Bin  string
	Args []string
	// CacheDir and Mountpoint are the mount's (its handover socket).
	CacheDir, Mountpoint string
	// MaxRestarts bounds the recoveries within Window; a recovered process
	// that dies before it serves counts too, and three in a row end it.
	MaxRestarts int
	Window      time.Duration
	Version     string
	Log         *slog.Logger
}

// ErrCrashLoop: the mount died more often than SuperviseConfig allows; the
// supervisor unmounted it (readers get errors: the failure is visible).
var ErrCrashLoop = errors.New("mount: supervise: crash loop")

// maxDeadBeforeReady: recovered processes in a row that die before they
// serve end the supervision.
const maxDeadBeforeReady = 3

// child is one mount process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
}

// Supervise starts the mount, takes a duplicate of its descriptor once it
// serves, and restarts it on that descriptor each time it dies abnormally
// (killed by a signal, or a failure exit code), until ctx is done (then it
// stops the mount: SIGTERM, and the mount unmounts), the mount exits by
// itself with success (unmounted, or handed over to `--takeover`), or the
// restarts pass their bound.
func Supervise(ctx context.Context, c SuperviseConfig) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	cur, err := c.start(nil)
	if err != nil {
		return err
	}
	held, err := c.ready(ctx, cur)
	if err != nil {
		return err
	}
	defer unix.Close(held.Fd)
	c.Log.Info("supervise: holding the connection; the mount is recovered if its process dies", "pid", cur.cmd.Process.Pid,
		"max_restarts", c.MaxRestarts, "window", c.Window)
	var restarts []time.Time
	deadInARow := 0
	for {
		select {
		case <-ctx.Done():
			_ = cur.cmd.Process.Signal(syscall.SIGTERM)
			<-cur.done
			return cur.err
		case <-cur.done:
		}
		if cur.err == nil {
			c.Log.Info("supervise: the mount process exited; done", "pid", cur.cmd.Process.Pid)
			return nil
		}
		died := time.Now()
		restarts = append(restarts, died)
		for len(restarts) > 0 && died.Sub(restarts[0]) > c.Window {
			restarts = restarts[1:]
		}
		if len(restarts) > c.MaxRestarts || deadInARow >= maxDeadBeforeReady {
			return c.giveUp(cur, len(restarts), deadInARow)
		}
		c.Log.Warn("supervise: the mount process died; recovering its connection", "pid", cur.cmd.Process.Pid,
			"err", cur.err, "restart", len(restarts), "max_restarts", c.MaxRestarts, "window", c.Window)
		if cur, err = c.start(held); err != nil {
			return c.giveUp(nil, len(restarts), deadInARow)
		}
		again, err := c.ready(ctx, cur)
		if err != nil {
			if ctx.Err() != nil {
				return cur.err
			}
			deadInARow++
			continue
		}
		unix.Close(again.Fd) // the same connection: the first duplicate is kept
		deadInARow = 0
		c.Log.Info("supervise: recovered", "pid", cur.cmd.Process.Pid, "stall", time.Since(died).Round(time.Microsecond),
			"restart", len(restarts))
	}
}

// giveUp unmounts (lazily: readers of open files get ENOTCONN once the
// held descriptor closes) and reports the crash loop.
func (c SuperviseConfig) giveUp(last *child, restarts, deadInARow int) error {
	if err := unix.Unmount(c.Mountpoint, unix.MNT_DETACH); err != nil {
		c.Log.Error("supervise: unmount", "mountpoint", c.Mountpoint, "err", err)
	}
	var lastErr error
	if last != nil {
		lastErr = last.err
	}
	c.Log.Error("supervise: giving up: the mount keeps dying; unmounted", "restarts", restarts,
		"window", c.Window, "died_before_serving", deadInARow, "err", lastErr)
	return fmt.Errorf("%w: %d restarts within %v (%d in a row died before serving); last: %w",
		ErrCrashLoop, restarts, c.Window, deadInARow, lastErr)
}

// start starts a mount process: a fresh mount, or one recovering held.
func (c SuperviseConfig) start(held *handover.Held) (*child, error) {
	args := append([]string(nil), c.Args...)
	var extra []*os.File
	var stateW *os.File
	if held != nil {
		dev := os.NewFile(uintptr(held.Fd), "/dev/fuse") // not closed: the fd stays the holder's
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		extra, stateW = []*os.File{dev, r}, w
		args = append(args, "--"+mountapi.FlagRecoverFD, strconv.Itoa(3))
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
		go func() { _ = handover.WriteState(stateW, held.State) }()
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() { ch.err = cmd.Wait(); close(ch.done) }()
	c.Log.Info("supervise: started the mount process", "pid", cmd.Process.Pid, "recovering", held != nil)
	return ch, nil
}

// ready waits until ch serves and answers a holder on its handover socket,
// and returns what it held out (polled: the mount has no other signal).
func (c SuperviseConfig) ready(ctx context.Context, ch *child) (*handover.Held, error) {
	sock := mountapi.HandoverSocket(c.CacheDir)
	for {
		held, err := handover.Hold(ctx, sock, c.Version)
		if err == nil {
			return held, nil
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
