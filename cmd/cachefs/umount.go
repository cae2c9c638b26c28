package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// fsNamePrefix starts the source (fsname) of every cachefs FUSE mount in
// /proc/self/mountinfo: "cachefs:" and the dataset URL (pkg/mount).
const fsNamePrefix = "cachefs:"

func newUmountCmd() *cobra.Command {
	var (
		cacheDir string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Ask the cachefs mount serving MOUNTPOINT to stop (lazily while files are open)",
		Long: `Ask the 'cachefs mount' process serving MOUNTPOINT, over the control socket in
its cache directory, to unmount and exit, as SIGTERM does: the mount point goes
at once; while readers still hold files open it is detached (MNT_DETACH) and
the process serves them until the last one is closed. Then wait until
MOUNTPOINT is no longer mounted (at most --timeout).

The mount's cache directory is read from its process's command line, or given
with --cache-dir. It fails, naming the reason, when nothing is mounted on
MOUNTPOINT, when what is mounted there is not a cachefs mount (use umount(8)),
or when its mount process does not answer.`,
		Example: `  cachefs umount /mnt/imagenet`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUmount(cmd.Context(), args[0], cacheDir, timeout, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&cacheDir, mountapi.FlagCacheDir, "", "the mount's cache directory (default: from the command line of the mount process)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the mount point to go")
	return cmd
}

func runUmount(ctx context.Context, mountpoint, cacheDir string, timeout time.Duration, stdout io.Writer) error {
	mp, err := filepath.Abs(mountpoint)
	if err != nil {
		return fmt.Errorf("umount: %w", err)
	}
	info, err := mountAt(mp)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(info.Source, fsNamePrefix) || !strings.HasPrefix(info.FSType, "fuse") {
		return fmt.Errorf("umount: %s is not a cachefs mount (it is a %s mount of %s): use umount(8)", mp, info.FSType, info.Source)
	}
	if cacheDir == "" {
		if cacheDir, err = findCacheDir(mp); err != nil {
			return err
		}
	}
	pid, err := mountapi.RemoteUnmount(ctx, cacheDir, mp)
	if errors.Is(err, mountapi.ErrNoControl) {
		return fmt.Errorf("umount: %s: no mount process answers on %s (a dead mount? detach it with umount -l %s)", mp, mountapi.ControlSocket(cacheDir), mp)
	} else if err != nil {
		return fmt.Errorf("umount: %s: %w", mp, err)
	}
	// Polled: the kernel tells no one when a mount point goes.
	deadline := time.Now().Add(timeout)
	for {
		mounted, err := mountinfo.Mounted(mp)
		if err != nil {
			return fmt.Errorf("umount: %w", err)
		}
		if !mounted {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("umount: %s: still mounted %s after the mount (pid %d) agreed to stop", mp, timeout, pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if processAlive(pid) {
		fmt.Fprintf(stdout, "unmounted %s (mount pid %d serves the files still open, then exits)\n", mp, pid)
	} else {
		fmt.Fprintf(stdout, "unmounted %s (mount pid %d)\n", mp, pid)
	}
	return nil
}

// mountAt returns the mount on mp (the topmost when several are stacked).
func mountAt(mp string) (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mp))
	if err != nil {
		return nil, fmt.Errorf("umount: %w", err)
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("umount: nothing is mounted on %s", mp)
	}
	return mounts[len(mounts)-1], nil
}

// findCacheDir returns the --cache-dir of the `cachefs mount` process
// whose mount point is mp, read from its command line (relative paths
// against its working directory) with this binary's own mount flags.
func findCacheDir(mp string) (string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return "", fmt.Errorf("umount: %w", err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		proc := filepath.Join("/proc", e.Name())
		b, err := os.ReadFile(filepath.Join(proc, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 4 || !strings.HasPrefix(filepath.Base(args[0]), "cachefs") || args[1] != mountapi.Command {
			continue
		}
		cwd, err := os.Readlink(filepath.Join(proc, "cwd"))
		if err != nil {
			continue
		}
		if dir, ok := mountArgs(args[1:], cwd, mp); ok {
			return dir, nil
		}
	}
	return "", fmt.Errorf("umount: no cachefs mount process of %s found (give its --%s)", mp, mountapi.FlagCacheDir)
}

// mountArgs parses the arguments of a `cachefs mount` (args[0] is "mount")
// run in cwd, and returns its cache directory when its mount point is mp.
func mountArgs(args []string, cwd, mp string) (string, bool) {
	cmd, rest, err := newRoot().Find(args)
	if err != nil || cmd.Name() != mountapi.Command || cmd.ParseFlags(rest) != nil {
		return "", false
	}
	pos := cmd.Flags().Args()
	dir, err := cmd.Flags().GetString(mountapi.FlagCacheDir)
	if len(pos) != 2 || err != nil || dir == "" {
		return "", false
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(cwd, p)
	}
	if abs(pos[1]) != mp {
		return "", false
	}
	return abs(dir), true
}

// processAlive reports whether pid runs (and is not a zombie).
func processAlive(pid int) bool {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(st), ") Z ")
}
