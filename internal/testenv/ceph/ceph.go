// Package ceph starts a throw-away single-node Ceph 16 cluster for tests
// (mon, mgr, one OSD on a sparse file, MDS, a CephFS and RGW, through
// scripts/ceph-server.sh): once per test binary (Start, stopped by Main in
// TestMain and by a watchdog if the binary dies), or the one `make test`
// started, named by EPOCHFS_CEPH_DIR. Files go into the CephFS through
// libcephfs (python3-cephfs), not a kernel mount. Missing Ceph packages skip
// a test, or fail it under CI=true.
//
// It knows nothing of EpochFS's CephFS backend (pkg/backend): it is the far
// side of it.
package ceph

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
)

// Cluster is a single-node Ceph 16 cluster on 127.0.0.1 (mon, mgr, one OSD,
// MDS, a CephFS, RGW) started by scripts/ceph-server.sh: once per test
// binary (Start), or started by make and reused through
// EPOCHFS_CEPH_DIR. Exported fields are read-only.
type Cluster struct {
	// Dir holds the cluster's config, keyrings, data and logs.
	Dir string
	// Conf is Dir/ceph.conf, what CEPH_CONF must name for a client; its
	// keyring is client.admin's.
	Conf string
	// Mon is "127.0.0.1:PORT", the monitor's v2 (msgr2) address, for cephfs:// URLs.
	Mon string
	// FS is the CephFS file system's name.
	FS string
	// RGW is the RADOS Gateway's S3 endpoint with the tests' S3 user.
	RGW *s3.Server

	owned bool // started by this process: stopped by Main
}

var (
	cephOnce   sync.Once
	cephShared *Cluster
	cephErr    error
)

// cephStartTimeout bounds scripts/ceph-server.sh start (HEALTH_OK in
// 15–30 s on an idle machine).
const cephStartTimeout = 5 * time.Minute

// Start returns the test binary's Ceph cluster, starting it on the
// first call: in a new directory, on free 127.0.0.1 ports, with RGW. When
// EPOCHFS_CEPH_DIR names the directory of a cluster already started by
// scripts/ceph-server.sh (make ceph-up), that one is reused and left
// running. A test binary that calls Start must stop the cluster with Main
// in its TestMain. When the Ceph packages are missing (or the
// machine is not root) the test skips, or fails under CI=true.
func Start(t testing.TB) *Cluster {
	t.Helper()
	cephOnce.Do(func() { cephShared, cephErr = startCeph() })
	if cephErr != nil {
		if strings.Contains(cephErr.Error(), "not installed") {
			testenv.RequireOrSkip(t, "ceph: "+cephErr.Error(), "run scripts/ceph-deps.sh (as root)")
		}
		t.Fatalf("ceph: %v", cephErr)
	}
	return cephShared
}

// Main runs the tests and then stops the Ceph cluster that Start started
// in this process, if any; use as
// `func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if c := cephShared; c != nil && c.owned {
		c.stop()
	}
	return code
}

func startCeph() (*Cluster, error) {
	if dir := os.Getenv("EPOCHFS_CEPH_DIR"); dir != "" {
		c, err := Load(dir)
		if err != nil {
			return nil, fmt.Errorf("EPOCHFS_CEPH_DIR=%s: %w", dir, err)
		}
		return c, nil
	}
	for _, cmd := range []string{"ceph-mon", "ceph-osd", "ceph-mds", "radosgw", "radosgw-admin", "ceph"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return nil, fmt.Errorf("%s not installed", cmd)
		}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the Ceph daemons are not installed for this user: scripts/ceph-server.sh needs root")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "ceph-server.sh")
	var lastErr error
	for range 3 { // a free port can be taken between FreePorts and bind
		parent, err := os.MkdirTemp("", "epochfs-ceph-")
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(parent, "c")
		ports, err := testenv.FreePorts(3)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("bash", script, "start")
		cmd.Env = append(os.Environ(),
			"CEPH_DIR="+dir, "WITH_RGW=1",
			"MON_V2_PORT="+strconv.Itoa(ports[0]), "MON_V1_PORT="+strconv.Itoa(ports[1]),
			"RGW_PORT="+strconv.Itoa(ports[2]), "TIMEOUT=120")
		out := &testenv.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(cephStartTimeout):
			_ = cmd.Process.Kill()
			err = fmt.Errorf("not up within %v", cephStartTimeout)
			<-done
		}
		if err != nil {
			lastErr = fmt.Errorf("scripts/ceph-server.sh start: %v\n%s", err, out.String())
			stopCephDir(script, dir)
			os.RemoveAll(parent)
			continue
		}
		c, err := Load(dir)
		if err != nil {
			stopCephDir(script, dir)
			return nil, err
		}
		c.owned = true
		watchdog(script, dir)
		return c, nil
	}
	return nil, lastErr
}

// watchdog starts a shell that stops the cluster when this process exits
// without Main (a panic, a test timeout, a kill), so that no daemons
// outlive the test binary.
func watchdog(script, dir string) {
	cmd := exec.Command("bash", "-c",
		`while kill -0 "$1" 2>/dev/null; do sleep 2; done; [ -d "$2" ] && CEPH_DIR="$2" GRACE=0 bash "$3" stop >/dev/null 2>&1`,
		"watchdog", strconv.Itoa(os.Getpid()), dir, script)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err == nil {
		go func() { _ = cmd.Wait() }()
	}
}

func stopCephDir(script, dir string) {
	cmd := exec.Command("bash", script, "stop")
	cmd.Env = append(os.Environ(), "CEPH_DIR="+dir, "GRACE=0")
	_ = cmd.Run()
}

func (c *Cluster) stop() {
	root, err := testenv.RepoRoot()
	if err != nil {
		return
	}
	stopCephDir(filepath.Join(root, "scripts", "ceph-server.sh"), c.Dir)
	os.Remove(filepath.Dir(c.Dir))
}

// Load returns the cluster that scripts/ceph-server.sh started in dir (as
// make ceph-up and scripts/with-ceph.sh do), from the env and s3.env files
// it wrote there; it is not stopped by Main.
func Load(dir string) (*Cluster, error) {
	env, err := readEnvFile(filepath.Join(dir, "env"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Conf: env["CEPH_CONF"], Mon: env["CEPH_MON"], FS: env["FS_NAME"]}
	if c.Conf == "" || c.Mon == "" || c.FS == "" {
		return nil, fmt.Errorf("%s/env lacks CEPH_CONF, CEPH_MON or FS_NAME", dir)
	}
	if ep := env["RGW_ENDPOINT"]; ep != "" {
		keys, err := readEnvFile(filepath.Join(dir, "s3.env"))
		if err != nil {
			return nil, err
		}
		s, err := s3.NewServer(ep, keys["RGW_ACCESS_KEY"], keys["RGW_SECRET_KEY"])
		if err != nil {
			return nil, fmt.Errorf("rgw: %w", err)
		}
		c.RGW = s
	}
	return c, nil
}

func readEnvFile(p string) (map[string]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// RequireRGW is Start(t).RGW: the Ceph RADOS Gateway as an S3 server.
func RequireRGW(t testing.TB) *s3.Server {
	t.Helper()
	c := Start(t)
	if c.RGW == nil {
		t.Fatalf("ceph: the Ceph cluster in %s runs no RGW (start it with WITH_RGW=1)", c.Dir)
	}
	return c.RGW
}

// SetEnv points the Ceph clients of this process (libcephfs, go-ceph,
// cachefs children) at c with t.Setenv: CEPH_CONF, whose keyring is
// client.admin's.
func (c *Cluster) SetEnv(t testing.TB) {
	t.Helper()
	t.Setenv("CEPH_CONF", c.Conf)
}

// URL returns the cephfs:// source URL of the absolute CephFS path p.
func (c *Cluster) URL(p string) string {
	return "cephfs://admin@" + c.Mon + p + "?fs=" + c.FS
}

// cephCopyIn is run by /usr/bin/python3 (Debian's, which has the cephfs
// bindings of python3-cephfs; no kernel mount): it copies the tree of
// argv[3] into the CephFS path argv[4], creating directories and
// replacing files, as client.admin of the config argv[1], fs argv[2].
const cephCopyIn = `
import os, sys, cephfs
conf, fsname, src, dst = sys.argv[1:5]
fs = cephfs.LibCephFS(conffile=conf)
fs.mount(filesystem_name=fsname.encode())
try:
    fs.mkdirs(dst.encode(), 0o755)
except cephfs.ObjectExists:
    pass
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    base = dst if rel == "." else dst + "/" + rel
    for d in dirs:
        try:
            fs.mkdir((base + "/" + d).encode(), 0o755)
        except cephfs.ObjectExists:
            pass
    for f in files:
        fd = fs.open((base + "/" + f).encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with open(os.path.join(root, f), "rb") as r:
            off = 0
            while True:
                b = r.read(4 << 20)
                if not b:
                    break
                fs.write(fd, b, off)
                off += len(b)
        fs.close(fd)
fs.unmount()
fs.shutdown()
`

// CopyTree copies the local directory tree src into the CephFS directory
// dst (absolute; created with its parents), replacing files that exist,
// through libcephfs (python3-cephfs), not a kernel mount.
func (c *Cluster) CopyTree(src, dst string) error {
	cmd := exec.Command("/usr/bin/python3", "-c", cephCopyIn, c.Conf, c.FS, src, dst)
	cmd.Env = append(os.Environ(), "CEPH_CONF="+c.Conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ceph: copy %s into cephfs %s: %v\n%s", src, dst, err, out)
	}
	return nil
}

// CopyIn is CopyTree for a test, which fails if the copy does.
func (c *Cluster) CopyIn(t testing.TB, src, dst string) {
	t.Helper()
	if err := c.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}

// WriteFiles writes files (path → content) under the CephFS directory dst
// with CopyIn.
func (c *Cluster) WriteFiles(t testing.TB, dst string, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.CopyIn(t, dir, dst)
}
