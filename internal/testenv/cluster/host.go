package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
)

// killKubepods is the teardown's last resort for containers the kubelet and
// containerd could not stop (they crashed or were killed): it SIGKILLs every
// process left in the kubelet's kubepods cgroups (only one test cluster runs
// per machine, so they are this cluster's containers) and removes the
// network namespaces (/run/netns/cni-*) that those processes were in.
func killKubepods() (int, error) {
	pids := map[int]bool{}
	var tops []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/kubepods", "/sys/fs/cgroup/kubepods"} {
		m, _ := filepath.Glob(pattern)
		tops = append(tops, m...)
	}
	for _, top := range tops {
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	if len(pids) == 0 {
		return 0, nil
	}
	netns := map[uint64]bool{}
	for pid := range pids {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err == nil {
			netns[st.Ino] = true
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for range 100 { // wait until they are gone, so their cgroups can be removed
		left := 0
		for pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The host's own network namespace is never removed: only cni-* files.
	files, _ := filepath.Glob("/run/netns/cni-*")
	var errs []error
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil || !netns[st.Ino] {
			continue
		}
		if err := syscall.Unmount(f, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", f, err))
			continue
		}
		_ = os.Remove(f)
	}
	return len(pids), errors.Join(errs...)
}

// removeMachineLeftovers removes what the kubelet, containerd and its CNI
// library make outside the state dir at fixed paths when it is empty or
// theirs: the kubelet's device-plugin socket dir (fixed in the kubelet),
// libcni's result cache, containerd's shim socket dir, and the kubelet's
// (cgroupfs) kubepods cgroups, which rmdir removes only when no task is left
// in them. Only one test cluster runs per machine, so these are ours.
func removeMachineLeftovers() {
	for _, f := range []string{"/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"} {
		_ = os.Remove(f)
	}
	// libcni caches results as <network name>-<container id>-<ifname>.
	results, _ := filepath.Glob("/var/lib/cni/results/epochfs-test-*")
	for _, f := range results {
		_ = os.Remove(f)
		// and the loopback network's result of the same container
		id := strings.TrimPrefix(filepath.Base(f), "epochfs-test-")
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			_ = os.Remove("/var/lib/cni/results/cni-loopback-" + id[:i] + "-lo")
		}
	}
	for _, d := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd", "/var/log/containers"} {
		_ = syscall.Rmdir(d) // only when empty
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		hier = append(hier, "/sys/fs/cgroup/kubepods")
	}
	for _, top := range hier {
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // deepest first
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// unmountUnder unmounts every mount point at or below dir, deepest first,
// lazily (MNT_DETACH) when a plain unmount fails.
func unmountUnder(dir string) error {
	var errs []error
	for range 5 { // mounts can be stacked; re-read until none is left
		mounts, err := testenv.MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// unmount unmounts what the kubelet and containerd mounted: everything
// under their directories in the state dir (never above them, whatever dir
// a caller passed).
func (p clusterPaths) unmount() error {
	return errors.Join(unmountUnder(p.kubeletRoot()), unmountUnder(p.hostDir()), unmountUnder(p.join("containerd")))
}

// makeShared bind-mounts dir onto itself and makes it a shared mount, as
// a systemd node's / is. A hostPath that a pod mounts with Bidirectional
// propagation (the CSI node plugin: the kubelet dir, the driver's state
// dir) must lie on a shared mount, or containerd refuses the container
// ("path … is mounted on / but it is not a shared mount"); this sandbox's
// / is private. The cluster's unmount removes the bind (it is at the dir).
func makeShared(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("cluster: bind %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return fmt.Errorf("cluster: make %s shared: %w", dir, err)
	}
	return nil
}

// checkStateDir refuses a state dir that is neither missing, nor empty, nor
// an earlier cluster's (it has pids/): Up empties it.
func checkStateDir(dir string) error {
	if dir == "/" {
		return errors.New("state dir /: refused")
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(ents) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi, err := os.Stat(filepath.Join(dir, "pids")); err == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("state dir %s is not empty and not a test cluster's (no pids/): refused, it would be emptied", dir)
}

// removeContents empties dir (creating it if missing), refusing to cross a
// mount point.
func removeContents(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if m, err := testenv.MountsUnder(dir); err != nil {
		return err
	} else if len(m) > 0 {
		return fmt.Errorf("still mounted under %s: %v", dir, m)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
