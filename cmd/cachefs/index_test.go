package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
)

func TestIndexWriteAndVerify(t *testing.T) {
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 120, Classes: 6, MedianSize: 2000, MinSize: 1, MaxSize: 20_000, Seed: 5})
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "bad\x01name"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &globalFlags{logLevel: "error", logFormat: "text"}
	out := filepath.Join(src, manifest.DefaultPath) // next to the dataset: never indexed itself
	var stdout, stderr bytes.Buffer
	cfg := indexConfig{source: src, out: out, checksum: true, workers: 4, progress: "lines"}
	if err := runIndex(context.Background(), g, cfg, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "120 files") || !strings.Contains(stdout.String(), "1 skipped names") {
		t.Errorf("summary: %s", stdout.String())
	}
	m, err := manifest.ReadFile(out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Files() != len(files) || !m.Info().Checksums || m.TotalBytes() != datagen.TotalSize(files) {
		t.Fatalf("manifest: %d files, %d bytes, checksums %v", m.Files(), m.TotalBytes(), m.Info().Checksums)
	}
	for _, f := range files {
		i, ok := m.Find(f.Path)
		sum := datagen.Sum(f)
		if !ok || m.Size(i) != f.Size || !bytes.Equal(m.Checksum(i), sum[:]) {
			t.Fatalf("%s: missing or wrong size/sha256 in the manifest", f.Path)
		}
	}
	if i, ok := m.Find("empty"); !ok || !m.IsDir(i) {
		t.Error("empty directory not in the manifest")
	}

	verify := indexConfig{source: src, verify: out, checksum: true, workers: 4, progress: "none"}
	stdout.Reset()
	if err := runIndex(context.Background(), g, verify, &stdout, &stderr); err != nil {
		t.Fatalf("verify of an unchanged dataset: %v\n%s", err, stdout.String())
	}

	// Drift: one file rewritten with the same size (only the sha256 and the
	// mtime tell), one removed, one added.
	changed := filepath.Join(src, files[0].Path)
	data, err := os.ReadFile(changed)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff
	if err := os.WriteFile(changed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, files[1].Path)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "new.jpg"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	err = runIndex(context.Background(), g, verify, &stdout, &stderr)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDrift {
		t.Fatalf("verify with drift: %v, want exit %d", err, exitDrift)
	}
	for _, want := range []string{`missing: "` + files[1].Path, `new: "new.jpg"`, `changed: "` + files[0].Path, "sha256"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("drift report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestIndexVerifyLegacyManifest: --verify of a manifest whose posix
// versions are mtime+size only (built before the ctime and inode) reports
// every file as changed and says why.
func TestIndexVerifyLegacyManifest(t *testing.T) {
	src := t.TempDir()
	p := filepath.Join(src, "f")
	if err := os.WriteFile(p, []byte("bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := manifest.Build([]manifest.File{{Path: "f", Size: fi.Size(), Version: fmt.Sprintf("%d-%d", fi.ModTime().UnixNano(), fi.Size())}},
		manifest.BuildOptions{Info: manifest.Info{Source: "file://" + src}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "old")
	if _, err := old.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	g := &globalFlags{logLevel: "error", logFormat: "text"}
	err = runIndex(context.Background(), g, indexConfig{source: src, verify: file, workers: 1, progress: "none"}, &stdout, &stderr)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDrift {
		t.Fatalf("verify of a legacy manifest: %v, want exit %d", err, exitDrift)
	}
	for _, want := range []string{"before posix versions held the ctime and inode", `changed: "f"`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestIndexFlags(t *testing.T) {
	g := &globalFlags{logLevel: "error", logFormat: "text"}
	cases := []struct {
		name string
		cfg  indexConfig
		want string
	}{
		{"no output", indexConfig{source: "/tmp", workers: 1, progress: "none"}, "--out FILE"},
		{"upload and verify", indexConfig{source: "/tmp", upload: true, verify: "y", workers: 1, progress: "none"}, "exclusive"},
		{"both", indexConfig{source: "/tmp", out: "x", verify: "y", workers: 1, progress: "none"}, "exclusive"},
		{"workers", indexConfig{source: "/tmp", out: "x", workers: 0, progress: "none"}, "--workers"},
		{"progress", indexConfig{source: "/tmp", out: "x", workers: 1, progress: "bar"}, "--progress"},
		{"bad source", indexConfig{source: "relative", out: "x", workers: 1, progress: "none"}, "absolute"},
		{"old -o FILE", indexConfig{source: "/tmp", format: "/tmp/m.manifest", workers: 1, progress: "none"}, `-o "/tmp/m.manifest" is not an output format (json, yaml, wide, name): to write the manifest to /tmp/m.manifest, give --out /tmp/m.manifest`},
		{"bad format", indexConfig{source: "/tmp", out: "x", format: "jsonpath={.files}", workers: 1, progress: "none"}, `unknown output format`},
		{"corrupt manifest", indexConfig{source: "/tmp", verify: "/dev/null", workers: 1, progress: "none"}, "corrupt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runIndex(context.Background(), g, tc.cfg, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestIndexUploadS3: --upload stores the manifest next to an S3 dataset,
// where a mount finds it by itself (manifest.Discover with the default
// location), and -o URL stores it at any object.
func TestIndexUploadS3(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "datasets")
	files := datagen.Spec{Files: 40, Classes: 4, MedianSize: 500, MinSize: 1, MaxSize: 4000, Seed: 9}.Plan()
	mi.PutFiles(t, "datasets", "set/", files)
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	src := "s3://datasets/set?endpoint=" + mi.Endpoint + "&region=us-east-1"
	elsewhere := "s3://datasets/manifests/set.manifest?endpoint=" + mi.Endpoint + "&region=us-east-1"
	g := &globalFlags{logLevel: "error", logFormat: "text"}
	var stdout bytes.Buffer
	cfg := indexConfig{source: src, out: elsewhere, upload: true, workers: 4, progress: "none"}
	if err := runIndex(context.Background(), g, cfg, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(stdout.String(), "manifest "); got != 2 {
		t.Errorf("want two 'manifest' lines (the URL and the upload):\n%s", stdout.String())
	}

	ctx := context.Background()
	b := backendtest.Open(t, src)
	for _, loc := range []string{manifest.LocAuto, elsewhere} {
		m, where, err := manifest.Discover(ctx, b, loc, backend.Options{})
		if err != nil || m == nil {
			t.Fatalf("discover %q: %v, %v", loc, m, err)
		}
		if m.Files() != len(files) || m.TotalBytes() != datagen.TotalSize(files) {
			t.Errorf("%s: %d files, %d bytes; want %d, %d", where, m.Files(), m.TotalBytes(), len(files), datagen.TotalSize(files))
		}
	}
	// Re-indexing does not index the stored manifest itself.
	stdout.Reset()
	if err := runIndex(ctx, g, indexConfig{source: src, upload: true, workers: 4, progress: "none"}, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), fmt.Sprintf("%d files", len(files))) {
		t.Errorf("re-index: %s", stdout.String())
	}
}
