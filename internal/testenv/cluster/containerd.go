package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
)

// Containerd is a throw-away containerd (Debian's) without its CRI plugin:
// own config, root, state, socket and runc root under a temporary
// directory of the test, stopped (with every container) in t.Cleanup. For
// running an image's commands with `ctr run` without a cluster.
type Containerd struct {
	// Socket is containerd's gRPC socket.
	Socket string
	ctr    string
	dir    string
}

// StartContainerd starts a Containerd for t. Without root, containerd,
// ctr or runc it skips the test (fails under CI=true).
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequireOrSkip(t, "containerd: not root", "run the test as root")
	}
	bins := map[string]string{}
	for _, name := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		p, err := exec.LookPath(name)
		if err != nil {
			testenv.RequireOrSkip(t, name+" not found", "run scripts/cluster-deps.sh (Debian's containerd and runc)")
		}
		bins[name] = p
	}
	// A short path: the socket path must fit in sun_path.
	dir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{Socket: filepath.Join(dir, "containerd.sock"), ctr: bins["ctr"], dir: dir}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.runtime.v2.task"]
    platforms = ["linux/amd64", "linux/arm64"]
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := testenv.StartProc("containerd", exec.Command(bins["containerd"], "--config", filepath.Join(dir, "config.toml")), &testenv.SyncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers first (their shims outlive containerd otherwise).
		out, _ := exec.Command(c.ctr, "--address", c.Socket, "-n", "default", "tasks", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(c.ctr, "--address", c.Socket, "tasks", "kill", "-s", "SIGKILL", id).Run()
			_ = exec.Command(c.ctr, "--address", c.Socket, "tasks", "delete", "-f", id).Run()
		}
		proc.Kill()
		_ = unmountUnder(dir)
		// The shims' socket dir is fixed in containerd 1.6; a test
		// cluster may use it too: removed only when empty.
		_ = os.Remove("/run/containerd/s")
		_ = os.Remove("/run/containerd")
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("cluster: containerd dir: %v", err)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if err := exec.Command(c.ctr, "--address", c.Socket, "version").Run(); err == nil {
			return c
		}
		select {
		case <-proc.Done:
			t.Fatalf("cluster: containerd exited (%v): %s", proc.Err(), proc.Tail(3000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: containerd not ready after a minute: %s", proc.Tail(3000))
		}
	}
}

// Import imports a Docker-archive tar (package imagebuild) and returns the
// names it imported ("docker.io/NAME:TAG").
func (c *Containerd) Import(tarPath string) ([]string, error) {
	out, err := exec.Command(c.ctr, "--address", c.Socket, "images", "import", tarPath).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ctr images import %s: %v: %s", tarPath, err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// "unpacking docker.io/epochfs/epochfs:v1 (sha256:…)...done"
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "unpacking" {
			names = append(names, f[1])
		}
	}
	return names, nil
}

// Run runs args in a new container of image (`ctr run --rm`, host
// network, extra ctr run flags such as --mount first in opts) and returns
// its combined output.
func (c *Containerd) Run(ctx context.Context, image string, opts []string, args ...string) (string, error) {
	id := fmt.Sprintf("t%d", time.Now().UnixNano())
	cmdArgs := append([]string{"--address", c.Socket, "run", "--rm", "--net-host",
		"--fifo-dir", filepath.Join(c.dir, "fifo"), "--runc-root", filepath.Join(c.dir, "runc")}, opts...)
	cmdArgs = append(cmdArgs, image, id)
	cmdArgs = append(cmdArgs, args...)
	out, err := exec.CommandContext(ctx, c.ctr, cmdArgs...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr run %s %v: %w", image, args, err)
	}
	return string(out), nil
}
