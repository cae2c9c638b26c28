package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	mountutils "k8s.io/mount-utils"
)

// mountinfoUnescaper undoes the kernel's octal escapes of mount points in
// mountinfo (space, tab, newline, backslash), which k8s.io/mount-utils
// leaves in place.
var mountinfoUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// MountPoints lists the mount points of this process's mount namespace
// (/proc/self/mountinfo), unescaped, in the table's order.
func MountPoints() ([]string, error) {
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("testenv: mount table: %w", err)
	}
	out := make([]string, len(infos))
	for i, m := range infos {
		out[i] = mountinfoUnescaper.Replace(m.MountPoint)
	}
	return out, nil
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
