package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestHandoverBetweenProcesses hands a live mount over between `cachefs`
// processes of two versions (the same sources linked with two version
// strings), v1 → v2 → v1, while readers verify every byte of the dataset
// in a loop: no reader error, no wrong byte, and files opened before the
// handovers (a passthrough-backed small file, a large one read in blocks,
// a directory) are read, listed and closed after them, served by a process
// that never issued their node ids and file handles. The stalls readers saw
// are logged, not asserted (RELIABILITY.md records them).
func TestHandoverBetweenProcesses(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	v1, v2 := buildVersion(t, dir, "handover-v1"), buildVersion(t, dir, "handover-v2")
	for _, tc := range []struct {
		name     string
		manifest bool
	}{{"listing", false}, {"manifest", true}} {
		t.Run(tc.name, func(t *testing.T) { testHandover(t, v1, v2, tc.manifest) })
	}
}

// TestHandoverRefused: a new process that would serve another dataset
// version is refused, and the running mount serves on.
func TestHandoverRefused(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "handover-v1")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 10, Classes: 2, Seed: 27})
	opts := mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: filepath.Join(t.TempDir(), "manifest"), LogLevel: "info"}
	if out, err := exec.Command(bin, "index", src, "--out", opts.Manifest).CombinedOutput(); err != nil {
		t.Fatalf("cachefs index: %v\n%s", err, out)
	}
	running := testenv.StartCachefs(t, bin, opts)
	waitLog(t, running.Proc, "msg=mounted") // logged once the handover socket listens (the kernel mount is earlier)
	other := opts
	other.Manifest = mountapi.ManifestNone // names from listings: other node ids
	other.Takeover = mountapi.HandoverSocket(opts.CacheDir)
	out, err := exec.Command(bin, other.Args()...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "this one would serve") {
		t.Fatalf("a takeover by a mount of another dataset version: %v, want a refusal:\n%s", err, out)
	}
	waitLog(t, running.Proc, "handover refused; serving on")
	for _, f := range files {
		if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
			t.Fatalf("the running mount after refusing: %v", err)
		}
	}
}

// buildVersion links cmd/cachefs with main.version set to version.
func buildVersion(t *testing.T, dir, version string) string {
	t.Helper()
	bin := filepath.Join(dir, "cachefs-"+version)
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version="+version, "./cmd/cachefs")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func testHandover(t *testing.T, v1, v2 string, withManifest bool) {
	// Files up to 1 MiB are read whole (passthrough once cached), larger
	// ones in 256 KiB blocks through the process.
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 60, Classes: 3, MedianSize: 400 << 10, MaxSize: 3 << 20, Seed: 26})
	// A file nobody opens before the last handover: its LOOKUP, in a
	// directory whose node id v1 issued, reaches the last process.
	late := datagen.File{Path: filepath.Join(filepath.Dir(files[0].Path), "late.bin"), Size: 70 << 10, Seed: 99}
	if err := os.WriteFile(filepath.Join(src, late.Path), datagen.Content(late), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := mountapi.CommandOptions{
		Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: mountapi.ManifestNone, WholeFileMax: 1 << 20, BlockSize: 256 << 10, LogLevel: "info",
	}
	if withManifest {
		opts.Manifest = filepath.Join(t.TempDir(), "manifest")
		if out, err := exec.Command(v1, "index", src, "--out", opts.Manifest).CombinedOutput(); err != nil {
			t.Fatalf("cachefs index: %v\n%s", err, out)
		}
	}
	small, large := pick(t, files, 1<<20)
	first := testenv.StartCachefs(t, v1, opts)
	mnt := opts.Mountpoint

	// Opened before the handovers; read and closed after them.
	smallF := openRead(t, filepath.Join(mnt, small.Path), small.Size/2)
	largeF := openRead(t, filepath.Join(mnt, large.Path), 300<<10)
	dirF, err := os.Open(filepath.Join(mnt, filepath.Dir(small.Path)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dirF.Readdirnames(2); err != nil {
		t.Fatal(err)
	}

	rd := startReaders(t, mnt, files, 2, small)
	rd.waitRounds(2) // the second round reads from the cache
	base := time.Duration(rd.probeMax.Swap(0))
	second := takeOver(t, v2, opts, first.Proc)
	rd.waitRounds(1)
	stall1 := time.Duration(rd.probeMax.Swap(0))
	third := takeOver(t, v1, opts, second)
	rd.waitRounds(1)
	stall2 := time.Duration(rd.probeMax.Swap(0))
	rd.stop()
	t.Logf("%d files verified by 2 readers over %d rounds; longest open+read+close of a cached file: %v without a handover, %v across v1→v2, %v across v2→v1",
		rd.files.Load(), rd.rounds.Load(), base, stall1, stall2)
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors, first: %v", n, rd.firstErr)
	}

	checkPredecessorIDs(t, mnt, small, late)
	checkRest(t, smallF, small, small.Size/2)
	checkRest(t, largeF, large, 300<<10)
	rest, err := dirF.Readdirnames(-1)
	if err != nil || len(rest) == 0 {
		t.Fatalf("READDIR of a directory opened before the handovers: %v, %d more names", err, len(rest))
	}
	for _, f := range []*os.File{smallF, largeF, dirF} {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		// The small file's passthrough backing id was registered by v1;
		// the last process unregisters it at the RELEASE, on the same
		// connection.
		waitLog(t, third, "unregistered a predecessor's passthrough backing")
		if !strings.Contains(third.Tail(1<<20), `unregistered a predecessor's passthrough backing" id=`) ||
			regexp.MustCompile(`predecessor's passthrough backing" id=\d+ errno=[1-9]`).MatchString(third.Tail(1<<20)) {
			t.Fatalf("the inherited backing id was not unregistered cleanly:\n%s", third.Tail(4000))
		}
	}
	if !withManifest {
		// FORGET of node ids v1 issued: drop the kernel's dentries and
		// inodes, then hand over once more and count the nodes handed.
		before := handedNodes(t, second)
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			t.Logf("no FORGET check: %v", err)
		} else {
			fourth := takeOver(t, v2, opts, third)
			if after := handedNodes(t, third); after >= before {
				t.Fatalf("nodes handed over after the kernel forgot its inodes: %d, before: %d", after, before)
			}
			third = fourth
		}
	}
	if err := exec.Command("umount", mnt).Run(); err != nil {
		t.Fatalf("umount: %v", err)
	}
	<-third.Done
}

// checkPredecessorIDs sends requests on node ids an earlier process
// issued: GETATTR (statx forcing a round trip) of a file and of its
// directory, and LOOKUPs in that directory of a missing name and of a file
// not looked up before, then its OPEN, READ and RELEASE.
func checkPredecessorIDs(t *testing.T, mnt string, f, late datagen.File) {
	t.Helper()
	for _, c := range []struct {
		path string
		size int64
	}{{filepath.Join(mnt, f.Path), f.Size}, {filepath.Join(mnt, filepath.Dir(f.Path)), -1}} {
		var stx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, c.path, unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &stx); err != nil {
			t.Fatalf("GETATTR of %s after the handovers: %v", c.path, err)
		}
		if c.size >= 0 && int64(stx.Size) != c.size {
			t.Fatalf("GETATTR of %s after the handovers: size %d, want %d", c.path, stx.Size, c.size)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, filepath.Dir(f.Path), "no-such-file")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LOOKUP of a missing name after the handovers: %v, want ENOENT", err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, late.Path))
	if err != nil || !bytes.Equal(got, datagen.Content(late)) {
		t.Fatalf("%s, first looked up after the handovers: %v, right bytes %v", late.Path, err, bytes.Equal(got, datagen.Content(late)))
	}
}

// pick returns a file of at most whole bytes and one larger.
func pick(t *testing.T, files []datagen.File, whole int64) (small, large datagen.File) {
	t.Helper()
	for _, f := range files {
		switch {
		case f.Size <= whole && small.Path == "":
			small = f
		case f.Size > whole+(512<<10) && large.Path == "":
			large = f
		}
	}
	if small.Path == "" || large.Path == "" {
		t.Fatal("the dataset lacks a small or a large file")
	}
	return small, large
}

func openRead(t *testing.T, p string, n int64) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(f, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkRest reads f from off to its end after the handovers.
func checkRest(t *testing.T, f *os.File, want datagen.File, off int64) {
	t.Helper()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("%s, opened before the handovers: %v", want.Path, err)
	}
	if !bytes.Equal(got, datagen.Content(want)[off:]) {
		t.Fatalf("%s, opened before the handovers: wrong bytes after them", want.Path)
	}
}

// takeOver starts bin taking over from the running process prev and waits
// until prev has exited and the new process serves.
func takeOver(t *testing.T, bin string, opts mountapi.CommandOptions, prev *testenv.Proc) *testenv.Proc {
	t.Helper()
	opts.Takeover = mountapi.HandoverSocket(opts.CacheDir)
	p, err := testenv.StartProc("cachefs mount --takeover", exec.Command(bin, opts.Args()...), &testenv.SyncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(20 * time.Second) })
	waitLog(t, p, "serving the taken-over connection")
	if err := prev.Err(); err != nil {
		t.Fatalf("the running mount exited with %v after handing over:\n%s", err, prev.Tail(4000))
	}
	line := regexp.MustCompile(`msg="serving the taken-over connection" stall=\S+`).FindString(p.Tail(1 << 20))
	t.Logf("%s: %s", filepath.Base(bin), line)
	return p
}

// waitLog waits for a line of p's log (bounded, so that a hang fails).
func waitLog(t *testing.T, p *testenv.Proc, msg string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.Tail(1<<20), msg) {
		select {
		case <-p.Done:
			t.Fatalf("%s exited (%v) before logging %q:\n%s", p.Name, p.Err(), msg, p.Tail(8000))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q:\n%s", p.Name, msg, p.Tail(8000))
		}
	}
}

// handedNodes is the node count in the "handing over" line of p's log.
func handedNodes(t *testing.T, p *testenv.Proc) int {
	t.Helper()
	m := regexp.MustCompile(`msg="handing over: requests held back" .* nodes=(\d+)`).FindStringSubmatch(p.Tail(1 << 20))
	if m == nil {
		t.Fatalf("no handover line:\n%s", p.Tail(4000))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// readers verify every file of a dataset in a loop, each file opened,
// read whole and compared, each directory listed.
type readers struct {
	done     chan struct{}
	wg       sync.WaitGroup
	rounds   atomic.Int64
	files    atomic.Int64
	errs     atomic.Int64
	probeMax atomic.Int64 // the probe's longest round trip in the current window, ns
	mu       sync.Mutex
	firstErr error
}

func startReaders(t *testing.T, mnt string, files []datagen.File, n int, probe datagen.File) *readers {
	r := &readers{done: make(chan struct{})}
	want := make([][]byte, len(files))
	for i, f := range files {
		want[i] = datagen.Content(f)
	}
	// The probe opens, reads and closes one small file in a loop (OPEN
	// and RELEASE reach the mount every time): its longest round trip in a
	// window is the stall a reader saw there.
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		content := datagen.Content(probe)
		for {
			start := time.Now()
			err := verify(mnt, probe, content)
			if d := int64(time.Since(start)); d > r.probeMax.Load() {
				r.probeMax.Store(d)
			}
			if err != nil {
				r.fail(err)
			}
			select {
			case <-r.done:
				return
			default:
			}
		}
	}()
	for k := range n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				for j := range files {
					i := (j + k*len(files)/n) % len(files)
					err := verify(mnt, files[i], want[i])
					r.files.Add(1)
					if err != nil {
						r.fail(err)
					}
					select {
					case <-r.done:
						return
					default:
					}
				}
				r.rounds.Add(1)
			}
		}()
	}
	t.Cleanup(r.stop)
	return r
}

func verify(mnt string, f datagen.File, want []byte) error {
	if _, err := os.ReadDir(filepath.Join(mnt, filepath.Dir(f.Path))); err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(mnt, f.Path))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: wrong bytes", f.Path)
	}
	return nil
}

func (r *readers) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs.Add(1) == 1 {
		r.firstErr = err
	}
}

// waitRounds waits until the readers have completed k more rounds between
// them (or have stopped).
func (r *readers) waitRounds(k int64) {
	target := r.rounds.Load() + k
	for r.rounds.Load() < target {
		select {
		case <-r.done:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (r *readers) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.wg.Wait()
}
