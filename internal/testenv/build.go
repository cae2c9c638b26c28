package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"
)

// Build builds the main package pkg (a path relative to the repository
// root, like "./cmd/cachefs") into dir and returns the binary's path,
// dir/<the package's directory name>. With tags (comma-separated, as for
// -tags) cgo is enabled (CGO_ENABLED=1), as the ceph tag needs.
func Build(pkg, tags, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(pkg))
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if tags != "" {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// GoBuild builds the main package pkg (Build) into a temporary directory
// of t and returns the binary's path; the test fails if it does not build.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	return GoBuildTags(t, pkg, "")
}

// GoBuildTags is GoBuild with build tags.
func GoBuildTags(t testing.TB, pkg, tags string) string {
	t.Helper()
	bin, err := Build(pkg, tags, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
