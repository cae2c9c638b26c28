package csi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestSecretsDirWithoutRoot: a node plugin that cannot mount the secrets
// tmpfs (run as nobody) refuses to start and says why; with
// --allow-disk-secrets it starts and says, in one warning line, that it
// keeps credentials on disk.
func TestSecretsDirWithoutRoot(t *testing.T) {
	testenv.RequireFUSE(t) // root, to run the driver as nobody
	_, driver := buildBinaries(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(driver)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "csi-driver")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(work, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	command := func(extra ...string) *exec.Cmd {
		args := []string{"--endpoint", "unix://" + filepath.Join(work, "csi.sock"), "--nodeid", "n1", "--mode", "node",
			"--state-dir", filepath.Join(work, "state"), "--cache-root", filepath.Join(work, "cache"),
			"--mounter-endpoint", "unix://" + filepath.Join(work, "mounter.sock"), "--kubelet-dir", filepath.Join(work, "kubelet"),
			"--health-interval", "0", "--log-format", "text"}
		cmd := exec.Command(bin, append(args, extra...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		return cmd
	}

	out, err := command().CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot mount a tmpfs for credentials on") ||
		!strings.Contains(string(out), "--allow-disk-secrets") {
		t.Fatalf("a driver without root: %v, output:\n%s\nwant a refusal naming the tmpfs and --allow-disk-secrets", err, out)
	}

	log := &testenv.SyncBuffer{}
	cmd := command("--allow-disk-secrets")
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	waitSocket(t, filepath.Join(work, "csi.sock"))
	if n := strings.Count(log.String(), "credentials kept ON DISK"); n != 1 {
		t.Errorf("%d warning lines about credentials on disk, want 1:\n%s", n, log)
	}
	if st, err := os.Stat(filepath.Join(work, "state", "node", "secrets")); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("secrets dir on disk has mode %v, want 0700", st.Mode().Perm())
	}
}
