package csi_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// mountsUnder lists mount points at or below dir (testenv.MountsUnder),
// but the node's secrets tmpfs (<state dir>/node/secrets), which a driver
// mounts at start and leaves mounted by design (checkSecretsTmpfs checks
// it; startDriver and runDriverProcess unmount it at cleanup).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	m, err := testenv.MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(m, func(p string) bool {
		return strings.HasSuffix(p, string(filepath.Separator)+filepath.Join("node", "secrets"))
	})
}
