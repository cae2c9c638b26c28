package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// Cachefs is a `cachefs mount` process a test started (StartCachefs).
type Cachefs struct {
	*Proc
	// Opts are the options it runs with.
	Opts mountapi.CommandOptions
}

// cachefsMountTimeout bounds StartCachefs's wait for the mount.
const cachefsMountTimeout = 30 * time.Second

// StartCachefs runs bin (a cachefs built by GoBuild) as `cachefs mount`
// with the arguments of opts, and env added to this process's environment
// (credentials, say), and waits until opts.Mountpoint is mounted; the test
// fails with the process's output if it exits first. In t.Cleanup it stops
// the process as the CSI node plugin does, SIGTERM (a clean unmount) and
// SIGKILL after 20 s, and detaches a mount point left behind.
func StartCachefs(t testing.TB, bin string, opts mountapi.CommandOptions, env ...string) *Cachefs {
	t.Helper()
	cmd := exec.Command(bin, opts.Args()...)
	cmd.Env = append(os.Environ(), env...)
	p, err := StartProc("cachefs mount", cmd, &SyncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Terminate(20 * time.Second)
		_ = syscall.Unmount(opts.Mountpoint, syscall.MNT_DETACH)
	})
	exited := make(chan error, 1)
	go func() { exited <- p.Err() }()
	if err := WaitMounted(opts.Mountpoint, cachefsMountTimeout, exited); err != nil {
		t.Fatalf("cachefs mount: %v\n%s", err, p.Tail(8000))
	}
	return &Cachefs{Proc: p, Opts: opts}
}

// Kill ends the mount process with SIGKILL (a crash) and detaches its dead
// mount point.
func (c *Cachefs) Kill() {
	c.Proc.Kill()
	_ = syscall.Unmount(c.Opts.Mountpoint, syscall.MNT_DETACH)
}
