package mount_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/source"
)

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	good := mount.Config{Source: dir, Mountpoint: dir, CacheDir: t.TempDir(), CacheSize: 1 << 20}
	cases := []struct {
		name   string
		edit   func(*mount.Config)
		is     error
		substr string
	}{
		{"relative source", func(c *mount.Config) { c.Source = "data/x" }, source.ErrInvalidURL, "absolute"},
		{"s3 without bucket", func(c *mount.Config) { c.Source = "s3:///x" }, source.ErrInvalidURL, "bucket"},
		{"credentials in URL", func(c *mount.Config) { c.Source = "s3://AKIAKEY:s3cr3tv4lue@bucket/x" }, source.ErrInvalidURL, "credentials"},
		{"no mount point", func(c *mount.Config) { c.Mountpoint = "" }, nil, "mount point is required"},
		{"mount point missing", func(c *mount.Config) { c.Mountpoint = filepath.Join(dir, "nope") }, os.ErrNotExist, "mount point"},
		{"mount point is a file", func(c *mount.Config) { c.Mountpoint = file }, nil, "not a directory"},
		{"no cache dir", func(c *mount.Config) { c.CacheDir = "" }, nil, "--cache-dir is required"},
		{"zero cache size", func(c *mount.Config) { c.CacheSize = 0 }, nil, "--cache-size must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			_, err := mount.New(c)
			if err == nil {
				t.Fatal("New accepted a bad config")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %q does not say %q", err, tc.substr)
			}
			if strings.Contains(err.Error(), "s3cr3tv4lue") || strings.Contains(err.Error(), "AKIAKEY") {
				t.Errorf("error %q repeats the credentials", err)
			}
		})
	}
	if _, err := mount.New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
}

func TestStartFailsCleanlyOnMissingSource(t *testing.T) {
	testenv.RequireFUSE(t)
	cacheDir := t.TempDir()
	m, err := mount.New(mount.Config{Source: filepath.Join(t.TempDir(), "gone"), Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); !errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("Start over a missing directory: %v, want ErrNotExist", err)
	}
	// Nothing was left open: the cache dir can be opened again.
	s, err := cache.Open(cache.Options{Dir: cacheDir, Capacity: 1 << 20})
	if err != nil {
		t.Fatalf("cache dir still locked after a failed Start: %v", err)
	}
	s.Close()
}

// TestS3NamesThroughMount mounts a MinIO prefix whose keys hold spaces and
// unicode, with credentials from the environment only.
func TestS3NamesThroughMount(t *testing.T) {
	testenv.RequireFUSE(t)
	testS3NamesThroughMount(t, &s3.StartMinIO(t).Server, "names")
}

// TestRGWNamesThroughMount is TestS3NamesThroughMount against Ceph RGW.
func TestRGWNamesThroughMount(t *testing.T) {
	testenv.RequireFUSE(t)
	testS3NamesThroughMount(t, ceph.RequireRGW(t), fmt.Sprintf("names-%d", os.Getpid()))
}

func testS3NamesThroughMount(t *testing.T, mi *s3.Server, bucket string) {
	mi.MakeBucket(t, bucket)
	objects := map[string]string{
		"ds/with space.jpg":       "a",
		"ds/ünïcødé/日本語.png":      "bb",
		"ds/deep/er/still/x.bin":  "ccc",
		"ds/plus+and%percent.txt": "dddd",
		"ds2/not-in-dataset.jpg":  "no",
		"dsx":                     "no",
	}
	for k, v := range objects {
		mi.Put(t, bucket, k, []byte(v))
	}
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	mnt := t.TempDir()
	mounttest.Start(t, mount.Config{
		Source:     "s3://" + bucket + "/ds?endpoint=" + mi.Endpoint,
		Mountpoint: mnt, CacheDir: t.TempDir(), CacheSize: 1 << 20,
	})
	var got []string
	err := filepath.Walk(mnt, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(mnt, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if want := objects["ds/"+rel]; string(b) != want {
				t.Errorf("%s: read %q, want %q", rel, b, want)
			}
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{"deep/er/still/x.bin", "plus+and%percent.txt", "with space.jpg", "ünïcødé/日本語.png"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("mount shows %q, want %q", got, want)
	}
}
