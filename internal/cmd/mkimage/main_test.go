package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// imageFiles reads a Docker-archive tar (with go-containerregistry's
// reader, which checks each layer's diff_id) and returns its tag, config
// and the files of its layers merged (later layers win), "typeflag:mode".
func imageFiles(t *testing.T, path string) (tag string, cfg map[string]any, files map[string]string, layers int) {
	t.Helper()
	ref, err := imagebuild.ArchiveRef(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var config struct{ Config map[string]any }
	if err := json.Unmarshal(raw, &config); err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files = map[string]string{}
	for i, l := range ls {
		want, _ := l.DiffID()
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		lr := tar.NewReader(io.TeeReader(rc, h))
		for {
			hd, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimSuffix(hd.Name, "/")] = fmt.Sprintf("%c:%o", hd.Typeflag, hd.Mode)
		}
		_, _ = io.Copy(h, rc)
		rc.Close()
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want.String() {
			t.Fatalf("layer %d: digest %s, diff_id %s", i, got, want)
		}
	}
	return ref, config.Config, files, len(ls)
}

// TestEpochfsImage builds the epochfs image from a stand-in root
// filesystem tar (as mmdebstrap writes it) and stand-in binaries, twice:
// the second run reuses the converted base layer.
func TestEpochfsImage(t *testing.T) {
	dir := t.TempDir()
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/fusermount3", Typeflag: tar.TypeReg, Mode: 0o4755},
		{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	rootfsPath := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(rootfsPath, rootfs.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		if err := os.WriteFile(filepath.Join(binDir, b), []byte(b), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "epochfs.tar")
	for attempt := 1; attempt <= 2; attempt++ {
		if err := run([]string{"epochfs", "-rootfs", rootfsPath, "-bin-dir", binDir, "-ref", "epochfs/epochfs:v9", "-out", out}); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		tag, cfg, files, layers := imageFiles(t, out)
		if tag != "epochfs/epochfs:v9" || layers != 2 {
			t.Fatalf("attempt %d: tag %s, %d layers", attempt, tag, layers)
		}
		if got := fmt.Sprintf("%v %v %v", cfg["Cmd"], cfg["WorkingDir"], cfg["User"]); got != "[/usr/local/bin/cachefs --help] / <nil>" {
			t.Errorf("config: %s", got)
		}
		want := map[string]string{
			"usr/bin/fusermount3": "0:4755", "dev": "5:755",
			"usr/local/bin/cachefs": "0:755", "usr/local/bin/cachefs-job": "0:755",
			"usr/local/bin/csi-driver": "0:755", "usr/local/bin/job-controller": "0:755",
		}
		for name, mode := range want {
			if files[name] != mode {
				t.Errorf("attempt %d: %s: %q, want %q", attempt, name, files[name], mode)
			}
		}
		if _, ok := files["dev/null"]; ok {
			t.Errorf("device node dev/null in the image")
		}
	}
	if _, err := os.Stat(rootfsPath + ".layer.gz"); err != nil {
		t.Errorf("base layer not kept: %v", err)
	}
	// A new rootfs tar (made again by the script) makes a new base layer.
	future := time.Now().Add(time.Hour)
	tw = tar.NewWriter(&rootfs)
	rootfs.Reset()
	if err := tw.WriteHeader(&tar.Header{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootfsPath, rootfs.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(rootfsPath, future, future); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"epochfs", "-rootfs", rootfsPath, "-bin-dir", binDir, "-ref", "epochfs/epochfs:v9", "-out", out}); err != nil {
		t.Fatal(err)
	}
	if _, _, files, _ := imageFiles(t, out); files["etc"] == "" || files["usr/bin/fusermount3"] != "" {
		t.Errorf("base layer not made again from the new rootfs tar: %v", files)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*tmp*"))
	if len(leftovers) > 0 || fileExists(out+".bin-layer") {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestTestReaderImage builds the test-reader image and runs its
// read-dataset script with the same busybox applets, on the host.
func TestTestReaderImage(t *testing.T) {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "reader.tar")
	if err := run([]string{"test-reader", "-busybox", busybox, "-ref", "epochfs/test-reader:v9", "-out", out}); err != nil {
		t.Fatal(err)
	}
	_, cfg, files, _ := imageFiles(t, out)
	for _, name := range []string{"bin/busybox", "bin/sh", "bin/sha256sum", "bin/find", "bin/xargs", "bin/sort", "usr/local/bin/read-dataset"} {
		if files[name] == "" {
			t.Errorf("%s missing", name)
		}
	}
	if fmt.Sprint(cfg["Cmd"]) != "[/bin/sh]" {
		t.Errorf("Cmd %v", cfg["Cmd"])
	}

	// read-dataset with busybox's applets only.
	applets := filepath.Join(dir, "applets")
	if err := os.Mkdir(applets, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "find", "sort", "xargs", "sha256sum", "echo"} {
		if err := os.Symlink(busybox, filepath.Join(applets, a)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	contents := map[string]string{"a": "alpha", "sub/b c": "beta with a space", "sub/z": ""}
	for name, c := range contents {
		p := filepath.Join(data, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(busybox, "sh", "-c", readDataset, "read-dataset", data)
	cmd.Env = []string{"PATH=" + applets}
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("read-dataset: %v: %s", err, got)
	}
	var names []string
	for n := range contents {
		names = append(names, n)
	}
	sort.Strings(names)
	var want strings.Builder
	for pass := 1; pass <= 2; pass++ {
		fmt.Fprintf(&want, "pass %d\n", pass)
		for _, n := range names {
			sum := sha256.Sum256([]byte(contents[n]))
			fmt.Fprintf(&want, "%s  %s\n", hex.EncodeToString(sum[:]), filepath.Join(data, n))
		}
	}
	want.WriteString("done\n")
	if string(got) != want.String() {
		t.Fatalf("read-dataset output\n%s\nwant\n%s", got, want.String())
	}
}
