package archtest

import (
	"os"
	"path/filepath"
	"testing"
)

// repoRoot returns the directory holding go.mod, found upward from the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("archtest: working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("archtest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// skipDir reports whether the go tool ignores a directory of this name: testdata, and names that start
// with "." or "_".
func skipDir(name string) bool {
	return name == "testdata" || name[0] == '.' || name[0] == '_'
}
