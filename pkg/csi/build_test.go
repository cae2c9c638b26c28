package csi

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// buildBinaries builds cachefs and csi-driver once per test binary.
func buildBinaries(t *testing.T) (cachefs, driver string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "epochfs-csi-bin-")
		if buildErr != nil {
			return
		}
		for _, c := range []string{"cachefs", "csi-driver"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "../../cmd/"+c).CombinedOutput()
			if err != nil {
				buildErr = &buildError{cmd: c, out: string(out), err: err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "cachefs"), filepath.Join(binDir, "csi-driver")
}

type buildError struct {
	cmd, out string
	err      error
}

func (e *buildError) Error() string { return "go build " + e.cmd + ": " + e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// BuildBinaries is buildBinaries for the external tests (package csi_test).
var BuildBinaries = buildBinaries
