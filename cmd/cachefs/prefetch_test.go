package main_test

// End-to-end tests of `cachefs prefetch`: the binary fills a cache, a rerun
// resumes, a rerun while a mount holds the cache goes through the mount's
// control socket, and a later mount of the same source hits exactly what
// prefetch cached (byte hit ratio from the store's counters), for a
// directory and for MinIO.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/mount"
)

// prefetchSummary is the part of `cachefs prefetch -o json` the tests read.
type prefetchSummary struct {
	State        string  `json:"state"`
	Message      string  `json:"message"`
	Files        int64   `json:"files"`
	Bytes        int64   `json:"bytes"`
	CachedFiles  int64   `json:"cached_files"`
	CachedBytes  int64   `json:"cached_bytes"`
	PercentBytes float64 `json:"percent_bytes"`
	AlreadyBytes int64   `json:"already_bytes"`
	FetchedFiles int64   `json:"fetched_files"`
	FetchedBytes int64   `json:"fetched_bytes"`
	UsedBytes    int64   `json:"used_bytes"`
	Via          string  `json:"via"`
}

func runPrefetch(t *testing.T, bin string, env []string, wantCode int, args ...string) prefetchSummary {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"prefetch", "-o", "json", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != wantCode {
		t.Fatalf("cachefs prefetch %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, wantCode, stdout.String(), stderr.String())
	}
	var s prefetchSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("-o json output %q: %v", stdout.String(), err)
	}
	t.Logf("prefetch (%s): %s", s.Via, s.Message)
	return s
}

// laterEpoch mounts src on cacheDir and reads every file once, checking
// every sha256, and returns the mount's cache counters.
func laterEpoch(t *testing.T, src, cacheDir string, capacity int64, files []datagen.File) (hit, miss int64) {
	t.Helper()
	mnt := t.TempDir()
	m, err := mount.New(mount.Config{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: capacity})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	paths, want := datagen.Paths(files), datagen.Sums(files)
	res, err := epoch.Run(context.Background(), epoch.Options{Root: mnt, Paths: paths, Workers: 8, Seed: 5, Want: want})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 {
		t.Fatalf("%d files read wrong bytes through the later mount: %v", len(res.Mismatches), res.Mismatches[:min(5, len(res.Mismatches))])
	}
	st := m.Stats()
	return st.HitBytes, st.MissBytes
}

func TestPrefetchBinaryResumeControlAndLaterMount(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	src, files := testenv.WriteDataset(t, spec)
	total := datagen.TotalSize(files)
	capacity := total / 2
	cacheDir := t.TempDir()
	args := []string{src, "--cache-dir", cacheDir, "--cache-size", strconv.FormatInt(capacity, 10), "--workers", "8"}

	first := runPrefetch(t, bin, nil, 0, args...)
	if first.State != "cache-full" || first.Via != "local" || first.Files != int64(len(files)) || first.Bytes != total ||
		first.CachedBytes == 0 || first.CachedBytes > capacity || first.FetchedBytes != first.CachedBytes ||
		!strings.HasPrefix(first.Message, "cache full at") {
		t.Fatalf("first run: %+v", first)
	}
	second := runPrefetch(t, bin, nil, 0, args...)
	if second.FetchedBytes != 0 || second.FetchedFiles != 0 || second.AlreadyBytes != first.CachedBytes || second.CachedBytes != first.CachedBytes {
		t.Errorf("rerun cached something new: %+v", second)
	}

	// While a mount holds the cache dir: through its control socket.
	m, err := mount.New(mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: capacity})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	viaMount := runPrefetch(t, bin, nil, 0, src, "--cache-dir", cacheDir) // no --cache-size: the mount's
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if viaMount.Via != "mount" || viaMount.FetchedBytes != 0 || viaMount.CachedBytes != first.CachedBytes {
		t.Errorf("prefetch through the mount: %+v", viaMount)
	}

	hit, miss := laterEpoch(t, src, cacheDir, capacity, files)
	if hit != first.CachedBytes || hit+miss != total {
		t.Errorf("later mount: hit %d + miss %d bytes; prefetch cached %d of %d", hit, miss, first.CachedBytes, total)
	}
	t.Logf("later epoch byte hit ratio %.3f = prefetch's %.1f%%", float64(hit)/float64(total), first.PercentBytes)

	// No cache dir lock and no mount: --cache-size is required.
	cmd := exec.Command(bin, "prefetch", src, "--cache-dir", t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--cache-size is required") {
		t.Errorf("without --cache-size: %v %s", err, out)
	}
}

func TestPrefetchBinaryS3LaterMountHitsEverything(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "datasets")
	files := spec.Plan()
	mi.PutFiles(t, "datasets", "imagenet/train/", files)
	total := datagen.TotalSize(files)
	src := "s3://datasets/imagenet/train?endpoint=" + mi.Endpoint + "&region=us-east-1"
	env := []string{"AWS_ACCESS_KEY_ID=" + mi.AccessKey, "AWS_SECRET_ACCESS_KEY=" + mi.SecretKey}
	cacheDir := t.TempDir()
	capacity := 2 * total
	s := runPrefetch(t, bin, env, 0, src, "--cache-dir", cacheDir, "--cache-size", strconv.FormatInt(capacity, 10), "--workers", "16")
	if s.State != "complete" || s.CachedBytes != total || s.PercentBytes != 100 || !strings.HasPrefix(s.Message, "complete") {
		t.Fatalf("%+v", s)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	hit, miss := laterEpoch(t, src, cacheDir, capacity, files)
	if hit != total || miss != 0 {
		t.Errorf("later mount over S3: hit %d, miss %d bytes of %d; want every byte a hit", hit, miss, total)
	}
}
