package csi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// Recovery by the node plugin (docs/DESIGN.md "CSI"): it watches each
// held mount's supervisor (pidfd_open + poll: told at once, and pids are
// the node's with hostPID), and when it dies while the dataset is not being
// stopped, it finds who serves the connection now (a takeover it did not
// drive) or starts a supervised mount that recovers it from the node
// plugin's lending socket. Readers stall meanwhile; no target is unmounted.

// recoverWait bounds how long a recovery retries a launch (a deleted
// mounter pod comes back in seconds); after it, the mount is repaired.
const recoverWait = 60 * time.Second

// errNotHeldConn: the mount point no longer has the connection held.
var errNotHeldConn = errors.New("csi: the mount point does not serve the held connection any more")

// watch starts watching ds's supervisor (ds.PID), in place of h's
// previous watch. Called with ds's lock held.
func (n *nodeState) watch(ds *datasetMount, h *heldMount) {
	h.mu.Lock()
	if h.stopWatch != nil {
		h.stopWatch()
		h.stopWatch = nil
	}
	h.mu.Unlock()
	key, pid, ticks := ds.Key, ds.PID, ds.StartTicks
	stop, err := watchExit(pid, ticks, func() { n.supervisorExited(key, pid, ticks) })
	if err != nil {
		n.cfg.log.Warn("cannot watch the dataset mount's supervisor; the health check repairs it", "key", key, "pid", pid, "err", err)
		return
	}
	h.mu.Lock()
	h.stopWatch = stop
	h.mu.Unlock()
}

// watchExit calls onExit (in its own goroutine) once process pid, started
// at ticks, has exited, unless stop is called first. The pidfd is opened
// non-blocking and waited for through Go's network poller (a pidfd turns
// readable when its process exits): a watch parks a goroutine, not an OS
// thread, so a node with many mounts holds no thread per mount.
func watchExit(pid int, ticks uint64, onExit func()) (stop func(), err error) {
	pfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		go onExit()
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("csi: pidfd_open %d: %w", pid, err)
	}
	if !processAlive(pid, ticks) { // gone, or pid reused, before pidfd_open
		unix.Close(pfd)
		go onExit()
		return func() {}, nil
	}
	f := os.NewFile(uintptr(pfd), fmt.Sprintf("pidfd:%d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("csi: pidfd %d: %w", pid, err)
	}
	var mu sync.Mutex // guards stopped: an exit seen after stop calls nothing
	stopped := false
	go func() {
		exited := false
		err := rc.Read(func(fd uintptr) bool {
			// Called at once, then each time the poller says readable.
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(p, 0)
			exited = n > 0 && p[0].Revents&unix.POLLIN != 0
			return exited
		})
		mu.Lock()
		call := exited && err == nil && !stopped
		stopped = true
		mu.Unlock()
		f.Close()
		if call {
			onExit()
		}
	}()
	return func() {
		mu.Lock()
		already := stopped
		stopped = true
		mu.Unlock()
		if !already {
			f.Close() // ends the pending Read with os.ErrClosed
		}
	}, nil
}

// supervisorExited handles the exit of pid, the supervisor of the dataset
// with key: unless the dataset moved on meanwhile (stopped, repaired, taken
// over), the mount is repaired, which recovers a held connection.
func (n *nodeState) supervisorExited(key string, pid int, ticks uint64) {
	n.mu.Lock()
	ctx := n.ctx
	n.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	unlock, err := n.lockDataset(ctx, key)
	if err != nil {
		return
	}
	defer unlock()
	ds := n.dataset(key)
	if ds == nil || ds.PID != pid || ds.StartTicks != ticks || len(ds.Users) == 0 || n.holds.get(key) == nil {
		return
	}
	if err := n.repair(ds, fmt.Errorf("mount supervisor %d exited", pid)); err != nil {
		n.cfg.log.Error("dataset mount repair failed", "key", key, "err", err)
	}
}

// recoverHeld serves ds's held connection again after its supervisor
// died: adopting the process that serves it, if one does, else launching
// `cachefs mount --supervise --recover-from` (with the volume's
// credentials) through the launcher. It reports false, having let the
// connection go, when the mount must be repaired instead. Called with ds's
// lock held.
func (n *nodeState) recoverHeld(ds *datasetMount) bool {
	h := n.holds.get(ds.Key)
	if h == nil || processAlive(ds.PID, ds.StartTicks) {
		return false
	}
	err := n.recoverConn(ds, h)
	if err == nil {
		return true
	}
	n.cfg.log.Warn("dataset mount not recovered; repairing it", "key", ds.Key, "err", err)
	n.unhold(ds.Key)
	return false
}

func (n *nodeState) recoverConn(ds *datasetMount, h *heldMount) error {
	died := time.Now()
	if conn, isFUSE := fuseConn(ds.MountPoint); !isFUSE || conn != h.conn {
		return errNotHeldConn
	}
	if n.adoptServer(ds, h) {
		return nil
	}
	h.mu.Lock()
	h.held.DiedAt = died
	h.mu.Unlock()
	creds, err := n.relaunchCredentials(ds)
	if err != nil {
		return err
	}
	opts := n.commandOptions(ds)
	opts.RecoverFrom = h.sock
	logStart := n.logSize(ds.Key)
	pid, err := n.launchRetrying(ds, opts.Args(), creds)
	if err != nil {
		return err
	}
	ds.PID = pid
	ds.StartTicks, _ = startTicks(pid)
	if err := n.waitServing(ds, h, 0, logStart); err != nil {
		killGroup(pid)
		return err
	}
	if err := n.saveDataset(ds); err != nil {
		return err
	}
	n.recoveries.Add(1)
	n.watch(ds, h)
	n.cfg.log.Info("dataset mount recovered on its FUSE connection", "key", ds.Key, "pid", ds.PID, "stall", time.Since(died).Round(time.Millisecond).String())
	return nil
}

// launchRetrying launches args, retrying for recoverWait while the
// launcher fails (the mounter is being replaced).
func (n *nodeState) launchRetrying(ds *datasetMount, args, creds []string) (int, error) {
	deadline := time.Now().Add(recoverWait)
	for i := 0; ; i++ {
		pid, err := n.cfg.launcher.launch(args, creds, n.logPath(ds.Key))
		if err == nil {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("csi: gave up launching a recovering mount after %s: %w", recoverWait, err)
		}
		if i == 0 {
			n.cfg.log.Warn("cannot launch a recovering mount yet; retrying", "key", ds.Key, "for", recoverWait.String(), "err", err)
		}
		time.Sleep(time.Second)
	}
}

// adoptServer looks for a process that serves ds's connection (a takeover
// the node plugin did not drive) and adopts it, or its supervisor.
func (n *nodeState) adoptServer(ds *datasetMount, h *heldMount) bool {
	held, err := askHold(ds, 0)
	if err != nil {
		return false
	}
	unix.Close(held.Fd)
	sup := held.Pid
	if pp := parentPID(held.Pid); pp > 1 && isSupervisor(pp) {
		sup = pp
	}
	ticks, err := startTicks(sup)
	if err != nil {
		return false
	}
	ds.PID, ds.StartTicks = sup, ticks
	h.setState(held.State)
	if err := n.saveDataset(ds); err != nil {
		n.cfg.log.Warn("cannot save the dataset mount", "key", ds.Key, "err", err)
	}
	n.watch(ds, h)
	n.cfg.log.Info("dataset mount served by another process; adopted it", "key", ds.Key, "pid", sup, "serving", held.Pid)
	return true
}

// waitServing waits, up to the mount timeout, until a child of ds.PID (a
// supervisor just launched) serves ds's connection: it answers a hold on
// the mount's handover socket, and h (when held) gets its state. Without
// a hold (the mount refuses holders) it waits for old, the process the
// new one takes over from, to exit, and the mount to answer. It returns
// why the supervisor exited if it does.
func (n *nodeState) waitServing(ds *datasetMount, h *heldMount, old int, logStart int64) error {
	deadline := time.Now().Add(n.cfg.mountTimeout)
	for ; ; time.Sleep(20 * time.Millisecond) {
		if !processAlive(ds.PID, ds.StartTicks) {
			return n.exited(ds, logStart)
		}
		held, err := askHold(ds, 0)
		switch {
		case err == nil:
			unix.Close(held.Fd)
			if parentPID(held.Pid) == ds.PID {
				if h != nil {
					h.setState(held.State)
				}
				return nil
			}
		case errors.Is(err, handover.ErrRefused) && old > 0 && !pidRuns(old) && checkMount(ds.MountPoint) == nil:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("csi: mount %d of %s not serving after %s: %s", ds.PID, ds.Params.Source, n.cfg.mountTimeout, n.logTail(ds.Key, logStart))
		}
	}
}

// logSize is the size of a dataset's mount log now (where a launch's
// output will start).
func (n *nodeState) logSize(key string) int64 {
	if st, err := os.Stat(n.logPath(key)); err == nil {
		return st.Size()
	}
	return 0
}

// pidRuns reports whether pid runs (not a zombie).
func pidRuns(pid int) bool {
	_, err := startTicks(pid)
	return err == nil
}

// parentPID is pid's parent (field 4 of /proc/PID/stat); 0 if unknown.
func parentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// isSupervisor reports whether pid runs `cachefs mount … --supervise`.
func isSupervisor(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	return len(args) > 1 && args[1] == mountapi.Command && bytes.Contains(b, []byte("\x00--"+mountapi.FlagSupervise+"\x00"))
}

// relaunchCredentials reads the credentials of a running dataset mount
// for a new process of it (a recovery or a move to another mounter): a
// mount that had some must find them still (errCredentialsLost).
func (n *nodeState) relaunchCredentials(ds *datasetMount) ([]string, error) {
	creds, err := n.readSecrets(ds.Key)
	if err != nil {
		return nil, err
	}
	if ds.Credentials && len(creds) == 0 {
		return nil, errCredentialsLost
	}
	return creds, nil
}
