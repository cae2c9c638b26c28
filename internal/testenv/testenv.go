// Package testenv starts the real servers that EpochFS tests run against
// on 127.0.0.1 (MinIO in minio.go, kube-apiserver with etcd in kube.go,
// NFS-Ganesha in a network namespace of its own in ganesha.go, go-nfs
// in-process in gonfs.go; Ceph is not built yet), each owned by one test and
// stopped in its t.Cleanup. It also holds the small helpers the tests of
// several packages share (helpers.go): building a command, generating a
// dataset, waiting for a FUSE mount, scraping /metrics.
//
// The servers are installed by the project itself (`make tools`) under
// <repo>/.tools/bin, or in $EPOCHFS_TOOLS_BIN. A test whose server is
// missing skips with a clear message on a developer's machine and fails
// under CI=true (see RequireOrSkip), so CI never passes by skipping.
//
// This package is for tests only; it knows nothing of EpochFS itself.
package testenv

import (
	"errors"
	"fmt"
	"net"
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
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if root, err := repoRoot(); err == nil {
		p := filepath.Join(root, ".tools", "bin", name)
		if isExecutable(p) {
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

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it; servers started
// on it should be retried on a bind failure.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
