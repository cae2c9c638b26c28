package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"image/jpeg"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/s3"
)

var spec = datagen.Spec{Files: 60, Classes: 5, TotalBytes: 6_000_000, Seed: 42}

// tree returns every file under dir with its bytes.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSameSeedSameBytes(t *testing.T) {
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	var out bytes.Buffer
	for _, dir := range []string{a, b} {
		if err := run(context.Background(), Config{Spec: spec, Out: dir, Workers: 4}, &out); err != nil {
			t.Fatal(err)
		}
	}
	other := spec
	other.Seed++
	if err := run(context.Background(), Config{Spec: other, Out: c, Workers: 1}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	ta, tb, tc := tree(t, a), tree(t, b), tree(t, c)
	if len(ta) != spec.Files {
		t.Fatalf("%d files, want %d", len(ta), spec.Files)
	}
	var total int64
	for p, x := range ta {
		if !bytes.Equal(x, tb[p]) {
			t.Fatalf("%s differs between two runs with the same seed", p)
		}
		total += int64(len(x))
	}
	if d := total - spec.TotalBytes; d > spec.TotalBytes/1000 || -d > spec.TotalBytes/1000 {
		t.Errorf("total %d, want about %d", total, spec.TotalBytes)
	}
	same := 0
	for p, x := range ta {
		if bytes.Equal(x, tc[p]) {
			same++
		}
	}
	if same != 0 {
		t.Errorf("%d files identical under another seed", same)
	}
	if !strings.Contains(out.String(), "generated 60 files") {
		t.Errorf("summary %q", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []Config{
		{Spec: spec, Workers: 1},
		{Spec: spec, Out: t.TempDir(), S3: "s3://b/p", Workers: 1},
		{Spec: spec, Out: t.TempDir()},
		{Spec: datagen.Spec{Files: 10, TotalBytes: 10}, Out: t.TempDir(), Workers: 1},
		{Spec: spec, S3: "/not/s3", Workers: 1},
		{Format: "png", Spec: spec, Out: t.TempDir(), Workers: 1},
		{Format: FormatJPEG, Spec: datagen.Spec{TotalBytes: 1 << 20}, JPEG: jpegSpec, Out: t.TempDir(), Workers: 1},
		{Format: FormatJPEG, JPEG: datagen.JPEGSpec{Files: 3, Quality: 101}, Out: t.TempDir(), Workers: 1},
		{Format: FormatJPEG, Out: t.TempDir(), Workers: 1},
		{Spec: spec, JPEG: jpegSpec, Out: t.TempDir(), Workers: 1},
	} {
		if err := run(context.Background(), c, io.Discard); err == nil {
			t.Errorf("run(%+v) succeeded", c)
		}
	}
}

func TestUploadToMinIO(t *testing.T) {
	m := s3.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	var out bytes.Buffer
	url := "s3://fresh-bucket/imagenet/train?endpoint=" + m.Endpoint + "&region=us-east-1"
	if err := run(context.Background(), Config{Spec: spec, S3: url, Workers: 8}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	want := map[string]datagen.File{}
	for _, f := range spec.Plan() {
		want["imagenet/train/"+f.Path] = f
	}
	ctx := context.Background()
	n := 0
	for obj := range m.Client().ListObjects(ctx, "fresh-bucket", minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		f, ok := want[obj.Key]
		if !ok {
			t.Errorf("unexpected object %s", obj.Key)
			continue
		}
		r, err := m.Client().GetObject(ctx, "fresh-bucket", obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if [32]byte(h.Sum(nil)) != datagen.Sum(f) {
			t.Errorf("%s: uploaded bytes differ from the plan", obj.Key)
		}
		n++
	}
	if n != spec.Files {
		t.Errorf("%d objects, want %d", n, spec.Files)
	}
	// Idempotent: a second upload into the now existing bucket.
	if err := run(ctx, Config{Spec: spec, S3: url, Workers: 2}, io.Discard); err != nil {
		t.Fatal(err)
	}
}

var jpegSpec = datagen.JPEGSpec{Files: 20, Classes: 4, Seed: 3, Quality: 85}

// checkJPEGs checks that got (path → bytes) holds exactly jpegSpec's
// images, each decodable by image/jpeg to its planned size, with the bytes
// of Encode.
func checkJPEGs(t *testing.T, got map[string][]byte) {
	t.Helper()
	ims, err := jpegSpec.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ims) {
		t.Errorf("%d files, want %d", len(got), len(ims))
	}
	for _, im := range ims {
		b, ok := got[im.Path]
		if !ok {
			t.Errorf("%s missing", im.Path)
			continue
		}
		img, err := jpeg.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", im.Path, err)
		}
		if r := img.Bounds(); r.Dx() != im.Width || r.Dy() != im.Height {
			t.Errorf("%s: %dx%d, planned %dx%d", im.Path, r.Dx(), r.Dy(), im.Width, im.Height)
		}
		if want, _ := im.Encode(); !bytes.Equal(b, want) {
			t.Errorf("%s: bytes differ from Encode", im.Path)
		}
	}
}

func TestJPEGToDir(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), Config{Format: FormatJPEG, JPEG: jpegSpec, Out: dir, Workers: 3}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	checkJPEGs(t, tree(t, dir))
	for _, want := range []string{"generated 20 files", "in 4 classes", "seed 3, jpeg quality 85", "sizes min "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary %q lacks %q", out.String(), want)
		}
	}
}

func TestJPEGToMinIO(t *testing.T) {
	m := s3.StartMinIO(t)
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	url := "s3://jpegs/train?endpoint=" + m.Endpoint + "&region=us-east-1"
	if err := run(context.Background(), Config{Format: FormatJPEG, JPEG: jpegSpec, S3: url, Workers: 4}, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := map[string][]byte{}
	for obj := range m.Client().ListObjects(ctx, "jpegs", minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		r, err := m.Client().GetObject(ctx, "jpegs", obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		key, ok := strings.CutPrefix(obj.Key, "train/")
		if !ok {
			t.Errorf("object %s outside the prefix", obj.Key)
		}
		got[key] = b
	}
	checkJPEGs(t, got)
}
