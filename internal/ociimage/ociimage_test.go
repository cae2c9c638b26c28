package ociimage

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
	"strings"
	"testing"
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

// image is a written image, read back.
type image struct {
	config struct {
		Config Config
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	tags   []string
	layers [][]byte
}

// readImage checks the Docker-archive layout ctr imports (a manifest
// naming the config and layers, diff_ids matching the layers' digests) and
// returns what it holds.
func readImage(t *testing.T, archive []byte) image {
	t.Helper()
	files, _ := readTar(t, bytes.NewReader(archive))
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 {
		t.Fatalf("manifest %s", files["manifest.json"])
	}
	var img image
	img.tags = manifest[0].RepoTags
	if err := json.Unmarshal(files[manifest[0].Config], &img.config); err != nil {
		t.Fatal(err)
	}
	if len(img.config.RootFS.DiffIDs) != len(manifest[0].Layers) {
		t.Fatalf("%d diff_ids for %d layers", len(img.config.RootFS.DiffIDs), len(manifest[0].Layers))
	}
	for i, name := range manifest[0].Layers {
		layer, ok := files[name]
		if !ok {
			t.Fatalf("layer %s missing", name)
		}
		sum := sha256.Sum256(layer)
		if want := "sha256:" + hex.EncodeToString(sum[:]); img.config.RootFS.DiffIDs[i] != want {
			t.Fatalf("diff_id %d %s, want %s", i, img.config.RootFS.DiffIDs[i], want)
		}
		img.layers = append(img.layers, layer)
	}
	return img
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
	var buf bytes.Buffer
	if err := WriteDirImage(&buf, root, "local/x:1", Config{Cmd: []string{"/bin/sh"}}); err != nil {
		t.Fatal(err)
	}
	img := readImage(t, buf.Bytes())
	if len(img.tags) != 1 || img.tags[0] != "local/x:1" || len(img.layers) != 1 {
		t.Fatalf("tags %v, %d layers", img.tags, len(img.layers))
	}
	if got := img.config.Config; strings.Join(got.Cmd, " ") != "/bin/sh" || len(got.Env) != 1 || got.Env[0] != DefaultPath {
		t.Fatalf("config %+v", got)
	}
	_, entries := readTar(t, bytes.NewReader(img.layers[0]))
	if got := strings.Join(entries, " "); got != "bin/:5::755 bin/sh:2:x:777 bin/x:0::755" {
		t.Fatalf("layer entries %q", got)
	}
	// Reproducible: the same tree gives the same bytes.
	var again bytes.Buffer
	if err := WriteDirImage(&again, root, "local/x:1", Config{Cmd: []string{"/bin/sh"}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("two writes of the same tree differ")
	}
}

func TestWriteLayerEntries(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	layer, err := WriteLayer(filepath.Join(dir, "l.tar"), []Entry{
		File("usr/local/bin/b", src, 0o755),
		Dir("usr/local/bin"), Dir("usr"), Dir("usr/local"),
		{Name: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Name: "/etc/motd", Mode: 0o644, Data: []byte("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(layer.Path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != layer.Size {
		t.Fatalf("size %d, file %d", layer.Size, len(data))
	}
	files, entries := readTar(t, bytes.NewReader(data))
	want := "etc/motd:0::644 tmp/:5::1777 usr/:5::755 usr/local/:5::755 usr/local/bin/:5::755 usr/local/bin/b:0::755"
	if got := strings.Join(entries, " "); got != want {
		t.Fatalf("entries\n%s\nwant\n%s", got, want)
	}
	if string(files["usr/local/bin/b"]) != "binary" || string(files["etc/motd"]) != "hello" {
		t.Fatalf("contents %q %q", files["usr/local/bin/b"], files["etc/motd"])
	}
	if again, err := ReadLayer(layer.Path); err != nil || again != layer {
		t.Fatalf("ReadLayer %+v %v, want %+v", again, err, layer)
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
	layer, err := RootfsLayer(filepath.Join(t.TempDir(), "l.tar"), &in, func(name string) bool { return name == "etc/skip" })
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(layer.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, entries := readTar(t, bytes.NewReader(data))
	want := "dev/:5::755 usr/:5::755 usr/bin/:5::755 usr/bin/a:0::755 usr/bin/b:1:usr/bin/a:0 var/mail/:5::2775"
	if got := strings.Join(entries, " "); got != want {
		t.Fatalf("entries\n%s\nwant\n%s", got, want)
	}
	tr := tar.NewReader(bytes.NewReader(data))
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
	a, err := WriteLayer(filepath.Join(dir, "a.tar"), []Entry{Dir("a")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := WriteLayer(filepath.Join(dir, "b.tar"), []Entry{Dir("b")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	if err := WriteFile(out, "epochfs/x:v1", Config{User: "65532", WorkingDir: "/"}, []Layer{a, b}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img := readImage(t, data)
	if len(img.layers) != 2 || img.config.Config.User != "65532" {
		t.Fatalf("%d layers, config %+v", len(img.layers), img.config.Config)
	}
	for _, bad := range []string{"nameonly", "host:5000/name"} {
		if err := Write(io.Discard, bad, Config{}, []Layer{a}); err == nil {
			t.Errorf("ref %q accepted", bad)
		}
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
