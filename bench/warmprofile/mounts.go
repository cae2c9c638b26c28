package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// The mounts the profile compares with local disk: the product's own
// `cachefs mount` (started from its binary with mountapi.CommandOptions,
// as the CSI node plugin does) and go-fuse's plain loopback, the ceiling
// any go-fuse mount has here. Each runs as a process of its own whose CPU
// time is read from /proc; with debug on, its stderr (go-fuse's request
// log) goes to a file that countOpcodes reads.

// loopbackArg, as this binary's first argument, makes it the loopback child.
const loopbackArg = "loopback-child"

// startCachefs runs `cachefs mount` with opts, env added to its
// environment; stderr (the FUSE request log when opts.FuseDebug) goes to
// logPath.
func startCachefs(bin string, opts mountapi.CommandOptions, logPath string, env ...string) (*benchproc.Proc, error) {
	if err := os.MkdirAll(opts.Mountpoint, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, opts.Args()...)
	cmd.Env = append(os.Environ(), env...)
	return startLogged("cachefs mount", cmd, opts.Mountpoint, logPath)
}

// startLoopback runs this binary as a go-fuse loopback of root at mnt.
func startLoopback(root, mnt string, timeout time.Duration, debug bool, logPath string) (*benchproc.Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	args := []string{loopbackArg, "-root", root, "-mnt", mnt, "-timeout", timeout.String()}
	if debug {
		args = append(args, "-debug")
	}
	return startLogged("go-fuse loopback", exec.Command(self, args...), mnt, logPath)
}

// startLogged starts cmd with its stdout and stderr in logPath and waits
// until mnt is mounted.
func startLogged(name string, cmd *exec.Cmd, mnt, logPath string) (*benchproc.Proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = lf, lf
	p, err := benchproc.Start(name, cmd, mnt)
	if err != nil {
		return nil, err
	}
	if err := p.WaitMounted(60 * time.Second); err != nil {
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w; log: %s", err, tail(b, 2000))
	}
	return p, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// loopbackMain is the loopback child: fs.NewLoopbackRoot with the given
// entry, attribute and negative timeouts, mounted directly (root), which
// engages FUSE passthrough on kernels that have it. As PERF-NOTES measured.
func loopbackMain(args []string) {
	fl := flag.NewFlagSet(loopbackArg, flag.ExitOnError)
	root := fl.String("root", "", "directory to mirror")
	mnt := fl.String("mnt", "", "mount point")
	timeout := fl.Duration("timeout", time.Hour, "entry, attribute and negative timeouts")
	debug := fl.Bool("debug", false, "log every FUSE request")
	_ = fl.Parse(args)
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
	node, err := fs.NewLoopbackRoot(*root)
	if err != nil {
		die(err)
	}
	opts := &fs.Options{
		EntryTimeout: timeout, AttrTimeout: timeout, NegativeTimeout: timeout,
		MountOptions: fuse.MountOptions{
			AllowOther: true, DirectMount: true, Name: "loopback", FsName: *root, Debug: *debug,
		},
	}
	server, err := fs.Mount(*mnt, node, opts)
	if err != nil {
		die(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); _ = server.Unmount() }()
	server.Wait()
}
