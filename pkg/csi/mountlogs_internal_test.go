package csi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogReadAfterRotation: exited and logTail read a mount's log from the
// offset taken before its launch; after a rotation truncated the log (it
// is now shorter than the offset) they read all of it, which was all
// written since.
func TestLogReadAfterRotation(t *testing.T) {
	n := &nodeState{cfg: nodeConfig{dir: t.TempDir()}}
	if err := os.MkdirAll(filepath.Join(n.cfg.dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := n.logPath("ds-x")
	old := strings.Repeat(`{"msg":"old run"}`+"\n", 100)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	offset := int64(len(old)) // taken before the launch
	failure := `{"level":"ERROR","msg":"mount failed","exitCode":3,"reason":"not_found","error":"posix: no such file"}` + "\n"
	if err := rotateLog(path, 100); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(failure), 0o600); err != nil { // what the new process appends
		t.Fatal(err)
	}
	err := n.exited(&datasetMount{Key: "ds-x", Params: volumeParams{Source: "/x"}}, offset)
	if !strings.Contains(err.Error(), "(exit code 3, not_found)") {
		t.Errorf("exited after a rotation = %v, want the failure line's exit code 3", err)
	}
	if tail := n.logTail("ds-x", offset); !strings.Contains(tail, "mount failed") || strings.Contains(tail, "old run") {
		t.Errorf("logTail after a rotation = %q", tail)
	}
	rotated, err := os.ReadFile(path + ".1")
	if err != nil || string(rotated) != old {
		t.Errorf("rotated copy: %d bytes, %v; want the old log", len(rotated), err)
	}
	// Under the cap: left alone.
	if err := rotateLog(path, 1<<20); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != failure {
		t.Errorf("a log under the cap was changed")
	}
}
