package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/testenv"
)

func key(path string) Key {
	return Key{Dataset: "s3://127.0.0.1:9000/bucket/ds", Path: path, Version: "v1"}
}

func TestOpenOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no dir", Options{Capacity: 1}, "cache: invalid options: Dir is required"},
		{"zero capacity", Options{Dir: dir}, "cache: invalid options: Capacity must be > 0, got 0"},
		{"negative capacity", Options{Dir: dir, Capacity: -5}, "cache: invalid options: Capacity must be > 0, got -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded, want %q", tt.want)
			}
			if err.Error() != tt.want || !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Open error %q, want %q wrapping ErrInvalidOptions", err, tt.want)
			}
		})
	}
	s := testStore(t, Options{Dir: filepath.Join(dir, "new", "cache"), Capacity: 1 << 20})
	if st := s.Stats(); st.Policy != PolicyNR || st.CapacityBytes != 1<<20 {
		t.Fatalf("defaults: %+v", st)
	}
	if fi, err := os.Stat(filepath.Join(dir, "new", "cache")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v %v, want mode 0700", fi.Mode(), err)
	}
}

func TestGetMissThenHit(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	var ld countingLoader
	k := key("a/b.jpg")
	if s.Contains(k) {
		t.Fatal("Contains before Get")
	}
	r := mustGet(t, s, k, 5000, ld.load(k))
	if r.Hit || r.File == nil {
		t.Fatalf("first Get: Hit=%v File=%v, want a miss admitted as a file", r.Hit, r.File)
	}
	checkBytes(t, k, readResult(t, r), 5000)
	r = mustGet(t, s, k, 5000, failLoader(t))
	if !r.Hit || r.File == nil {
		t.Fatalf("second Get: Hit=%v File=%v, want a hit", r.Hit, r.File)
	}
	checkBytes(t, k, readResult(t, r), 5000)
	if !s.Contains(k) || s.Contains(Key{Dataset: k.Dataset, Path: k.Path, Version: "v2"}) {
		t.Fatal("Contains: want the key held and another version not held")
	}
	// A new version is a miss, never the old bytes.
	k2 := Key{Dataset: k.Dataset, Path: k.Path, Version: "v2"}
	r = mustGet(t, s, k2, 5000, ld.load(k2))
	if r.Hit {
		t.Fatal("new version was a hit")
	}
	checkBytes(t, k2, readResult(t, r), 5000)
	// Zero-sized entries work too.
	k3 := key("empty")
	checkBytes(t, k3, readResult(t, mustGet(t, s, k3, 0, ld.load(k3))), 0)
	if r := mustGet(t, s, k3, 0, failLoader(t)); !r.Hit {
		t.Fatal("empty entry: want a hit")
	}

	want := Stats{Hits: 2, Misses: 3, HitBytes: 5000, MissBytes: 10000, Entries: 3, UsedBytes: 10000,
		CapacityBytes: 1 << 20, Admissions: 3, Policy: PolicyNR}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats:\n got %+v\nwant %+v", got, want)
	}
	if ld.calls.Load() != 3 {
		t.Fatalf("load called %d times, want 3", ld.calls.Load())
	}
}

func TestGetArguments(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	var ld countingLoader
	k := key("x")
	tests := []callCase{
		{"negative size", k, -1, ld.load(k), `cache: get s3://127.0.0.1:9000/bucket/ds:"x"@v1: negative size -1`},
		{"negative block", Key{Dataset: "d", Path: "p", Block: -2}, 1, ld.load(k), `cache: get d:"p"@#-2: negative block -2`},
		{"nil loader", k, 1, nil, `cache: get s3://127.0.0.1:9000/bucket/ds:"x"@v1: nil loader`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Get(context.Background(), tt.key, tt.size, tt.load)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Get error %v, want %q", err, tt.want)
			}
		})
	}
	if st := s.Stats(); st.Hits+st.Misses != 0 {
		t.Fatalf("rejected calls were counted: %+v", st)
	}
}

// TestKeyIDs: distinct keys get distinct ids, every id is a plain hex name
// inside the cache dir, whatever bytes the key holds.
func TestKeyIDs(t *testing.T) {
	keys := []Key{
		{Dataset: "a\x00b", Path: "c"},
		{Dataset: "a", Path: "b\x00c"},
		{Dataset: "a", Path: "b", Version: "c"},
		{Dataset: "a", Path: "b", Version: "c", Block: 1},
		{Dataset: "a", Path: "../../../../etc/passwd"},
		{Dataset: "/", Path: "/"},
		{Dataset: "", Path: strings.Repeat("x/", 5000)},
		{},
	}
	seen := map[string]Key{}
	for _, k := range keys {
		id := k.id()
		if !isID(id) {
			t.Errorf("%s: id %q is not 64 hex digits", k, id)
		}
		if prev, ok := seen[id]; ok {
			t.Errorf("%s and %s share id %s", k, prev, id)
		}
		seen[id] = k
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			s := testStore(t, Options{Dir: dir, Capacity: 1 << 20, sidecar: f.sidecar})
			var ld countingLoader
			for _, k := range keys {
				checkBytes(t, k, readResult(t, mustGet(t, s, k, 100, ld.load(k))), 100)
			}
			if files := listFiles(t, dir); len(files) != f.filesPerEntry*len(keys) {
				t.Fatalf("entries dir holds %d files, want %d: %v", len(files), f.filesPerEntry*len(keys), files)
			}
		})
	}
}

// TestNRFull: once full NR admits nothing and evicts nothing; a too-big
// entry is read through, and smaller later ones still fit.
func TestNRFull(t *testing.T) {
	s := testStore(t, Options{Capacity: 10_000})
	var ld countingLoader
	steps := []struct {
		path     string
		size     int64
		admitted bool
	}{
		{"a", 6000, true},
		{"big", 20_000, false}, // bigger than the cache
		{"b", 5000, false},     // does not fit in the 4000 left
		{"c", 4000, true},      // fits exactly
		{"d", 1, false},        // full
	}
	for _, st := range steps {
		k := key(st.path)
		r := mustGet(t, s, k, st.size, ld.load(k))
		if (r.File != nil) != st.admitted || r.Hit {
			t.Fatalf("%s: File=%v Data=%d bytes Hit=%v, want admitted=%v", st.path, r.File != nil, len(r.Data), r.Hit, st.admitted)
		}
		checkBytes(t, k, readResult(t, r), st.size)
	}
	for _, st := range steps {
		k := key(st.path)
		if r := mustGet(t, s, k, st.size, ld.load(k)); r.Hit != st.admitted {
			t.Fatalf("%s again: Hit=%v, want %v", st.path, r.Hit, st.admitted)
		} else {
			readResult(t, r)
		}
	}
	want := Stats{Hits: 2, Misses: 8, HitBytes: 10_000, MissBytes: 6000 + 20_000*2 + 5000*2 + 4000 + 2,
		Entries: 2, UsedBytes: 10_000, CapacityBytes: 10_000, Admissions: 2, Rejections: 6, Policy: PolicyNR}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats:\n got %+v\nwant %+v", got, want)
	}
}

// TestRecovery: a reopened store serves the same entries without loading,
// and removes the debris of interrupted writes.
func TestRecovery(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	var keys []Key
	for i := range 40 {
		k := key(fmt.Sprintf("f%02d", i))
		keys = append(keys, k)
		readResult(t, mustGet(t, s, k, int64(100+i*37), ld.load(k)))
	}
	before := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), keys[0], 100, ld.load(keys[0])); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}

	// Debris: a tmp file, data without a record, a record without data.
	shard := filepath.Join(dir, entriesName, "ab")
	orphanData := strings.Repeat("ab", 32)
	orphanSum := "ab" + strings.Repeat("cd", 31) + sumSuffix
	debris := []string{orphanData + ".123.tmp", orphanData, orphanSum}
	for _, name := range debris {
		if err := os.WriteFile(filepath.Join(shard, name), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := ReadInfo(dir); err != nil || info.TempFiles != 1 || info.Entries != before.Entries {
		t.Fatalf("ReadInfo before reopen: %+v, %v", info, err)
	}

	s = testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	after := s.Stats()
	if after.Entries != before.Entries || after.UsedBytes != before.UsedBytes {
		t.Fatalf("after reopen: %d entries %d bytes, want %d and %d", after.Entries, after.UsedBytes, before.Entries, before.UsedBytes)
	}
	for _, name := range debris {
		if _, err := os.Stat(filepath.Join(shard, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("debris %s not removed: %v", name, err)
		}
	}
	for i, k := range keys {
		if !s.Contains(k) {
			t.Fatalf("%s not held after reopen", k)
		}
		r := mustGet(t, s, k, int64(100+i*37), failLoader(t))
		if !r.Hit {
			t.Fatalf("%s: not a hit after reopen", k)
		}
		checkBytes(t, k, readResult(t, r), int64(100+i*37))
	}
	if st := s.Stats(); st.Hits != 40 || st.CorruptDropped != 0 {
		t.Fatalf("Stats after reopen: %+v", st)
	}
}

// TestCorruption: a damaged entry is never served; it is dropped and loaded
// again. Records live in the data file's xattr or, in the sidecar format
// (no xattrs, or written before records moved into the xattr), in a .sum
// file.
func TestCorruption(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dataPath string, sidecar bool)
	}{
		{"flipped byte", func(t *testing.T, p string, _ bool) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x01
			os.WriteFile(p, b, 0o600)
		}},
		{"truncated", func(t *testing.T, p string, _ bool) { os.Truncate(p, 10) }},
		{"truncated to zero", func(t *testing.T, p string, _ bool) { os.Truncate(p, 0) }},
		{"extended", func(t *testing.T, p string, _ bool) {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{0})
			f.Close()
		}},
		{"garbage record", func(t *testing.T, p string, sidecar bool) { setRecordFile(t, p, sidecar, []byte("hello")) }},
		{"empty record", func(t *testing.T, p string, sidecar bool) { setRecordFile(t, p, sidecar, nil) }},
		{"truncated record", func(t *testing.T, p string, sidecar bool) {
			rec := recordOf(t, p, sidecar)
			setRecordFile(t, p, sidecar, rec[:len(rec)-2]) // the size loses its last digit
		}},
		{"record without final newline", func(t *testing.T, p string, sidecar bool) {
			rec := recordOf(t, p, sidecar)
			setRecordFile(t, p, sidecar, rec[:len(rec)-1])
		}},
		{"record of another size", func(t *testing.T, p string, sidecar bool) {
			setRecordFile(t, p, sidecar, formatSum(xxh3Sum(content(key("victim"), 10)), 10))
		}},
		{"record of other bytes", func(t *testing.T, p string, sidecar bool) {
			setRecordFile(t, p, sidecar, formatSum(xxh3Sum(content(key("other"), 3000)), 3000))
		}},
		{"oversized record", func(t *testing.T, p string, sidecar bool) {
			setRecordFile(t, p, sidecar, append(recordOf(t, p, sidecar), bytes.Repeat([]byte(" "), maxRecord)...))
		}},
	}
	for _, f := range formats {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				dir := t.TempDir()
				var ld countingLoader
				victim, other, p := victimAndOther(t, dir, f.sidecar, &ld)
				tt.damage(t, p, f.sidecar)

				// Reopened by this build (which writes xattr records): old
				// sidecar entries are checked the same way.
				s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
				ld.calls.Store(0)
				r := mustGet(t, s, victim, 3000, ld.load(victim))
				if r.Hit || ld.calls.Load() != 1 {
					t.Fatalf("damaged entry: Hit=%v, load called %d times; want a miss that loads once", r.Hit, ld.calls.Load())
				}
				checkBytes(t, victim, readResult(t, r), 3000)
				if r := mustGet(t, s, victim, 3000, failLoader(t)); !r.Hit {
					t.Fatal("re-fetched entry: want a hit")
				} else {
					checkBytes(t, victim, readResult(t, r), 3000)
				}
				checkBytes(t, other, readResult(t, mustGet(t, s, other, 3000, failLoader(t))), 3000)
				if st := s.Stats(); st.CorruptDropped != 1 || st.Entries != 2 || st.UsedBytes != 6000 {
					t.Fatalf("Stats: %+v, want CorruptDropped 1, 2 entries, 6000 bytes", st)
				}
			})
		}
	}
}

// TestLostRecord: a data file whose record is gone (a crash lost the
// xattr, or the sidecar) is debris: removed at Open, never served.
func TestLostRecord(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			var ld countingLoader
			victim, _, p := victimAndOther(t, dir, f.sidecar, &ld)
			var err error
			if f.sidecar {
				err = os.Remove(p + sumSuffix)
			} else {
				err = unix.Removexattr(p, sumXattr)
			}
			if err != nil {
				t.Fatal(err)
			}
			if info, err := ReadInfo(dir); err != nil || info.Entries != 1 || info.UsedBytes != 3000 {
				t.Fatalf("ReadInfo: %+v, %v; want 1 entry of 3000 bytes", info, err)
			}

			s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
			if st := s.Stats(); st.Entries != 1 || st.UsedBytes != 3000 || s.Contains(victim) {
				t.Fatalf("after reopen: %+v, holds victim %v; want only the other entry", st, s.Contains(victim))
			}
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("data without a record not removed: %v", err)
			}
			ld.calls.Store(0)
			r := mustGet(t, s, victim, 3000, ld.load(victim))
			if r.Hit || ld.calls.Load() != 1 {
				t.Fatalf("Hit=%v, %d loads; want a miss that loads", r.Hit, ld.calls.Load())
			}
			checkBytes(t, victim, readResult(t, r), 3000)
		})
	}
}

// TestOldFormatRecovered: a cache written with .sum sidecars (the format
// before records moved into the xattr) is recovered and served by this
// build, which then writes new entries with xattr records next to them;
// a reopen serves both kinds.
func TestOldFormatRecovered(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20, sidecar: true})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	var old, fresh []Key
	for i := range 10 {
		k := key(fmt.Sprintf("old%d", i))
		old = append(old, k)
		readResult(t, mustGet(t, s, k, int64(1000+i), ld.load(k)))
	}
	s.Close()
	if files := listFiles(t, dir); len(files) != 20 {
		t.Fatalf("sidecar format: %d files, want 20", len(files))
	}
	for round := range 2 {
		s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
		for i, k := range old {
			r := mustGet(t, s, k, int64(1000+i), failLoader(t))
			if !r.Hit {
				t.Fatalf("round %d: old entry %s not a hit", round, k)
			}
			checkBytes(t, k, readResult(t, r), int64(1000+i))
		}
		if round == 0 {
			for i := range 10 {
				k := key(fmt.Sprintf("new%d", i))
				fresh = append(fresh, k)
				readResult(t, mustGet(t, s, k, int64(2000+i), ld.load(k)))
			}
		}
		for i, k := range fresh {
			r := mustGet(t, s, k, int64(2000+i), failLoader(t))
			if !r.Hit {
				t.Fatalf("round %d: new entry %s not a hit", round, k)
			}
			checkBytes(t, k, readResult(t, r), int64(2000+i))
		}
		if st := s.Stats(); st.Entries != 20 || st.CorruptDropped != 0 {
			t.Fatalf("round %d: %+v", round, st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if files := listFiles(t, dir); len(files) != 30 {
		t.Fatalf("%d files, want 30 (10 old entries with sidecars, 10 new ones without): %v", len(files), files)
	}
}

// TestStaleSidecar: an entry with an xattr record is checked against it,
// never against a .sum file next to it (debris of an older entry of the
// same id), which Open removes.
func TestStaleSidecar(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	k := key("f")
	readResult(t, mustGet(t, s, k, 3000, ld.load(k)))
	s.Close()
	p := filepath.Join(dir, entriesName, k.id()[:2], k.id())
	if err := os.WriteFile(p+sumSuffix, formatSum(xxh3Sum([]byte("stale")), 5), 0o600); err != nil {
		t.Fatal(err)
	}
	s = testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	if _, err := os.Stat(p + sumSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("redundant sidecar not removed at Open: %v", err)
	}
	r := mustGet(t, s, k, 3000, failLoader(t))
	if !r.Hit {
		t.Fatal("entry with a good xattr record: not a hit")
	}
	checkBytes(t, k, readResult(t, r), 3000)
}

// TestNoXattrFilesystem: on a filesystem without user xattrs (ramfs) the
// store falls back to .sum sidecars, and recovers them.
func TestNoXattrFilesystem(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ramfs", "-o", "mode=0700", "ramfs", dir).CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "ramfs", fmt.Sprintf("cannot mount a ramfs (a filesystem without user xattrs) here: %v: %s", err, bytes.TrimSpace(out)))
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	if err := unix.Setxattr(dir, "user.x", []byte("1"), 0); err == nil || !isNoXattr(err) {
		testenv.RequireOrSkip(t, "ramfs", fmt.Sprintf("this kernel's ramfs takes user xattrs (%v): no filesystem without them to test on", err))
	}
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	for i := range 5 {
		k := key(fmt.Sprint(i))
		r := mustGet(t, s, k, 4000, ld.load(k))
		if r.File == nil {
			t.Fatalf("%s not admitted", k)
		}
		checkBytes(t, k, readResult(t, r), 4000)
	}
	if st := s.Stats(); st.WriteErrors != 0 || st.Entries != 5 {
		t.Fatalf("Stats: %+v", st)
	}
	s.Close()
	if files := listFiles(t, dir); len(files) != 10 {
		t.Fatalf("%d files, want 5 entries with sidecars: %v", len(files), files)
	}
	s = testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	for i := range 5 {
		k := key(fmt.Sprint(i))
		r := mustGet(t, s, k, 4000, failLoader(t))
		if !r.Hit {
			t.Fatalf("%s: not a hit after reopen", k)
		}
		checkBytes(t, k, readResult(t, r), 4000)
	}
}

// TestCapacityChange: reopening with a smaller capacity keeps everything
// under NR, admitting nothing more.
func TestCapacityChange(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	for i := range 50 {
		k := key(fmt.Sprintf("f%02d", i))
		readResult(t, mustGet(t, s, k, 2000, ld.load(k)))
	}
	s.Close()

	s = testStore(t, Options{Dir: dir, Capacity: 30_000})
	st := s.Stats()
	info, err := ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Entries != st.Entries || info.UsedBytes != st.UsedBytes || info.CapacityBytes != 30_000 || info.Policy != PolicyNR {
		t.Fatalf("disk %+v disagrees with %+v", info, st)
	}
	if st.Entries != 50 || st.Evictions != 0 {
		t.Fatalf("NR after shrink: %+v, want all 50 entries kept", st)
	}
	k := key("new")
	if r := mustGet(t, s, k, 10, ld.load(k)); r.File != nil {
		t.Fatal("NR over capacity admitted a new entry")
	}
}

func TestReadInfo(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadInfo(dir); !errors.Is(err, ErrNotCacheDir) || err.Error() != fmt.Sprintf("cache: not an epochfs cache directory: %s has no epochfs-cache.json", dir) {
		t.Fatalf("ReadInfo of an empty dir: %v", err)
	}
	s := testStore(t, Options{Dir: dir, Capacity: 5 << 20})
	var ld countingLoader
	for i := range 10 {
		k := key(fmt.Sprint(i))
		readResult(t, mustGet(t, s, k, 1000, ld.load(k)))
	}
	got, err := ReadInfo(dir) // the store is open and holds the lock
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Dir: dir, Policy: PolicyNR, CapacityBytes: 5 << 20, UsedBytes: 10_000, Entries: 10, FormatVersion: 1}
	if got != want {
		t.Fatalf("ReadInfo:\n got %+v\nwant %+v", got, want)
	}
}

func TestLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	_, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	want := fmt.Sprintf("cache: cache directory is locked by another store: %s is held by pid %d", dir, os.Getpid())
	if !errors.Is(err, ErrLocked) || err.Error() != want {
		t.Fatalf("second Open: %v, want %q", err, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s2 := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	_ = s2
}

const lockChildEnv = "EPOCHFS_CACHE_LOCK_CHILD_DIR"

// TestLockChild is not a test: TestLockTwoProcesses runs it in a child
// process to Open the directory the parent holds.
func TestLockChild(t *testing.T) {
	dir := os.Getenv(lockChildEnv)
	if dir == "" {
		t.Skip("helper process for TestLockTwoProcesses")
	}
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		fmt.Printf("CHILD locked=%v err=%v\n", errors.Is(err, ErrLocked), err)
		return
	}
	s.Close()
	fmt.Println("CHILD opened")
}

func TestLockTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	child := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "CHILD ") {
				return line
			}
		}
		t.Fatalf("child printed no result:\n%s", out)
		return ""
	}
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("CHILD locked=true err=cache: cache directory is locked by another store: %s is held by pid %d", dir, os.Getpid())
	if got := child(); got != want {
		t.Fatalf("child while parent holds the dir:\n got %s\nwant %s", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := child(); got != "CHILD opened" {
		t.Fatalf("child after parent closed: %s", got)
	}
}

// TestCoalescing: concurrent Gets of one key share one load.
func TestCoalescing(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		admitted bool
	}{
		{"admitted", 1 << 20, true},
		{"read through", 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testStore(t, Options{Capacity: tt.capacity})
			k := key("hot")
			var calls atomic.Int64
			release := make(chan struct{})
			load := func(_ context.Context, p []byte) error {
				calls.Add(1)
				<-release
				fill(k, p)
				return nil
			}
			const n = 32
			var wg sync.WaitGroup
			results := make([]Result, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { results[i], errs[i] = s.Get(context.Background(), k, 10_000, load) })
			}
			// Let every goroutine join the flight before the load finishes.
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if runtime.NumGoroutine() > n && calls.Load() == 1 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
			close(release)
			wg.Wait()
			if calls.Load() != 1 {
				t.Fatalf("load called %d times, want 1", calls.Load())
			}
			files := map[*os.File]bool{}
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("Get %d: %v", i, errs[i])
				}
				if f := results[i].File; f != nil {
					if files[f] {
						t.Fatal("two callers got the same *os.File")
					}
					files[f] = true
				}
				if (results[i].File != nil) != tt.admitted {
					t.Fatalf("Get %d: File=%v, want admitted=%v", i, results[i].File, tt.admitted)
				}
				checkBytes(t, k, readResult(t, results[i]), 10_000)
			}
			if st := s.Stats(); st.Hits+st.Misses != n || st.LoadErrors != 0 {
				t.Fatalf("Stats: %+v", st)
			}
		})
	}
}

// TestLoadError: a failed load admits nothing and is returned wrapped.
func TestLoadError(t *testing.T) {
	boom := errors.New("backend: boom")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		load    Loader
		wantErr error
		want    string
	}{
		{"error", context.Background(), func(context.Context, []byte) error { return boom },
			boom, `cache: load s3://127.0.0.1:9000/bucket/ds:"f"@v1: backend: boom`},
		{"short read", context.Background(), func(_ context.Context, p []byte) error {
			fill(key("f"), p[:len(p)/2])
			return io.ErrUnexpectedEOF
		}, io.ErrUnexpectedEOF, `cache: load s3://127.0.0.1:9000/bucket/ds:"f"@v1: unexpected EOF`},
		{"canceled", canceled, func(ctx context.Context, p []byte) error { return ctx.Err() },
			context.Canceled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
			k := key("f")
			r, err := s.Get(tt.ctx, k, 4096, tt.load)
			if !errors.Is(err, tt.wantErr) || (tt.want != "" && err.Error() != tt.want) {
				t.Fatalf("Get error %v, want %q wrapping %v", err, tt.want, tt.wantErr)
			}
			if r.File != nil || r.Data != nil {
				t.Fatal("failed Get returned bytes")
			}
			if files := listFiles(t, dir); len(files) != 0 {
				t.Fatalf("files left behind: %v", files)
			}
			st := s.Stats()
			if st.Entries != 0 || st.UsedBytes != 0 || st.Admissions != 0 || st.Misses != 1 {
				t.Fatalf("Stats: %+v", st)
			}
			// The next Get loads again and admits.
			var ld countingLoader
			r = mustGet(t, s, k, 4096, ld.load(k))
			if r.File == nil {
				t.Fatal("Get after a failed load was not admitted")
			}
			checkBytes(t, k, readResult(t, r), 4096)
		})
	}
}

// TestWaiterOutlivesLeader: when the caller whose load is shared goes away,
// the callers coalesced with it try again and get their bytes, for Get as
// for GetNoAdmit.
func TestWaiterOutlivesLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		get  func(*Store, context.Context, Key, int64, Loader) (Result, error)
	}{
		{"Get", (*Store).Get},
		{"GetNoAdmit", (*Store).GetNoAdmit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testStore(t, Options{Capacity: 1 << 20})
			k := key("f")
			leaderCtx, cancelLeader := context.WithCancel(context.Background())
			started := make(chan struct{})
			leaderErr := make(chan error, 1)
			go func() {
				_, err := tc.get(s, leaderCtx, k, 100, func(ctx context.Context, p []byte) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				})
				leaderErr <- err
			}()
			<-started
			waiter := make(chan Result, 1)
			var ld countingLoader
			go func() {
				r, err := tc.get(s, context.Background(), k, 100, ld.load(k))
				if err != nil {
					t.Errorf("waiter: %v", err)
				}
				waiter <- r
			}()
			time.Sleep(50 * time.Millisecond) // let the waiter join the flight
			cancelLeader()
			if err := <-leaderErr; !errors.Is(err, context.Canceled) {
				t.Fatalf("leader: %v, want context.Canceled", err)
			}
			checkBytes(t, k, readResult(t, <-waiter), 100)
			if n := ld.calls.Load(); n != 1 {
				t.Errorf("the waiter loaded %d times, want 1 (its own retry)", n)
			}
		})
	}
}

// TestWriteFailure: when the cache disk fails the reader still gets its
// bytes, and no error.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	k := key("f")
	breakShard(t, dir, k)
	var ld countingLoader
	for i := range 2 {
		r := mustGet(t, s, k, 5000, ld.load(k))
		if r.File != nil || r.Hit {
			t.Fatalf("Get %d: File=%v Hit=%v, want read-through Data", i, r.File, r.Hit)
		}
		checkBytes(t, k, readResult(t, r), 5000)
	}
	want := Stats{Misses: 2, MissBytes: 10_000, CapacityBytes: 1 << 20, WriteErrors: 2, Policy: PolicyNR}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats:\n got %+v\nwant %+v", got, want)
	}
	// Other shards still work.
	k2 := key("g")
	for k2.id()[:2] == k.id()[:2] {
		k2.Path += "g"
	}
	if r := mustGet(t, s, k2, 10, ld.load(k2)); r.File == nil {
		t.Fatal("other shard: not admitted")
	} else {
		readResult(t, r)
	}
}

// TestDiskFull runs the store on a 1 MiB tmpfs, when this host lets us
// mount one: ENOSPC is served through, and admissions pause.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "tmpfs", fmt.Sprintf("cannot mount a 1 MiB tmpfs here: %v: %s", err, bytes.TrimSpace(out)))
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s, err := Open(Options{Dir: dir, Capacity: 100 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ld countingLoader
	big, small := key("big"), key("small")
	r := mustGet(t, s, big, 2<<20, ld.load(big))
	if r.File != nil {
		t.Fatal("2 MiB entry admitted on a 1 MiB disk")
	}
	checkBytes(t, big, readResult(t, r), 2<<20)
	if files := listFiles(t, dir); len(files) != 0 {
		t.Fatalf("files left behind: %v", files)
	}
	// Admissions pause after ENOSPC, even for entries that would fit.
	if r := mustGet(t, s, small, 10, ld.load(small)); r.File != nil {
		t.Fatal("admitted while paused after ENOSPC")
	} else {
		readResult(t, r)
	}
	if st := s.Stats(); st.WriteErrors != 1 || st.UsedBytes != 0 || st.Rejections != 1 {
		t.Fatalf("Stats: %+v", st)
	}
}

// TestCloseStopsEverything: no goroutine outlives Close. (The policies
// of benchmarks that run goroutines: bench/policies.)
func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := Open(Options{Dir: t.TempDir(), Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var ld countingLoader
	for i := range 20 {
		k := key(strconv.Itoa(i % 7))
		readResult(t, mustGet(t, s, k, 100_000, ld.load(k)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var after int
	for range 100 {
		if after = runtime.NumGoroutine(); after <= before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("%d goroutines before, %d after Close:\n%s", before, after, buf[:runtime.Stack(buf, true)])
}

// TestConcurrentGets hammers a small store with many keys from many
// goroutines: used bytes stay exact and every Get returns the right bytes.
func TestConcurrentGets(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 200_000})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var ld countingLoader
			for i := range 200 {
				k := key(strconv.Itoa((i*7 + g*13) % 60))
				size := int64(1000 + (i*7+g*13)%60*100)
				checkBytes(t, k, readResult(t, mustGet(t, s, k, size, ld.load(k))), size)
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	info, err := ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.UsedBytes > st.CapacityBytes || info.UsedBytes != st.UsedBytes || info.Entries != st.Entries || info.TempFiles != 0 {
		t.Fatalf("store %+v, disk %+v", st, info)
	}
	if st.Hits+st.Misses != 1600 {
		t.Fatalf("counted %d Gets, want 1600", st.Hits+st.Misses)
	}
}

func TestSizeMismatchReloads(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20})
	var ld countingLoader
	k := key("f")
	readResult(t, mustGet(t, s, k, 100, ld.load(k)))
	r := mustGet(t, s, k, 200, ld.load(k))
	if r.Hit || ld.calls.Load() != 2 {
		t.Fatalf("Get with another size: Hit=%v loads=%d, want a fresh load", r.Hit, ld.calls.Load())
	}
	checkBytes(t, k, readResult(t, r), 200)
	if st := s.Stats(); st.Entries != 1 || st.UsedBytes != 200 {
		t.Fatalf("Stats: %+v", st)
	}
}

func TestChecksumStreamingMatches(t *testing.T) {
	for _, n := range []int{0, 1, 16, 240, 1024, 100_000} {
		b := content(key("x"), int64(n))
		if xxh3Sum(b) != xxh3Stream(b) {
			t.Fatalf("%d bytes: one-shot and streaming xxh3-128 differ", n)
		}
	}
}

// TestCloseWaitsForGets: Close returns only after Gets in progress finish,
// and the lock is released only then.
func TestCloseWaitsForGets(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	k := key("slow")
	started, release := make(chan struct{}), make(chan struct{})
	got := make(chan Result, 1)
	go func() {
		r, err := s.Get(context.Background(), k, 100, func(_ context.Context, p []byte) error {
			close(started)
			<-release
			fill(k, p)
			return nil
		})
		if err != nil {
			t.Errorf("Get: %v", err)
		}
		got <- r
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Get was loading", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := s.Get(context.Background(), key("other"), 1, failLoader(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get while closing: %v, want ErrClosed", err)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	checkBytes(t, k, readResult(t, <-got), 100)
	s2 := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	if !s2.Contains(k) {
		t.Fatal("entry written during Close was lost")
	}
}

// TestKeySchemeChangeDropsEntries: entries recorded under another
// Options.KeyScheme (a build whose posix versions were mtime+size only
// recorded none) can never be asked for again; Open removes them, in both
// record layouts, and keeps the entries of an unchanged scheme, or when it
// is given none.
func TestKeySchemeChangeDropsEntries(t *testing.T) {
	for _, sidecar := range []bool{false, true} {
		t.Run(fmt.Sprintf("sidecar=%v", sidecar), func(t *testing.T) {
			dir := t.TempDir()
			fillN := func(scheme string, n int) {
				t.Helper()
				s, err := Open(Options{Dir: dir, Capacity: 1 << 20, KeyScheme: scheme, sidecar: sidecar})
				if err != nil {
					t.Fatal(err)
				}
				var ld countingLoader
				for i := range n {
					k := key(fmt.Sprintf("%s-f%02d", scheme, i))
					readResult(t, mustGet(t, s, k, 1000, ld.load(k)))
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			reopen := func(scheme string) Stats {
				t.Helper()
				s, err := Open(Options{Dir: dir, Capacity: 1 << 20, KeyScheme: scheme})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				return s.Stats()
			}
			fillN("", 5) // as a build without KeyScheme left it
			if st := reopen(""); st.Entries != 5 {
				t.Fatalf("same scheme: %d entries, want 5 kept", st.Entries)
			}
			if st := reopen("posix-v2"); st.Entries != 0 || st.UsedBytes != 0 {
				t.Fatalf("new scheme: %d entries, %d bytes; want the old ones dropped", st.Entries, st.UsedBytes)
			}
			if files := listFiles(t, filepath.Join(dir, entriesName)); len(files) != 0 {
				t.Errorf("files left behind: %v", files)
			}
			if m, err := readMeta(dir); err != nil || m.KeyScheme != "posix-v2" {
				t.Errorf("metadata %+v, %v; want the new scheme recorded", m, err)
			}
			fillN("posix-v2", 3)
			if st := reopen("posix-v2"); st.Entries != 3 {
				t.Fatalf("reopened with its own scheme: %d entries, want 3", st.Entries)
			}
			// A caller that names no scheme (a tool, a test) keeps both
			// the entries and the recorded scheme.
			if st := reopen(""); st.Entries != 3 {
				t.Fatalf("reopened without a scheme: %d entries, want 3 kept", st.Entries)
			}
			if st := reopen("posix-v2"); st.Entries != 3 {
				t.Fatalf("reopened with its scheme after one without: %d entries, want 3", st.Entries)
			}
			if st := reopen("other-v3"); st.Entries != 0 {
				t.Fatalf("another scheme: %d entries, want none", st.Entries)
			}
		})
	}
}
