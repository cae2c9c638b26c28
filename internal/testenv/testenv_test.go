package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequireOrSkip(t *testing.T) {
	for _, tc := range []struct {
		ci        string
		wantFatal bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tc.ci)
		end := RunHelper(t, func(tb testing.TB) { RequireOrSkip(tb, "minio not found", "run `make tools`") })
		if end.Fatal != tc.wantFatal || end.Skip == tc.wantFatal {
			t.Errorf("CI=%q: fatal=%v skip=%v, want fatal=%v", tc.ci, end.Fatal, end.Skip, tc.wantFatal)
		}
		if !strings.Contains(end.Msg, "minio not found: run `make tools`") {
			t.Errorf("CI=%q: message %q", tc.ci, end.Msg)
		}
	}
}

func TestRequireE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("RequireE2E always skips in -short mode")
	}
	for _, tc := range []struct {
		name, e2e, ci string
		wantRun       bool
	}{
		{"neither", "", "", false},
		{"EPOCHFS_E2E=1", "1", "", true},
		{"CI=true", "", "true", true},
		{"both", "1", "true", true},
		{"EPOCHFS_E2E=0", "0", "false", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EPOCHFS_E2E", tc.e2e)
			t.Setenv("CI", tc.ci)
			end := RunHelper(t, func(tb testing.TB) { RequireE2E(tb) })
			if end.Fatal || end.Skip == tc.wantRun {
				t.Errorf("fatal=%v skip=%v (%q), want run=%v", end.Fatal, end.Skip, end.Msg, tc.wantRun)
			}
		})
	}
}

func TestFindToolEnv(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mytool")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EPOCHFS_TOOLS_BIN", dir)
	if got, err := FindTool("mytool"); err != nil || got != p {
		t.Errorf("FindTool = %q, %v; want %q", got, err, p)
	}
	if _, err := FindTool("no-such-tool-here"); err == nil {
		t.Errorf("FindTool of a missing tool: no error")
	}
}

// TestFreePorts: the n ports are distinct and free to bind.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: %d repeats or is not a port", ports, p)
		}
		seen[p] = true
	}
}

// TestMountPointsUnescaped: a mount point whose name has a space (which
// mountinfo writes as \040) is listed as named, and Mounted finds it.
func TestMountPointsUnescaped(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "with space")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		RequireOrSkip(t, "tmpfs", "cannot mount a tmpfs here (needs root): "+strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	if ok, err := Mounted(mnt); err != nil || !ok {
		t.Errorf("Mounted(%q) = %v, %v; want true", mnt, ok, err)
	}
	under, err := MountsUnder(filepath.Dir(mnt))
	if err != nil || len(under) != 1 || under[0] != mnt {
		t.Errorf("MountsUnder = %q, %v; want [%q]", under, err, mnt)
	}
}
