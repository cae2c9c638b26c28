package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
)

// requireE2E skips the test unless EPOCHFS_E2E=1 or CI=true
// (testenv.RequireE2E): under CI=true a missing cluster tool or image
// fails it.
func requireE2E(t *testing.T) {
	t.Helper()
	testenv.RequireE2E(t)
}

// imageArchive returns the path of bin/images/NAME.tar (`make images`;
// $EPOCHFS_IMAGES_DIR instead of bin/images when set) and the image name
// containerd imports it as ("docker.io/epochfs/epochfs:TAG").
func imageArchive(t *testing.T, name string) (path, ref string) {
	t.Helper()
	dir := os.Getenv("EPOCHFS_IMAGES_DIR")
	var root string
	if dir == "" {
		var err error
		if root, err = testenv.RepoRoot(); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin", "images")
	}
	path = filepath.Join(dir, name+".tar")
	st, err := os.Stat(path)
	if err != nil {
		testenv.RequireOrSkip(t, "image archive "+path+" missing", "run `make images`")
	}
	if root != "" {
		// bin/images from before a source change would test old code.
		if newer := newestGoFile(t, root); newer.ModTime().After(st.ModTime()) {
			t.Fatalf("%s is older than %s: run `make images` (make e2e does)", path, newer.Name())
		}
	}
	ref, err = cluster.ImageRef(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, ref
}

// newestGoFile returns the most recently modified .go file under
// root's cmd, pkg and internal directories (what the image's binaries are
// built from).
func newestGoFile(t *testing.T, root string) (newest fs.FileInfo) {
	t.Helper()
	for _, d := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			info, err := e.Info()
			if err == nil && (newest == nil || info.ModTime().After(newest.ModTime())) {
				newest = info
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return newest
}

// proc is a process a test started (a csi-driver on the host).
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *testenv.SyncBuffer
	exited chan struct{}
	err    error
}

// startProc starts bin with args; t.Cleanup kills it (by its PID) and,
// when the test failed, logs its output.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &testenv.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits up to 15 s for the exit, returning its error.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM:\n%s", p.name, p.out.String())
		return nil
	}
}
