package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
)

// MountPoints lists the mount points of this process's mount namespace
// (/proc/self/mountinfo, unescaped), in the table's order.
func MountPoints() ([]string, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("testenv: mount table: %w", err)
	}
	out := make([]string, len(infos))
	for i, m := range infos {
		out[i] = m.Mountpoint
	}
	return out, nil
}

// Mounted reports whether dir is a mount point in this process's mount
// namespace (MountPoints).
func Mounted(dir string) (bool, error) {
	mounts, err := MountPoints()
	return slices.Contains(mounts, dir), err
}

// ErrExited is WaitMounted's error when the mounting process ended first.
var ErrExited = errors.New("testenv: the mounting process exited before the mount appeared")

// WaitMounted waits until dir is a mount point (Mounted), polling every
// 10ms. It returns an error when timeout passes first, or one wrapping
// ErrExited when a value arrives on exited first (the mounting process's
// Wait result; a nil channel is not watched).
func WaitMounted(dir string, timeout time.Duration, exited <-chan error) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := Mounted(dir)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: %s was not mounted within %v", dir, timeout)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%w: %v", ErrExited, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// MountsUnder lists the mount points at or below dir, deepest first (the
// order to unmount them in).
func MountsUnder(dir string) ([]string, error) {
	all, err := MountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// Processes returns the pids of the processes whose command line (argv,
// split at NULs, the trailing empty field dropped) match accepts; processes
// that go while it reads are skipped.
func Processes(match func(pid int, args []string) bool) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(pid, strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// MountSupervisors returns the pids among MountProcesses(dir) that run
// `cachefs mount --supervise`: one per dataset mount of the CSI driver,
// whose supervised child (a second `cachefs mount`) is replaced on every
// recovery and takeover.
func MountSupervisors(t testing.TB, dir string) []int {
	t.Helper()
	var sup []int
	for _, pid := range MountProcesses(t, dir) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(b), "\x00--supervise\x00") {
			sup = append(sup, pid)
		}
	}
	return sup
}

// MountProcesses returns the pids of live (not zombie) `cachefs` processes
// whose command line mentions dir (a test's state dir or mount point).
func MountProcesses(t testing.TB, dir string) []int {
	t.Helper()
	pids, err := Processes(func(pid int, args []string) bool {
		if filepath.Base(args[0]) != "cachefs" || !strings.Contains(strings.Join(args, "\x00"), dir) {
			return false
		}
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		return err == nil && !strings.Contains(string(st), ") Z ")
	})
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// ParentPID returns the parent of process pid as /proc tells it, or 0
// when pid is gone or a zombie (exited, not yet reaped: no process's
// child any more, for the tests that ask).
func ParentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || f[0] == "Z" {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
