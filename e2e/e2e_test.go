package e2e

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// requireE2E skips the test unless EPOCHFS_E2E=1.
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("EPOCHFS_E2E") != "1" {
		t.Skip("end-to-end: set EPOCHFS_E2E=1 (make e2e)")
	}
}

// imageArchive returns the path of bin/images/NAME.tar (`make images`;
// $EPOCHFS_IMAGES_DIR instead of bin/images when set) and the image name
// containerd imports it as ("docker.io/epochfs/epochfs:TAG").
func imageArchive(t *testing.T, name string) (path, ref string) {
	t.Helper()
	dir := os.Getenv("EPOCHFS_IMAGES_DIR")
	if dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin", "images")
	}
	path = filepath.Join(dir, name+".tar")
	f, err := os.Open(path)
	if err != nil {
		testenv.RequireOrSkip(t, "image archive "+path+" missing", "run `make images`")
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no manifest.json: %v", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		b, err := io.ReadAll(tr)
		if err == nil {
			err = json.Unmarshal(b, &manifest)
		}
		if err != nil || len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
			t.Fatalf("%s: manifest.json %s: %v", path, b, err)
		}
		return path, "docker.io/" + manifest[0].RepoTags[0]
	}
}
