package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
)

func TestParseEpoch(t *testing.T) {
	good := `{"checksum": "00ff00ff00ff00ff", "images": 300, "images_per_s": 150.5, "seconds": 1.99, "torch": "1.13.0a0", "workers": 2}`
	for _, tc := range []struct {
		name, out string
		want      Epoch
		err       string
	}{
		{"alone", good + "\n", Epoch{Images: 300, Seconds: 1.99, ImagesPerS: 150.5, Checksum: "00ff00ff00ff00ff", Workers: 2, Torch: "1.13.0a0"}, ""},
		{"after warnings", "UserWarning: something\n{not json either\n" + good, Epoch{Images: 300, Seconds: 1.99, ImagesPerS: 150.5, Checksum: "00ff00ff00ff00ff", Workers: 2, Torch: "1.13.0a0"}, ""},
		{"last line wins", `{"checksum": "0000000000000001", "images": 1, "seconds": 1}` + "\n" + good, Epoch{Images: 300, Seconds: 1.99, ImagesPerS: 150.5, Checksum: "00ff00ff00ff00ff", Workers: 2, Torch: "1.13.0a0"}, ""},
		{"nothing", "Traceback (most recent call last):\n", Epoch{}, "no result line"},
		{"no images", `{"checksum": "00ff00ff00ff00ff", "images": 0, "seconds": 1}`, Epoch{}, "without images"},
		{"short checksum", `{"checksum": "ff", "images": 3, "seconds": 1}`, Epoch{}, "bad checksum"},
		{"not hex", `{"checksum": "zzzzzzzzzzzzzzzz", "images": 3, "seconds": 1}`, Epoch{}, "bad checksum"},
		{"bad json", `{"images": "many"}`, Epoch{}, "bad result line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEpoch([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseEpoch = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLoadArgsNoSecrets(t *testing.T) {
	a := LoadArgs{Bucket: "b", Endpoint: "http://127.0.0.1:9000", Workers: 8, Seed: 3, Env: []string{"AWS_SECRET_ACCESS_KEY=s3cr3t"}}
	argv := a.argv("loader.py")
	want := []string{"loader.py", "--workers", "8", "--seed", "3", "--s3-bucket", "b", "--endpoint-url", "http://127.0.0.1:9000"}
	if !slices.Equal(argv, want) {
		t.Errorf("argv = %q, want %q", argv, want)
	}
	if strings.Contains(strings.Join(argv, " "), "s3cr3t") {
		t.Errorf("a credential in argv: %q", argv)
	}
	d := LoadArgs{Dir: "/data", Workers: 2, Seed: 1}.argv("l.py")
	if !slices.Equal(d, []string{"l.py", "--workers", "2", "--seed", "1", "--data", "/data"}) {
		t.Errorf("dir argv = %q", d)
	}
}

// TestLoaderSmoke runs loader.py over a small local JPEG tree: every run
// sees every image; the checksum does not depend on the order (seed) or the
// number of workers, and changes when one image does.
func TestLoaderSmoke(t *testing.T) {
	l := requireLoader(t)
	dir := t.TempDir()
	small := datagen.JPEGSpec{Files: 40, Classes: 4, Seed: 7, MedianPixels: 20_000}
	paths, _, err := writeDataset(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var first Epoch
	for i, a := range []LoadArgs{{Dir: dir, Workers: 0, Seed: 1}, {Dir: dir, Workers: 2, Seed: 2}} {
		e, err := l.Run(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if e.Images != len(paths) || e.Workers != a.Workers {
			t.Fatalf("run %d saw %d images with %d workers, want %d with %d", i, e.Images, e.Workers, len(paths), a.Workers)
		}
		if i == 0 {
			first = e
		} else if e.Checksum != first.Checksum {
			t.Fatalf("checksum %s with 2 workers, seed 2; %s with 0 workers, seed 1: not order-free", e.Checksum, first.Checksum)
		}
	}
	// Another image in place of one of them: another checksum.
	small.Files, small.Seed = 1, 8
	ims, err := small.Plan()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ims[0].Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(paths[0])), b, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := l.Run(ctx, LoadArgs{Dir: dir, Workers: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e.Images != len(paths) || e.Checksum == first.Checksum {
		t.Fatalf("one image replaced: %d images, checksum %s (was %s)", e.Images, e.Checksum, first.Checksum)
	}
}

// requireLoader is loader.py with an interpreter that has torch, or skips
// (fails under CI=true).
func requireLoader(t *testing.T) Loader {
	t.Helper()
	py, err := FindPython("")
	if err != nil {
		testenv.RequireOrSkip(t, "python3 with torch and torchvision", err.Error())
	}
	return Loader{Python: py, Script: "loader.py"}
}

// TestLoaderS3Smoke reads the same small tree from a MinIO prefix with
// boto3 in 2 workers: the same images, the same checksum as ImageFolder over
// the directory.
func TestLoaderS3Smoke(t *testing.T) {
	l := requireLoader(t)
	if out, err := exec.Command(l.Python, "-c", "import boto3").CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "python3-boto3", fmt.Sprintf("%v: %s", err, out))
	}
	dir := t.TempDir()
	paths, _, err := writeDataset(dir, datagen.JPEGSpec{Files: 30, Classes: 3, Seed: 9, MedianPixels: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	m := s3.StartMinIO(t)
	bucket := m.NewBucket(t)
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		m.Put(t, bucket, "train/"+p, b)
	}
	m.Put(t, bucket, "train2/class-000/stray.jpg", []byte("not under the prefix"))
	ctx := context.Background()
	want, err := l.Run(ctx, LoadArgs{Dir: dir, Workers: 0, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Run(ctx, LoadArgs{Bucket: bucket, Prefix: "train", Endpoint: m.Endpoint, Workers: 2, Seed: 2,
		Env: []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Images != len(paths) || got.Checksum != want.Checksum {
		t.Fatalf("boto3: %d images, checksum %s; ImageFolder: %d, %s", got.Images, got.Checksum, want.Images, want.Checksum)
	}
}
