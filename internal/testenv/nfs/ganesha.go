package nfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// Ganesha is an NFS-Ganesha server (NFSv3, VFS FSAL, its own rpcbind)
// exporting one directory read-only, started for one test by
// scripts/nfs-server.sh inside a private network namespace and reached from
// the host over a veth pair. Exported fields are read-only.
type Ganesha struct {
	// Name is the server's network namespace (epochfs-nfs-PID-N).
	Name string
	// Addr is the server's IPv4 address (rpcbind on 111, MOUNT on 20048,
	// NFS on 2049).
	Addr string
	// Export is the exported directory, as the URL names it.
	Export string
	// URL is the dataset's source URL, nfs://ADDR/EXPORT.
	URL string
	// State is the server's state directory (config, logs).
	State string
}

// StartGanesha exports dir with NFS-Ganesha until the end of the test
// (stopped in t.Cleanup, namespace and veth pair removed; a server whose
// test process died is swept by the next start). It needs root and the
// Debian packages of scripts/nfs-deps.sh (`make nfs-deps`); without them
// the test is skipped, or fails under CI=true.
func StartGanesha(t testing.TB, dir string) *Ganesha {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequireOrSkip(t, "NFS-Ganesha needs root", "run the test as root (network namespace, veth pair)")
	}
	for _, bin := range []string{"ganesha.nfsd", "rpcbind", "rpcinfo", "ip", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.RequireOrSkip(t, bin+" not found", "run `make nfs-deps` (scripts/nfs-deps.sh: nfs-ganesha, nfs-ganesha-vfs, rpcbind)")
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "nfs-server.sh")
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", script, "start", dir, strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nfs: start NFS-Ganesha: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	g := &Ganesha{Export: dir}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "NAME":
			g.Name = v
		case "ADDR":
			g.Addr = v
		case "STATE":
			g.State = v
		}
	}
	if g.Name == "" || g.Addr == "" {
		t.Fatalf("nfs: start NFS-Ganesha: unexpected output %q", stdout.String())
	}
	g.URL = "nfs://" + g.Addr + dir
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(g.State, "ganesha.log")); err == nil {
				t.Logf("ganesha.log (last 4 KiB):\n%s", tail(log, 4096))
			}
		}
		if out, err := exec.Command("bash", script, "stop", g.Name).CombinedOutput(); err != nil {
			t.Errorf("nfs: stop NFS-Ganesha %s: %v\n%s", g.Name, err, out)
		}
	})
	return g
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// String names the server for logs.
func (g *Ganesha) String() string { return fmt.Sprintf("ganesha %s at %s", g.Name, g.Addr) }
