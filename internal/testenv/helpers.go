package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/datagen"
)

// GoBuild builds the main package pkg (a path relative to the repository
// root, like "./cmd/cachefs") into a temporary directory of t and returns
// the binary's path, named after the package's directory.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	return GoBuildTags(t, pkg, "")
}

// GoBuildTags is GoBuild with build tags (comma-separated, as for -tags);
// with tags, cgo is enabled (CGO_ENABLED=1), as the ceph tag needs.
func GoBuildTags(t testing.TB, pkg, tags string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if tags != "" {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// WriteDataset generates spec's dataset in a temporary directory of t and
// returns the directory and the files.
func WriteDataset(t testing.TB, spec datagen.Spec) (dir string, files []datagen.File) {
	t.Helper()
	dir = t.TempDir()
	files, err := datagen.Write(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	return dir, files
}

// Mounted reports whether dir is a mount point in this process's mount
// namespace (MountPoints).
func Mounted(dir string) (bool, error) {
	mounts, err := MountPoints()
	return slices.Contains(mounts, dir), err
}

// ErrExited is WaitMounted's error when the mounting process ended first.
var ErrExited = errors.New("testenv: the mounting process exited before the mount appeared")

// WaitMounted waits until dir is a mount point (Mounted), polling every
// 10ms. It returns an error when timeout passes first, or one wrapping
// ErrExited when a value arrives on exited first (the mounting process's
// Wait result; a nil channel is not watched).
func WaitMounted(dir string, timeout time.Duration, exited <-chan error) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := Mounted(dir)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: %s was not mounted within %v", dir, timeout)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%w: %v", ErrExited, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Scrape GETs a Prometheus text endpoint (http://host:port/metrics) and
// returns its samples, keyed by the name as written with its labels
// (`x_bucket{le="0.1"}`), and the whole body.
func Scrape(t testing.TB, url string) (samples map[string]float64, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	samples = map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := cutLast(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			samples[name] = v
		}
	}
	return samples, string(b)
}

// Metric returns the value of one sample (a name with its labels, if any)
// of a Prometheus text endpoint; the test fails when there is none.
func Metric(t testing.TB, url, name string) float64 {
	t.Helper()
	samples, _ := Scrape(t, url)
	v, ok := samples[name]
	if !ok {
		t.Fatalf("%s has no %s", url, name)
	}
	return v
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// RewriteSameSize replaces the bytes of the file at p by data (of the same
// size) and puts its mtime back, as touch -r, rsync -t or tar x do: in
// place (same inode), or by renaming a new file over it. It first lets the
// kernel's coarse clock tick (kernels before 6.13 stamp the ctime with it),
// as it has in real life between a read and a rewrite, and checks that size
// and mtime are what they were.
func RewriteSameSize(t testing.TB, p string, data []byte, byRename bool) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(data)) {
		t.Fatalf("rewrite of %s: %d bytes, want the same size %d", p, len(data), fi.Size())
	}
	time.Sleep(20 * time.Millisecond)
	target := p
	if byRename {
		target = filepath.Join(filepath.Dir(p), ".new-"+filepath.Base(p))
	}
	if err := os.WriteFile(target, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(target, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if byRename {
		if err := os.Rename(target, p); err != nil {
			t.Fatal(err)
		}
	}
	if after, err := os.Stat(p); err != nil || !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() {
		t.Fatalf("rewrite of %s did not keep size and mtime: %v, %v", p, after, err)
	}
}

// DocExample returns the YAML of the example of kind named name in the
// repository's doc file (e.g. "docs/JOB.md"): a ```yaml block whose kind
// and metadata.name are those. Tests run the examples a doc shows, so the
// doc cannot drift from what works.
func DocExample(t testing.TB, file, kind, name string) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	const fence = "```yaml\n"
	rest := string(doc)
	for {
		var ok bool
		if _, rest, ok = strings.Cut(rest, fence); !ok {
			t.Fatalf("%s has no %s example named %s", file, kind, name)
		}
		body, _, _ := strings.Cut(rest, "```")
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(body), &head); err != nil {
			continue // not an object (a values file, a fragment)
		}
		if head.Kind == kind && head.Metadata.Name == name {
			return []byte(body)
		}
	}
}
