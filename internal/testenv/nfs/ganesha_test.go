package nfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestGaneshaSweep: a server whose owner died (a test killed before its
// cleanup ran) is stopped by the next sweep, namespace, veth pair and
// state included, and one whose owner lives is left alone.
func TestGaneshaSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("real server: not in -short mode")
	}
	live := StartGanesha(t, t.TempDir())
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "nfs-server.sh")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", script, "start", t.TempDir(), strconv.Itoa(dead.Process.Pid)).CombinedOutput()
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	name := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "NAME="); ok {
			name = v
		}
	}
	state := filepath.Join("/var/tmp/epochfs-nfs", name)
	if name == "" || !netnsExists(t, name) {
		t.Fatalf("no namespace after start: %q", out)
	}
	if out, err := exec.Command("bash", script, "sweep").CombinedOutput(); err != nil {
		t.Fatalf("sweep: %v\n%s", err, out)
	}
	if netnsExists(t, name) {
		_ = exec.Command("bash", script, "stop", name).Run()
		t.Fatalf("the server of a dead owner survived the sweep")
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state dir %s left behind (%v)", state, err)
	}
	if !netnsExists(t, live.Name) {
		t.Errorf("the sweep stopped a server whose owner lives")
	}
}

func netnsExists(t *testing.T, name string) bool {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}
