package fusefs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/fusefs"
)

// TestReadaheadFiles: a missed open of a small file fetches the next
// ReadaheadFiles files of its directory into the cache without counting
// hits or misses; a later open of one of them is a hit; a file that is not
// next (or in another directory) is not fetched.
func TestReadaheadFiles(t *testing.T) { eachMode(t, testReadaheadFiles) }

func testReadaheadFiles(t *testing.T, mode string) {
	src := t.TempDir()
	for i := range 10 {
		mustWrite(t, filepath.Join(src, "a", fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("file %d of a", i)))
	}
	mustWrite(t, filepath.Join(src, "a", "sub", "x"), []byte("in a subdirectory"))
	mustWrite(t, filepath.Join(src, "b", "f00"), []byte("other directory"))
	m := mountDir(t, mode, src, 1<<20, fusefs.Options{ReadaheadFiles: 3})
	before := fusefs.ReadCounters()

	if got, err := os.ReadFile(filepath.Join(m.dir, "a", "f02")); err != nil || string(got) != "file 2 of a" {
		t.Fatalf("read a/f02: %q, %v", got, err)
	}
	// f03, f04, f05 arrive in the background.
	deadline := time.Now().Add(30 * time.Second)
	for m.store.Stats().Entries < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the cache holds %d entries, want 4 (a/f02 and the 3 files after it)", m.store.Stats().Entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // nothing more may come
	st := m.store.Stats()
	if st.Entries != 4 || st.Misses != 1 || st.Hits != 0 {
		t.Errorf("after one read: %d entries, %d misses, %d hits; want 4, 1, 0", st.Entries, st.Misses, st.Hits)
	}
	if got := fusefs.ReadCounters().FilesReadAhead - before.FilesReadAhead; got != 3 {
		t.Errorf("FilesReadAhead grew by %d, want 3", got)
	}
	for _, p := range []string{"a/f03", "a/f05"} {
		if got, err := os.ReadFile(filepath.Join(m.dir, p)); err != nil || len(got) == 0 {
			t.Fatalf("read %s: %q, %v", p, got, err)
		}
	}
	if st := m.store.Stats(); st.Hits != 2 || st.Misses != 1 {
		t.Errorf("files read ahead then opened: %d hits, %d misses; want 2, 1", st.Hits, st.Misses)
	}
	// A hit triggers nothing; f06… stay out.
	if st := m.store.Stats(); st.Entries != 4 {
		t.Errorf("hits read ahead: %d entries, want 4", st.Entries)
	}
}

// TestReadaheadFilesStopsWhenFull: readahead never fetches what the cache
// has no room for.
func TestReadaheadFilesStopsWhenFull(t *testing.T) { eachMode(t, testReadaheadFilesStopsWhenFull) }

func testReadaheadFilesStopsWhenFull(t *testing.T, mode string) {
	src := t.TempDir()
	for i := range 10 {
		mustWrite(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), make([]byte, 1000))
	}
	m := mountDir(t, mode, src, 2500, fusefs.Options{ReadaheadFiles: 8})
	before := fusefs.ReadCounters()
	if _, err := os.ReadFile(filepath.Join(m.dir, "f00")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for m.store.Stats().Entries < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("cache holds %d entries, want 2", m.store.Stats().Entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if st := m.store.Stats(); st.Entries != 2 || st.UsedBytes > 2500 {
		t.Errorf("cache of 2500 bytes: %d entries, %d bytes", st.Entries, st.UsedBytes)
	}
	if got := fusefs.ReadCounters().FilesReadAhead - before.FilesReadAhead; got != 1 {
		t.Errorf("FilesReadAhead grew by %d, want 1 (only one more file fits)", got)
	}
}

// slowBackend delays every read, so that fills stay in flight.
type slowBackend struct {
	backend.Backend
	delay time.Duration
}

func (b *slowBackend) ReadAt(ctx context.Context, p, v string, buf []byte, off int64) (int, error) {
	time.Sleep(b.delay)
	return b.Backend.ReadAt(ctx, p, v, buf, off)
}

// TestReadaheadFilesOverlap: two misses in one directory whose readahead
// windows overlap read each file ahead once, not twice.
func TestReadaheadFilesOverlap(t *testing.T) {
	testenv.RequireFUSE(t)
	src := t.TempDir()
	for i := range 10 {
		mustWrite(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("file %d", i)))
	}
	raw := openDir(t, src)
	mnt, store, _ := mountFS(t, fusefs.Options{Backend: &slowBackend{Backend: raw, delay: 300 * time.Millisecond}, ReadaheadFiles: 3}, 1<<20, raw)
	before := fusefs.ReadCounters()
	// f00 and f01 miss at once: windows f01-f03 and f02-f04.
	var wg sync.WaitGroup
	for _, name := range []string{"f00", "f01"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := os.ReadFile(filepath.Join(mnt, name)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for store.Stats().Entries < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("cache holds %d entries, want 5 (f00-f04)", store.Stats().Entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // nothing more may come
	if got := fusefs.ReadCounters().FilesReadAhead - before.FilesReadAhead; got > 4 {
		t.Errorf("FilesReadAhead grew by %d for 4 distinct files after f00 (f01 was also a reader's miss): a file was read ahead twice", got)
	}
	if n := store.Stats().Entries; n != 5 {
		t.Errorf("%d entries, want 5", n)
	}
}
