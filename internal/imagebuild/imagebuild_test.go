package imagebuild

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// readTar returns the files of a tar by name, and its entries as
// "name:type:link:mode" in order.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var entries []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, entries
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
		entries = append(entries, fmt.Sprintf("%s:%c:%s:%o", h.Name, h.Typeflag, h.Linkname, h.Mode))
	}
}

// readImage reads the Docker-archive tar at path as ctr imports it
// (go-containerregistry's tarball reader checks the manifest, the config
// and that every layer's uncompressed digest is its diff_id) and returns
// its tags, config and layers' entries.
func readImage(t *testing.T, path string) (tags []string, cfg v1.Config, layers [][]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, bytes.NewReader(data))
	var manifest []struct{ RepoTags []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json %s: %v", files["manifest.json"], err)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.IsZero() {
		t.Errorf("config: os %s, arch %s, created %v", cf.OS, cf.Architecture, cf.Created)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != len(cf.RootFS.DiffIDs) {
		t.Fatalf("%d layers, %d diff_ids", len(ls), len(cf.RootFS.DiffIDs))
	}
	for i, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, entries := readTar(t, io.TeeReader(rc, h))
		_, _ = io.Copy(h, rc) // the tar's trailing padding
		rc.Close()
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != cf.RootFS.DiffIDs[i].String() {
			t.Fatalf("layer %d: uncompressed digest %s, diff_id %s", i, got, cf.RootFS.DiffIDs[i])
		}
		layers = append(layers, entries)
	}
	return manifest[0].RepoTags, cf.Config, layers
}

// layerEntries returns the entries of a layer tar written by WriteLayer.
func layerEntries(t *testing.T, l v1.Layer) (map[string][]byte, []string) {
	t.Helper()
	if mt, err := l.MediaType(); err != nil || mt != types.DockerLayer {
		t.Fatalf("layer media type %s (%v), want %s", mt, err, types.DockerLayer)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

func TestWriteDirImage(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "x"), []byte("hi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("x", filepath.Join(root, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	entries, err := DirEntries(root, "")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteEntriesImage(out, "local/x:1", v1.Config{Cmd: []string{"/bin/sh"}}, entries); err != nil {
		t.Fatal(err)
	}
	tags, cfg, layers := readImage(t, out)
	if len(tags) != 1 || tags[0] != "local/x:1" || len(layers) != 1 {
		t.Fatalf("tags %v, %d layers", tags, len(layers))
	}
	if strings.Join(cfg.Cmd, " ") != "/bin/sh" || len(cfg.Env) != 1 || cfg.Env[0] != DefaultPath {
		t.Fatalf("config %+v", cfg)
	}
	if got := strings.Join(layers[0], " "); got != "bin/:5::755 bin/sh:2:x:777 bin/x:0::755" {
		t.Fatalf("layer entries %q", got)
	}
	if _, err := os.Stat(out + ".layer"); err == nil {
		t.Error("the layer's temporary file is left")
	}
	// Reproducible: the same tree gives the same bytes.
	first, _ := os.ReadFile(out)
	if err := WriteEntriesImage(out, "local/x:1", v1.Config{Cmd: []string{"/bin/sh"}}, entries); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(first, again) {
		t.Fatal("two writes of the same tree differ")
	}
}

func TestWriteLayerEntries(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "l.tar.gz")
	layer, err := WriteLayer(path, []Entry{
		File("usr/local/bin/b", src, 0o755),
		Dir("usr/local/bin"), Dir("usr"), Dir("usr/local"),
		{Name: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Name: "/etc/motd", Mode: 0o644, Data: []byte("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if size, err := layer.Size(); err != nil || size != st.Size() {
		t.Fatalf("size %d (%v), file %d", size, err, st.Size())
	}
	files, entries := layerEntries(t, layer)
	want := "etc/motd:0::644 tmp/:5::1777 usr/:5::755 usr/local/:5::755 usr/local/bin/:5::755 usr/local/bin/b:0::755"
	if got := strings.Join(entries, " "); got != want {
		t.Fatalf("entries\n%s\nwant\n%s", got, want)
	}
	if string(files["usr/local/bin/b"]) != "binary" || string(files["etc/motd"]) != "hello" {
		t.Fatalf("contents %q %q", files["usr/local/bin/b"], files["etc/motd"])
	}
	again, err := ReadLayer(path)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := layer.DiffID()
	d2, _ := again.DiffID()
	if d1 != d2 {
		t.Fatalf("ReadLayer diff_id %s, want %s", d2, d1)
	}
	if _, err := WriteLayer(filepath.Join(dir, "bad.tar.gz"), []Entry{{Name: "/", Mode: 0o644}}); err == nil {
		t.Error("an entry without a name accepted")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*tmp*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// TestRootfsLayer converts a tar like mmdebstrap's: "./" names, a hard
// link, a device node, an owner other than root.
func TestRootfsLayer(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/a", Typeflag: tar.TypeReg, Mode: 0o755, Size: 1, Uid: 0},
		{Name: "./usr/bin/b", Typeflag: tar.TypeLink, Linkname: "./usr/bin/a"},
		{Name: "./var/mail/", Typeflag: tar.TypeDir, Mode: 0o2775, Gid: 8},
		{Name: "./etc/skip", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("A"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := RootfsLayer(filepath.Join(t.TempDir(), "l.tar.gz"), &in, func(name string) bool { return name == "etc/skip" })
	if err != nil {
		t.Fatal(err)
	}
	_, entries := layerEntries(t, layer)
	want := "dev/:5::755 usr/:5::755 usr/bin/:5::755 usr/bin/a:0::755 usr/bin/b:1:usr/bin/a:0 var/mail/:5::2775"
	if got := strings.Join(entries, " "); got != want {
		t.Fatalf("entries\n%s\nwant\n%s", got, want)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatal("var/mail/ missing")
		}
		if h.Name == "var/mail/" {
			if h.Gid != 8 {
				t.Fatalf("var/mail gid %d, want 8 (owners kept)", h.Gid)
			}
			break
		}
	}
}

func TestWriteTwoLayers(t *testing.T) {
	dir := t.TempDir()
	a, err := WriteLayer(filepath.Join(dir, "a.tar.gz"), []Entry{Dir("a")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := WriteLayer(filepath.Join(dir, "b.tar.gz"), []Entry{Dir("b")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	if err := WriteLayersFile(out, "epochfs/x:v1", v1.Config{User: "65532", WorkingDir: "/"}, a, b); err != nil {
		t.Fatal(err)
	}
	tags, cfg, layers := readImage(t, out)
	if len(layers) != 2 || cfg.User != "65532" || cfg.WorkingDir != "/" || tags[0] != "epochfs/x:v1" {
		t.Fatalf("%d layers, tags %v, config %+v", len(layers), tags, cfg)
	}
	if layers[0][0] != "a/:5::755" || layers[1][0] != "b/:5::755" {
		t.Fatalf("layers %v, want a then b", layers)
	}
	for _, bad := range []string{"nameonly", "host:5000/name", "ghcr.io/x:1", "UPPER/x:1"} {
		if err := WriteLayersFile(out, bad, v1.Config{}, a); err == nil {
			t.Errorf("ref %q accepted", bad)
		}
	}
	if err := WriteLayersFile(out, "epochfs/x:v1", v1.Config{}); err == nil {
		t.Error("an image without layers accepted")
	}
}

func TestBusyboxEntries(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	entries, err := BusyboxEntries("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name] = true
	}
	for _, want := range []string{"bin/busybox", "bin/sh", "bin/sha256sum", "bin/find", "bin/xargs", "bin/sort", "tmp"} {
		if !names[want] {
			t.Errorf("%s missing", want)
		}
	}
}
