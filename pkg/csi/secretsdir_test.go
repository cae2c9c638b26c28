package csi

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestSecretsMovedOffDisk: a secrets dir an older driver filled on disk
// becomes a tmpfs holding its secrets files, and the disk below keeps
// nothing (temp leftovers included); a second start re-uses the tmpfs
// instead of stacking another.
func TestSecretsMovedOffDisk(t *testing.T) {
	testenv.RequireFUSE(t) // root, as the node plugin
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const creds = "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\n"
	for name, body := range map[string]string{"ds-a.env": creds, ".ds-a.env1234": "partial"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for range 3 {
			_ = syscall.Unmount(dir, 0)
		}
	})
	log := slog.New(slog.DiscardHandler)
	for range 2 {
		if err := prepareSecretsDir(dir, false, log); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := mountsAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fstypes []string
	for _, m := range infos {
		fstypes = append(fstypes, m.FSType)
	}
	if len(fstypes) != 1 || fstypes[0] != "tmpfs" {
		t.Fatalf("mounts on the secrets dir: %v, want one tmpfs", fstypes)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "ds-a.env" {
		t.Errorf("tmpfs holds %v, want ds-a.env only", ents)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ds-a.env")); err != nil || string(b) != creds {
		t.Errorf("moved secrets file: %q, %v", b, err)
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the disk below the tmpfs still holds %v", ents)
	}
}
