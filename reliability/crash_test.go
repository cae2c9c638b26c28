package reliability

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestCrashConsistency kills `cachefs mount` with SIGKILL at random moments
// while readers fill the cache, over many rounds. After each kill the cache
// is reopened: every entry it serves holds the source's exact bytes, its
// used-bytes accounting matches the files on disk, and no temp files remain.
func TestCrashConsistency(t *testing.T) {
	testenv.RequireFUSE(t)
	rounds := envInt("RELIABILITY_ROUNDS", 20)
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 300, Classes: 6, MedianSize: 40_000, MinSize: 1_000, MaxSize: 400_000, Seed: 31})
	capacity := datagen.TotalSize(files) * 6 / 10
	cacheDir, mnt := t.TempDir(), t.TempDir()
	keys := cacheKeys(t, src, files)
	rng := rand.New(rand.NewPCG(3, 4))

	var killedWithEntries, maxEntries int
	for round := 1; round <= rounds; round++ {
		cmd := exec.Command(bin, mountapi.CommandOptions{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: capacity, LogLevel: "error"}.Args()...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := testenv.WaitMounted(mnt, 6*time.Second, nil); err != nil {
			_ = cmd.Process.Kill()
			t.Fatal(err)
		}
		conn, err := testenv.FUSEConn(mnt)
		if err != nil {
			_ = cmd.Process.Kill()
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					f := files[r.IntN(len(files))]
					if _, err := os.ReadFile(join(mnt, f.Path)); err != nil {
						return // the mount died under us: expected
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+rng.IntN(400)) * time.Millisecond)
		// A kill while go-fuse's poll hack closes a file on the mount
		// leaves the process waiting for itself: the helper aborts the
		// connection then.
		if err := testenv.KillFUSEServer(cmd.Process, conn, cmd.Wait); err != nil {
			t.Fatal(err)
		}
		close(stop)
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		wg.Wait()

		n := checkCache(t, round, cacheDir, capacity, files, keys)
		if n > 0 {
			killedWithEntries++
		}
		maxEntries = max(maxEntries, n)
	}
	t.Logf("RESULT crash-consistency: rounds=%d rounds_with_entries=%d max_entries=%d wrong_bytes=0 temp_files_left=0",
		rounds, killedWithEntries, maxEntries)
}

// cacheKeys returns each file's whole-file cache key, as the mount forms it.
func cacheKeys(t *testing.T, src string, files []datagen.File) map[string]cache.Key {
	t.Helper()
	b := backendtest.Open(t, src)
	keys := map[string]cache.Key{}
	for _, f := range files {
		e, err := b.Stat(context.Background(), f.Path)
		if err != nil {
			t.Fatal(err)
		}
		keys[f.Path] = cache.Key{Dataset: b.ID(), Path: f.Path, Version: e.Version}
	}
	return keys
}

// checkCache reopens the cache after a crash and checks it; it returns the
// number of entries.
func checkCache(t *testing.T, round int, dir string, capacity int64, files []datagen.File, keys map[string]cache.Key) int {
	t.Helper()
	s, err := cache.Open(cache.Options{Dir: dir, Capacity: capacity})
	if err != nil {
		t.Fatalf("round %d: reopen the cache: %v", round, err)
	}
	defer s.Close()
	info, err := cache.ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.TempFiles != 0 {
		t.Errorf("round %d: %d temp files left after reopening", round, info.TempFiles)
	}
	st := s.Stats()
	if onDisk := entryBytes(t, dir); onDisk != st.UsedBytes || info.UsedBytes != st.UsedBytes {
		t.Errorf("round %d: used bytes %d (store) %d (info) but %d in entry files on disk", round, st.UsedBytes, info.UsedBytes, onDisk)
	}
	if st.UsedBytes > capacity {
		t.Errorf("round %d: used %d over capacity %d", round, st.UsedBytes, capacity)
	}
	errNoFetch := errors.New("not cached")
	for _, f := range files {
		k := keys[f.Path]
		if !s.Contains(k) {
			continue
		}
		res, err := s.Get(context.Background(), k, f.Size, func(context.Context, []byte) error { return errNoFetch })
		if errors.Is(err, errNoFetch) {
			continue // a damaged entry was dropped instead of served: fine
		}
		if err != nil {
			t.Fatalf("round %d: get %s: %v", round, f.Path, err)
		}
		var got []byte
		if res.File != nil {
			got, err = io.ReadAll(res.File)
			res.File.Close()
			if err != nil {
				t.Fatal(err)
			}
		} else {
			got = res.Data
		}
		if !bytes.Equal(got, datagen.Content(f)) {
			t.Fatalf("round %d: the cache served wrong bytes for %s", round, f.Path)
		}
	}
	return int(st.Entries)
}

// entryBytes sums the sizes of the cache's entry data files.
func entryBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		base := filepath.Base(p)
		if len(base) == 64 && !strings.Contains(base, ".") { // <sha256 hex>: an entry's bytes
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
