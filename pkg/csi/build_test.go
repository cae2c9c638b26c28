package csi

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
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
			if _, buildErr = testenv.Build("./cmd/"+c, "", binDir); buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "cachefs"), filepath.Join(binDir, "csi-driver")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// BuildBinaries is buildBinaries for the external tests (package csi_test).
var BuildBinaries = buildBinaries
