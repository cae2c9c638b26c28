package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// content returns the deterministic bytes of key: size bytes from a
// splitmix64 stream seeded by the key.
func content(key Key, size int64) []byte {
	p := make([]byte, size)
	fill(key, p)
	return p
}

func fill(key Key, p []byte) {
	x := xxh3.HashString(key.Dataset+"\x00"+key.Path+"\x00"+key.Version) + uint64(key.Block)
	var w [8]byte
	for i := 0; i < len(p); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(w[:], z^(z>>31))
		copy(p[i:], w[:])
	}
}

// countingLoader loads content(key) and counts its calls.
type countingLoader struct {
	calls atomic.Int64
}

func (c *countingLoader) load(key Key) Loader {
	return func(_ context.Context, p []byte) error {
		c.calls.Add(1)
		fill(key, p)
		return nil
	}
}

// failLoader fails the test if called.
func failLoader(t testing.TB) Loader {
	return func(context.Context, []byte) error {
		t.Errorf("load called, want a hit")
		return io.EOF
	}
}

// testStore opens a store closed at cleanup.
func testStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// readResult returns the bytes of r and closes its file.
func readResult(t testing.TB, r Result) []byte {
	t.Helper()
	switch {
	case r.File != nil && r.Data != nil:
		t.Fatalf("Result has both File and Data")
	case r.File == nil && r.Data == nil:
		t.Fatalf("Result has neither File nor Data")
	case r.File == nil:
		return r.Data
	}
	defer r.File.Close()
	b, err := io.ReadAll(r.File)
	if err != nil {
		t.Fatalf("read entry: %v", err)
	}
	return b
}

// mustGet gets key and checks the bytes.
func mustGet(t testing.TB, s *Store, key Key, size int64, load Loader) Result {
	t.Helper()
	r, err := s.Get(context.Background(), key, size, load)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return r
}

func checkBytes(t testing.TB, key Key, got []byte, size int64) {
	t.Helper()
	if want := content(key, size); !bytes.Equal(got, want) {
		t.Fatalf("Get(%s): got %d bytes that differ from the %d loaded ones", key, len(got), len(want))
	}
}

// listFiles returns the names of every file under dir/entries.
func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	sc, err := scanEntries(filepath.Join(dir, entriesName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for id := range sc.data {
		out = append(out, id)
	}
	for id := range sc.sums {
		out = append(out, id+sumSuffix)
	}
	out = append(out, sc.tmps...)
	out = append(out, sc.other...)
	return out
}

func xxh3Sum(b []byte) xxh3.Uint128 { return xxh3.Hash128(b) }

func xxh3Stream(b []byte) xxh3.Uint128 {
	h := xxh3.New()
	h.Write(b)
	return h.Sum128()
}

// formats are the two ways an entry's checksum record is stored.
var formats = []struct {
	name          string
	sidecar       bool
	filesPerEntry int
}{
	{"xattr", false, 1},
	{"sidecar", true, 2},
}

// recordOf returns the checksum record of the entry at dataPath.
func recordOf(t testing.TB, dataPath string, sidecar bool) []byte {
	t.Helper()
	if sidecar {
		b, err := os.ReadFile(dataPath + sumSuffix)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	buf := make([]byte, maxRecord)
	n, err := unix.Getxattr(dataPath, sumXattr, buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// setRecordFile replaces the checksum record of the entry at dataPath.
func setRecordFile(t testing.TB, dataPath string, sidecar bool, rec []byte) {
	t.Helper()
	var err error
	if sidecar {
		err = os.WriteFile(dataPath+sumSuffix, rec, 0o600)
	} else {
		err = unix.Setxattr(dataPath, sumXattr, rec, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// victimAndOther caches two 3000-byte entries, "victim" and "other", in a
// new store on dir in the given record format, closes it, and returns the
// keys and the victim's data file, for tests that damage it.
func victimAndOther(t *testing.T, dir string, sidecar bool, ld *countingLoader) (victim, other Key, path string) {
	t.Helper()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20, sidecar: sidecar})
	if err != nil {
		t.Fatal(err)
	}
	victim, other = key("victim"), key("other")
	readResult(t, mustGet(t, s, victim, 3000, ld.load(victim)))
	readResult(t, mustGet(t, s, other, 3000, ld.load(other)))
	s.Close()
	return victim, other, filepath.Join(dir, entriesName, victim.id()[:2], victim.id())
}

// breakShard replaces k's shard directory with a file, so that writing k's
// entry fails (even as root).
func breakShard(t *testing.T, dir string, k Key) {
	t.Helper()
	shard := filepath.Join(dir, entriesName, k.id()[:2])
	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// callCase is a Get or Fill call that must fail with the error text want.
type callCase struct {
	name string
	key  Key
	size int64
	load Loader
	want string
}
