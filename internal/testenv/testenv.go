// Package testenv holds what the tests of every package share, with no
// server client and nothing of Kubernetes, so that a unit test links only
// what it uses: the CI=true rule (RequireOrSkip: a missing tool skips on a
// developer's machine and fails under CI, so CI never passes by skipping),
// the tools `make tools` installs (FindTool), free ports, `go build` of the
// commands, child processes and their output, a real `cachefs mount`
// (StartCachefs, its argv from pkg/mount/mountapi), datasets, mount points
// and FUSE, and a Prometheus scrape.
//
// Each real server has a subpackage of its own, so a test links only the
// clients of the servers it starts: s3 (MinIO, and the S3 client the tests
// use), nfs (NFS-Ganesha and the in-process go-nfs), ceph (a single-node
// Ceph 16 with CephFS and RGW), kube (kube-apiserver with etcd) and cluster
// (a single-node Kubernetes: containerd, kubelet, images, the chart).
//
// The servers are installed by the project itself (`make tools`) under
// <repo>/.tools/bin, or in $EPOCHFS_TOOLS_BIN. Every helper that needs a
// testing.TB is a thin wrapper over an error-returning core, which
// internal/benchproc uses for the benchmarks.
//
// This package is for tests and benchmarks only; it knows nothing of
// EpochFS itself.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// InCI reports whether the environment says this is a CI run (CI=true).
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// RequireOrSkip reports that something a test needs is unavailable: under
// CI=true the test fails, otherwise it is skipped. what says what is
// missing ("minio not found"), why how to get it ("run `make tools`").
func RequireOrSkip(t testing.TB, what, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s: %s (CI=true: required, not skipped)", what, why)
	}
	t.Skipf("%s: %s", what, why)
}

// RequireE2E gates an end-to-end test (a real cluster, the project's
// images; minutes per test): it runs with EPOCHFS_E2E=1 (`make test`,
// `make e2e`) and always under CI=true, where whatever it lacks then fails
// the test (RequireOrSkip), so CI never passes by skipping it; otherwise,
// and in -short mode, it is skipped.
func RequireE2E(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skipf("end-to-end test skipped in -short mode")
	}
	if os.Getenv("EPOCHFS_E2E") != "1" && !InCI() {
		t.Skipf("end-to-end: set EPOCHFS_E2E=1 (make test, make e2e)")
	}
}

// RepoRoot returns the directory holding the module's go.mod, found by
// walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// repoRoot is RepoRoot, replaceable by tests.
var repoRoot = RepoRoot

// FindTool returns the path of an executable installed by `make tools`:
// $EPOCHFS_TOOLS_BIN/name, else <repo root>/.tools/bin/name, else name
// on PATH. It returns an error if none exists.
func FindTool(name string) (string, error) {
	var tried []string
	if dir := os.Getenv("EPOCHFS_TOOLS_BIN"); dir != "" {
		p := filepath.Join(dir, name)
		if Executable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if root, err := repoRoot(); err == nil {
		p := filepath.Join(root, ".tools", "bin", name)
		if Executable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("testenv: %s not found (looked in %v)", name, tried)
}

// Executable reports whether p is a regular file with an execute bit.
func Executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
