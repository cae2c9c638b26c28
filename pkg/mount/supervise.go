package mount

// Supervise: `cachefs mount --supervise`, a small parent that holds a
// duplicate of the mount's /dev/fuse descriptor and starts a new mount
// process on it when the serving one dies (docs/DESIGN.md, "Crash
// recovery"). A separate process rather than a goroutine of the mount: a
// crash, an OOM kill or kill -9 of the mount must not take the holder.
// The first process mounts, takes over a running mount (Takeover) or
// recovers a connection another holder lends (RecoverFrom); the process
// start, its descriptors and the wait for it to serve are in
// supervise_start.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// SuperviseConfig configures Supervise.
type SuperviseConfig struct {
	// Bin and Args start the mount (Args without the program name, and
	// without --credentials-fd, --takeover and --recover-from, which the
	// supervisor adds). Descriptors from 3 on: the credentials pipe when
	// Credentials is set (--credentials-fd 3), then for a recovery the
	// connection and its state (--recover-fd N, N+1).
	Bin  string
	Args []string
	// CacheDir and Mountpoint are the mount's (its handover socket).
	CacheDir, Mountpoint string
	// Credentials, when set, are given to every mount process on a fresh
	// pipe: read once by the caller, kept in this process's memory only
	// (never in an argv, an environment or a log).
	Credentials *mountapi.Credentials
	// Takeover, when set, is the handover socket of a running mount whose
	// connection the first process takes over (--takeover). If that
	// process exits before it serves, Supervise returns its error and the
	// running mount serves on.
	Takeover string
	// RecoverFrom, when set, is the socket of a holder (handover.ServeHeld)
	// that lends the connection of a mount process that died: the first
	// process recovers it. If that process exits before it serves,
	// Supervise returns its error.
	RecoverFrom string
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

// ErrRecoverFrom: the holder named by SuperviseConfig.RecoverFrom lends no
// connection this mount can serve (it does not answer, or it holds the
// connection of another mount point).
var ErrRecoverFrom = errors.New("mount: supervise: recover-from")

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
// restarts pass their bound. A mount that refuses holders (not
// recoverable: a listing-based mount that could not make its node table,
// ErrNoNodeTable) is waited for; its exit is Supervise's.
func Supervise(ctx context.Context, c SuperviseConfig) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Takeover != "" && c.RecoverFrom != "" {
		return fmt.Errorf("supervise: --%s and --%s: not together", mountapi.FlagTakeover, mountapi.FlagRecoverFrom)
	}
	var lent *handover.Held
	if c.RecoverFrom != "" {
		var err error
		if lent, err = c.borrow(ctx); err != nil {
			return err
		}
		defer unix.Close(lent.Fd)
	}
	cur, err := c.start(lent, c.Takeover)
	if err != nil {
		return err
	}
	held, err := c.ready(ctx, cur)
	if errors.Is(err, errNotRecoverable) {
		return c.waitUnrecoverable(ctx, cur, err)
	}
	if err != nil {
		return err
	}
	defer unix.Close(held.Fd)
	c.Log.Info("supervise: holding the connection; the mount is recovered if its process dies", "pid", cur.cmd.Process.Pid,
		"max_restarts", c.MaxRestarts, "window", c.Window)
	return c.watch(ctx, cur, held)
}

// watch recovers the connection each time cur dies abnormally. held keeps
// its descriptor (the first duplicate) and takes the state of each new
// process once it serves (its counters move on).
func (c SuperviseConfig) watch(ctx context.Context, cur *child, held *handover.Held) error {
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
		lend := *held
		lend.DiedAt = died // the recovering process measures its stall from here
		var err error
		if cur, err = c.start(&lend, ""); err != nil {
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
		held.State = again.State
		deadInARow = 0
		c.Log.Info("supervise: recovered", "pid", cur.cmd.Process.Pid, "stall", time.Since(died).Round(time.Microsecond),
			"restart", len(restarts))
	}
}

// waitUnrecoverable waits for a mount that refuses holders: there is
// nothing to recover it with, so its exit is the supervisor's.
func (c SuperviseConfig) waitUnrecoverable(ctx context.Context, cur *child, why error) error {
	c.Log.Warn("supervise: not recoverable: the mount serves, but a new process could not serve its connection if it died",
		"pid", cur.cmd.Process.Pid, "err", why)
	select {
	case <-ctx.Done():
		_ = cur.cmd.Process.Signal(syscall.SIGTERM)
		<-cur.done
	case <-cur.done:
	}
	return cur.err
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
