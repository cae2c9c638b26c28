package fusefs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
)

// The two ways a tree is served: from backend listings (the go-fuse node
// tree) and from a manifest (the raw protocol API). Tests of what both must
// do run in both.
const (
	modeListing  = "listing"
	modeManifest = "manifest"
)

func eachMode(t *testing.T, test func(t *testing.T, mode string)) {
	for _, mode := range []string{modeListing, modeManifest} {
		t.Run(mode, func(t *testing.T) { test(t, mode) })
	}
}

// testMount mounts src (a posix directory) through a fresh cache of the
// given capacity and unmounts in t.Cleanup. In modeManifest, src is indexed
// first and mounted from the manifest.
type testMount struct {
	dir   string
	store *cache.Store
}

func mountDir(t *testing.T, mode, src string, capacity int64, opts fusefs.Options) *testMount {
	t.Helper()
	testenv.RequireFUSE(t)
	b := openDir(t, src)
	opts.Backend = b
	if mode == modeManifest {
		man, _, err := manifest.Index(context.Background(), b, manifest.IndexOptions{Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		opts.Manifest = man
	}
	mnt, store, _ := mountFS(t, opts, capacity, b)
	return &testMount{dir: mnt, store: store}
}

// mountFS mounts opts.Backend through a fresh cache of the given capacity
// (opts.Store is set here) and, in t.Cleanup, unmounts and closes the store
// and closer (the backend opts.Backend wraps, or opts.Backend itself).
func mountFS(t *testing.T, opts fusefs.Options, capacity int64, closer backend.Backend) (string, *cache.Store, *fusefs.FS) {
	t.Helper()
	return mountFSWith(t, opts, capacity, closer, fusefs.MountOptions{FsName: "test"})
}

// mountFSWith is mountFS with these mount options.
func mountFSWith(t *testing.T, opts fusefs.Options, capacity int64, closer backend.Backend, mo fusefs.MountOptions) (string, *cache.Store, *fusefs.FS) {
	t.Helper()
	store, err := cache.Open(cache.Options{Dir: t.TempDir(), Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = store
	fsys, err := fusefs.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	server, err := fsys.Mount(mnt, mo)
	if err != nil {
		t.Fatal(err)
	}
	if err := server.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		server.Wait()
		fsys.Close()
		store.Close()
		closer.Close()
	})
	return mnt, store, fsys
}

func genDataset(t *testing.T, n int) (string, []datagen.File, map[string][sha256.Size]byte) {
	t.Helper()
	dir := t.TempDir()
	files, err := datagen.Write(dir, datagen.Spec{Files: n, Classes: 5, MedianSize: 20_000, MinSize: 1, MaxSize: 300_000, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return dir, files, datagen.Sums(files)
}

// TestEpochsMatchSourceAndHitCD reads shuffled epochs through a half-size NR
// cache: every byte matches, epoch 1 hits nothing, later epochs hit what the
// cache holds (≈ C/D).
func TestEpochsMatchSourceAndHitCD(t *testing.T) { eachMode(t, testEpochsMatchSourceAndHitCD) }

func testEpochsMatchSourceAndHitCD(t *testing.T, mode string) {
	src, files, want := genDataset(t, 300)
	total := datagen.TotalSize(files)
	m := mountDir(t, mode, src, total/2, fusefs.Options{})
	for e := 1; e <= 3; e++ {
		before := m.store.Stats()
		res, err := epoch.Run(context.Background(), epoch.Options{Root: m.dir, Paths: datagen.Paths(files), Workers: 8, Seed: uint64(e), Want: want})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) > 0 || res.Files != len(files) || res.Bytes != total {
			t.Fatalf("epoch %d: files %d/%d bytes %d/%d mismatches %v", e, res.Files, len(files), res.Bytes, total, res.Mismatches)
		}
		after := m.store.Stats()
		hit, miss := after.HitBytes-before.HitBytes, after.MissBytes-before.MissBytes
		if hit+miss != total {
			t.Errorf("epoch %d: counted %d bytes, want %d (one lookup per open)", e, hit+miss, total)
		}
		ratio := float64(hit) / float64(total)
		wantRatio := float64(after.UsedBytes) / float64(total)
		if e == 1 {
			wantRatio = 0
		}
		if diff := ratio - wantRatio; diff > 0.01 || diff < -0.01 {
			t.Errorf("epoch %d: byte hit ratio %.3f, want %.3f", e, ratio, wantRatio)
		}
		t.Logf("epoch %d: hit ratio %.3f, %.0f files/s", e, ratio, res.FilesPerSec())
	}
	if used := m.store.Stats().UsedBytes; used > total/2 || used < total/2-300_000 {
		t.Errorf("NR filled %d bytes of %d capacity", used, total/2)
	}
}

func TestReaddirAndStat(t *testing.T) { eachMode(t, testReaddirAndStat) }

func testReaddirAndStat(t *testing.T, mode string) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "a", "x.bin"), []byte("hello"))
	mustWrite(t, filepath.Join(src, "a", "y y ü.bin"), []byte("unicode"))
	mustWrite(t, filepath.Join(src, "b.bin"), make([]byte, 12345))
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Big enough that a listing takes many READDIR requests, each resuming
	// at the previous one's offset.
	var many []string
	for i := range 3000 {
		name := fmt.Sprintf("f%05d-%s", i, strings.Repeat("n", i%40))
		many = append(many, name)
		mustWrite(t, filepath.Join(src, "many", name), []byte{byte(i)})
	}
	m := mountDir(t, mode, src, 1<<20, fusefs.Options{})

	list, err := os.ReadDir(filepath.Join(m.dir, "many"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, e := range list {
		listed = append(listed, e.Name())
		if !e.Type().IsRegular() {
			t.Errorf("many/%s: type %v, want a regular file", e.Name(), e.Type())
		}
	}
	if !equal(listed, many) {
		t.Errorf("many/ lists %d names, want %d in order", len(listed), len(many))
	}

	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got, want := names, []string{"a", "b.bin", "empty", "many"}; !equal(got, want) {
		t.Fatalf("root lists %q, want %q", got, want)
	}
	st, err := os.Stat(filepath.Join(m.dir, "b.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 12345 || st.Mode().Perm() != 0o444 || !st.Mode().IsRegular() {
		t.Errorf("b.bin: size %d mode %v", st.Size(), st.Mode())
	}
	got, err := os.ReadFile(filepath.Join(m.dir, "a", "y y ü.bin"))
	if err != nil || string(got) != "unicode" {
		t.Errorf("read unicode name: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(m.dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat missing: %v, want ENOENT", err)
	}
	// readdir's d_ino is stat's st_ino, and no two entries share one.
	dino := direntInos(t, filepath.Join(m.dir, "many"))
	seen := map[uint64]string{}
	for _, name := range many {
		d, ok := dino[name]
		if st := ino(t, filepath.Join(m.dir, "many", name)); !ok || d != st {
			t.Errorf("many/%s: d_ino %d (listed %v), st_ino %d", name, d, ok, st)
		}
		if other, dup := seen[d]; dup {
			t.Errorf("many/%s and many/%s share inode %d", name, other, d)
		}
		seen[d] = name
	}
	// Stable inode numbers: the same path has the same inode in a second mount.
	m2 := mountDir(t, mode, src, 1<<20, fusefs.Options{})
	for _, p := range []string{"a", "a/x.bin", "b.bin"} {
		if a, b := ino(t, filepath.Join(m.dir, p)), ino(t, filepath.Join(m2.dir, p)); a != b {
			t.Errorf("%s: inode %d in one mount, %d in another", p, a, b)
		}
	}
}

// TestWriteCallsFailEROFS tries every write-type call on the mount.
func TestWriteCallsFailEROFS(t *testing.T) { eachMode(t, testWriteCallsFailEROFS) }

func testWriteCallsFailEROFS(t *testing.T, mode string) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "f"), []byte("data"))
	if err := os.Mkdir(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountDir(t, mode, src, 1<<20, fusefs.Options{})
	f := filepath.Join(m.dir, "f")
	d := filepath.Join(m.dir, "d")
	cases := []struct {
		name string
		call func() error
	}{
		{"open O_WRONLY", func() error { return openClose(f, os.O_WRONLY) }},
		{"open O_RDWR", func() error { return openClose(f, os.O_RDWR) }},
		{"open O_TRUNC", func() error { return openClose(f, os.O_RDONLY|os.O_TRUNC) }},
		{"open O_APPEND", func() error { return openClose(f, os.O_WRONLY|os.O_APPEND) }},
		{"create", func() error { return openClose(filepath.Join(m.dir, "new"), os.O_CREATE|os.O_WRONLY) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(m.dir, "nd"), 0o755) }},
		{"mknod", func() error { return syscall.Mknod(filepath.Join(m.dir, "fifo"), syscall.S_IFIFO|0o644, 0) }},
		{"unlink", func() error { return syscall.Unlink(f) }},
		{"rmdir", func() error { return syscall.Rmdir(d) }},
		{"rename", func() error { return os.Rename(f, filepath.Join(m.dir, "g")) }},
		{"symlink", func() error { return os.Symlink("f", filepath.Join(m.dir, "s")) }},
		{"link", func() error { return os.Link(f, filepath.Join(m.dir, "h")) }},
		{"truncate", func() error { return os.Truncate(f, 0) }},
		{"chmod", func() error { return os.Chmod(f, 0o777) }},
		{"chown", func() error { return os.Chown(f, 1, 1) }},
		{"utimes", func() error { return os.Chtimes(f, time.Now(), time.Now()) }},
		{"setxattr", func() error { return syscall.Setxattr(f, "user.x", []byte("1"), 0) }},
		{"removexattr", func() error { return syscall.Removexattr(f, "user.x") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, syscall.EROFS) {
				t.Errorf("%s: got %v, want EROFS", tc.name, err)
			}
		})
	}
	if got, err := os.ReadFile(f); err != nil || string(got) != "data" {
		t.Errorf("after write attempts: %q, %v", got, err)
	}
}

// TestLargeFileBlocks reads a file larger than WholeFileMax at random offsets
// and sequentially, through small blocks with readahead.
func TestLargeFileBlocks(t *testing.T) { eachMode(t, testLargeFileBlocks) }

func testLargeFileBlocks(t *testing.T, mode string) {
	src := t.TempDir()
	data := make([]byte, 5<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	mustWrite(t, filepath.Join(src, "big.bin"), data)
	const bs = 256 << 10
	m := mountDir(t, mode, src, 2<<20, fusefs.Options{WholeFileMax: 1 << 20, BlockSize: bs, Readahead: 3})
	p := filepath.Join(m.dir, "big.bin")

	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("sequential read of a large file differs from the source")
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 300_000)
	for range 200 {
		off := rng.Int64N(int64(len(data)))
		n, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatalf("ReadAt %d: %v", off, err)
		}
		if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("ReadAt %d: wrong bytes", off)
		}
		if want := min(len(buf), len(data)-int(off)); n != want {
			t.Fatalf("ReadAt %d: %d bytes, want %d", off, n, want)
		}
	}
	st := m.store.Stats()
	if st.UsedBytes > 2<<20 || st.Entries == 0 {
		t.Errorf("cache used %d bytes in %d entries, want some entries within 2 MiB", st.UsedBytes, st.Entries)
	}
}

// TestParallelReadersOneFile opens the same uncached files from many readers
// at once: all see the right bytes and each file is fetched once.
func TestParallelReadersOneFile(t *testing.T) { eachMode(t, testParallelReadersOneFile) }

func testParallelReadersOneFile(t *testing.T, mode string) {
	src, files, want := genDataset(t, 20)
	m := mountDir(t, mode, src, 1<<30, fusefs.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 64*len(files))
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(m.dir, f.Path))
				if err != nil {
					errs <- err
					return
				}
				if sha256.Sum256(b) != want[f.Path] {
					errs <- errors.New(f.Path + ": wrong bytes")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := m.store.Stats(); st.Admissions != int64(len(files)) {
		t.Errorf("%d admissions for %d files (concurrent misses must coalesce)", st.Admissions, len(files))
	}
}

// TestChangedSourceIsEIO: a file that changes under the mount after it was
// listed fails with EIO instead of serving bytes of another version.
func TestChangedSourceIsEIO(t *testing.T) { eachMode(t, testChangedSourceIsEIO) }

func testChangedSourceIsEIO(t *testing.T, mode string) {
	src := t.TempDir()
	p := filepath.Join(src, "f")
	mustWrite(t, p, []byte("version one"))
	m := mountDir(t, mode, src, 1<<20, fusefs.Options{})
	if _, err := os.Stat(filepath.Join(m.dir, "f")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, []byte("version two, longer"))
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, future, future); err != nil {
		t.Fatal(err)
	}
	_, err := os.ReadFile(filepath.Join(m.dir, "f"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a changed file: %v, want EIO", err)
	}
}

func mustWrite(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func openClose(p string, flag int) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// direntInos reads a directory with getdents64 and returns each name's
// d_ino.
func direntInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			out[string(name)] = binary.NativeEndian.Uint64(b[0:8])
			b = b[reclen:]
		}
	}
	return out
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
