package mount_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/handover/fuseconn"
	"github.com/epochfs/epochfs/pkg/mount/fusectl"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestRecoverAfterKill: `cachefs mount --supervise` while readers verify
// every byte of a manifest dataset in a loop; the serving process is
// killed with SIGKILL 10 times at random points (mid-READ of a large file
// read through the process in blocks, mid-READDIR, mid-OPEN or RELEASE;
// cached small files are read with passthrough, past the process), and
// each time the supervisor starts a new one on the same connection: no
// reader error, no wrong byte, and files opened before the kills (a
// passthrough-backed one, a large one, a directory) read on after them.
// The probe opens the passthrough-backed file held open across the kills
// again and again: each recovered process must open it with the id a dead
// one registered (the backing table), or the kernel fails the open (EIO).
// The stalls are logged (RELIABILITY.md records them), not asserted.
func TestRecoverAfterKill(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 60, Classes: 3, MedianSize: 400 << 10, MaxSize: 3 << 20, Seed: 28})
	opts := supervisedOpts(t, bin, src, 1<<30)
	opts.MaxRestarts = 20
	sup := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup.Proc)
	mnt := opts.Mountpoint
	small, large := pick(t, files, 1<<20)
	smallF := openRead(t, filepath.Join(mnt, small.Path), small.Size/2)
	largeF := openRead(t, filepath.Join(mnt, large.Path), 300<<10)

	rd := startReaders(t, mnt, files, 2, small)
	rd.waitRounds(2)
	base := time.Duration(rd.probeMax.Swap(0))
	var stalls, recovered []string
	for i := range 10 {
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // a random point of the readers' loop
		pid := childPid(t, sup.Proc)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup.Proc, `msg="supervise: recovered"`, i+1)
		rd.waitRounds(1)
		stalls = append(stalls, time.Duration(rd.probeMax.Swap(0)).Round(time.Millisecond).String())
	}
	for _, m := range regexp.MustCompile(`msg="supervise: recovered" pid=\d+ stall=(\S+)`).FindAllStringSubmatch(sup.Proc.Tail(1<<22), -1) {
		recovered = append(recovered, m[1])
	}
	rd.stop()
	checkRest(t, smallF, small, small.Size/2)
	checkRest(t, largeF, large, 300<<10)
	smallF.Close()
	largeF.Close()
	t.Logf("%d files verified by 2 readers over %d rounds across 10 kill -9; longest open+read+close of a cached file: %v without a kill; per kill: %s; death to serving (supervisor): %s",
		rd.files.Load(), rd.rounds.Load(), base, strings.Join(stalls, " "), strings.Join(recovered, " "))
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors across the kills; first: %v\n%s", n, rd.firstErr, sup.Proc.Tail(8000))
	}
	if len(recovered) != 10 {
		t.Fatalf("%d recoveries logged, want 10:\n%s", len(recovered), sup.Proc.Tail(8000))
	}
}

// TestRecoverCrashLoop: past --max-restarts the supervisor unmounts and
// fails (a visible failure, not a spinning mount).
func TestRecoverCrashLoop(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 5, Classes: 1, Seed: 29})
	opts := supervisedOpts(t, bin, src, 1<<30)
	opts.MaxRestarts = 2
	sup := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup.Proc)
	for i := range 3 {
		if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			waitCount(t, sup.Proc, `msg="supervise: recovered"`, i+1)
			if err := verify(opts.Mountpoint, files[0], datagen.Content(files[0])); err != nil {
				t.Fatalf("after recovery %d: %v", i+1, err)
			}
		}
	}
	<-sup.Proc.Done
	if err := sup.Proc.Err(); err == nil || !strings.Contains(sup.Proc.Tail(8000), "supervise: giving up") {
		t.Fatalf("the supervisor after 3 kills with --max-restarts 2: %v, want a failure:\n%s", err, sup.Proc.Tail(8000))
	}
	if _, err := os.ReadFile(filepath.Join(opts.Mountpoint, files[0].Path)); err == nil {
		t.Fatal("the mount still serves after the supervisor gave up")
	}
}

// TestRecoverHitRatio: the NR cache is unaffected by a recovery or a
// graceful takeover. The cache holds about half the dataset; the epoch
// after the filling one is read half before a kill -9 (or a supervised
// `--takeover` by a second supervisor) and half after it, and its byte
// hit ratio (the old process's hits until then plus the new one's) is the
// cache's share of the dataset, C/D, as without either.
func TestRecoverHitRatio(t *testing.T) {
	t.Run("kill", func(t *testing.T) { testHitRatioAcross(t, false) })
	t.Run("takeover", func(t *testing.T) { testHitRatioAcross(t, true) })
}

func testHitRatioAcross(t *testing.T, takeover bool) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 40, Classes: 2, MedianSize: 200 << 10, MaxSize: 1 << 20, Seed: 30})
	var total int64
	for _, f := range files {
		total += f.Size
	}
	opts := supervisedOpts(t, bin, src, total/2)
	sup := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup.Proc)
	readAll := func(fs []datagen.File) {
		for _, f := range fs {
			if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll(files) // epoch 1 fills the cache
	m0 := cacheMetrics(t, opts.CacheDir)
	half := len(files) / 2
	readAll(files[:half])
	m1 := cacheMetrics(t, opts.CacheDir)
	what := "a kill -9"
	if takeover {
		what = "a takeover"
		next := opts
		next.Takeover = mountapi.HandoverSocket(opts.CacheDir)
		sup2 := testenv.StartCachefs(t, bin, next)
		waitLog(t, sup2.Proc, "supervise: holding the connection")
		if err := sup.Err(); err != nil {
			t.Fatalf("the old supervisor after its mount handed over: %v, want exit 0", err)
		}
	} else {
		if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup.Proc, `msg="supervise: recovered"`, 1)
	}
	readAll(files[half:])
	m2 := cacheMetrics(t, opts.CacheDir) // the new process's counters start at 0
	hit := m1["cachefs_cache_hit_bytes_total"] - m0["cachefs_cache_hit_bytes_total"] + m2["cachefs_cache_hit_bytes_total"]
	miss := m1["cachefs_cache_miss_bytes_total"] - m0["cachefs_cache_miss_bytes_total"] + m2["cachefs_cache_miss_bytes_total"]
	used := m2["cachefs_cache_used_bytes"]
	t.Logf("epoch spanning %s: hit %d + miss %d bytes of D=%d; cached (C) %d of capacity %d: hit ratio %.4f, C/D %.4f",
		what, int64(hit), int64(miss), total, int64(used), total/2, hit/float64(total), used/float64(total))
	if int64(hit+miss) != total {
		t.Errorf("the epoch read %d bytes, want D=%d", int64(hit+miss), total)
	}
	if hit != used {
		t.Errorf("hit bytes %d, want the cached bytes C=%d (C/D)", int64(hit), int64(used))
	}
}

func supervisedOpts(t testing.TB, bin, src string, cacheSize int64) mountapi.CommandOptions {
	t.Helper()
	opts := mountapi.CommandOptions{
		Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: cacheSize,
		Manifest: filepath.Join(t.TempDir(), "manifest"), WholeFileMax: 1 << 20, BlockSize: 256 << 10,
		LogLevel: "info", Supervise: true,
	}
	if out, err := exec.Command(bin, "index", src, "--out", opts.Manifest).CombinedOutput(); err != nil {
		t.Fatalf("cachefs index: %v\n%s", err, out)
	}
	return opts
}

// waitHeld waits until the supervisor holds the descriptor, and checks
// that the mount answers holders (as the supervisor asked it).
func waitHeld(t *testing.T, cacheDir string, sup *testenv.Proc) {
	t.Helper()
	waitLog(t, sup, "supervise: holding the connection")
	h, err := handover.Hold(context.Background(), mountapi.HandoverSocket(cacheDir), "test")
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(h.Fd)
}

// childPid is the pid of the supervisor's mount process (its one child;
// /proc lists a process's children per thread that started them).
func childPid(t testing.TB, sup *testenv.Proc) int {
	t.Helper()
	parent := strconv.Itoa(sup.Cmd.Process.Pid)
	tasks, err := filepath.Glob(filepath.Join("/proc", parent, "task", "*", "children"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("the supervisor %s has no child:\n%s", parent, sup.Tail(4000))
	return 0
}

// waitCount waits until p's log holds n lines matching pattern (bounded).
func waitCount(t testing.TB, p *testenv.Proc, pattern string, n int) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(60 * time.Second)
	for len(re.FindAllStringIndex(p.Tail(1<<22), -1)) < n {
		select {
		case <-p.Done:
			t.Fatalf("%s exited (%v) before %d lines %q:\n%s", p.Name, p.Err(), n, pattern, p.Tail(8000))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %d lines %q:\n%s", p.Name, n, pattern, p.Tail(8000))
		}
	}
}

// cacheMetrics reads the cachefs_cache_* samples of the mount's metrics
// (over its control socket).
func cacheMetrics(t *testing.T, cacheDir string) map[string]float64 {
	t.Helper()
	return mountMetrics(t, cacheDir, "cachefs_cache_")
}

// mountMetrics reads the samples of the mount's metrics whose names start
// with prefix (over its control socket).
func mountMetrics(t *testing.T, cacheDir, prefix string) map[string]float64 {
	t.Helper()
	text, err := mountapi.RemoteMetrics(context.Background(), cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// TestRecoverMidRead: the serving process is killed while it is inside a
// READ of a large file whose backend read is blocked (the source is
// another cachefs mount, stopped with SIGSTOP); the recovered process gets
// the READ again (FUSE_NOTIFY_RESEND) and the reader gets every byte, no
// error.
func TestRecoverMidRead(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 4, Classes: 1, MedianSize: 3 << 20, MaxSize: 4 << 20, Seed: 31})
	inner := mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: mountapi.ManifestNone, LogLevel: "info"}
	innerMount := testenv.StartCachefs(t, bin, inner)
	opts := supervisedOpts(t, bin, inner.Mountpoint, 1<<30)
	sup := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup.Proc)
	_, large := pick(t, files, 1<<20)
	var st unix.Stat_t
	if err := unix.Stat(opts.Mountpoint, &st); err != nil {
		t.Fatal(err)
	}
	if err := fusectl.Ensure(); err != nil {
		t.Fatal(err)
	}
	waiting := filepath.Join(fusectl.Dir, strconv.Itoa(int(unix.Minor(st.Dev))), "waiting")

	innerPid := innerMount.Proc.Cmd.Process.Pid
	if err := syscall.Kill(innerPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(innerPid, syscall.SIGCONT) })
	got := make(chan error, 1)
	go func() { got <- verify(opts.Mountpoint, large, datagen.Content(large)) }()
	// The reader's READ is in the serving process (blocked on the source)
	// once the connection has a request waiting for an answer.
	for {
		b, err := os.ReadFile(waiting)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n > 0 {
			break
		}
		select {
		case err := <-got:
			t.Fatalf("the read returned (%v) with its source stopped", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(t, sup.Proc, "supervise: the mount process died")
	if err := syscall.Kill(innerPid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitCount(t, sup.Proc, `msg="supervise: recovered"`, 1)
	if err := <-got; err != nil {
		t.Fatalf("the read the dead process was serving: %v\n%s", err, sup.Proc.Tail(8000))
	}
	t.Logf("a %d-byte read killed mid-READ, its source stopped: answered by the recovered process %v after the kill",
		large.Size, time.Since(start).Round(time.Millisecond))
}

// TestRecoverPassthroughInherited: a crash recovery keeps passthrough. A
// mount with passthrough is killed (-9) while a reader holds a file it
// opened with a backing id; the test, as holder, starts the recovery
// itself, twice in a row from the first process's held state (as the
// supervisor does), the second after the first recovered process opened
// another file with an id of its own. The open files read on (the kernel
// holds their backing files) and new opens of their inodes succeed and
// read right bytes: the kernel refuses (EIO) any open of an inode whose
// backing an open file holds unless it is passthrough with that same id,
// so each such open is passthrough with the dead process's id, found in
// the backing table; the recovered process's metrics count each open as
// passthrough and no READ of a cached file. Once every descriptor is closed, the last RELEASE of
// each inode unregisters its id: the test, as holder, then finds no id
// registered on the connection (no leak).
func TestRecoverPassthroughInherited(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 6, Classes: 1, MedianSize: 100 << 10, MaxSize: 500 << 10, Seed: 32})
	opts := supervisedOpts(t, bin, src, 1<<30)
	opts.Supervise = false // the test is the holder
	m := testenv.StartCachefs(t, bin, opts)
	waitLog(t, m.Proc, "msg=mounted") // logged once the handover socket listens
	f, g := files[0], files[1]
	pf, pg := filepath.Join(opts.Mountpoint, f.Path), filepath.Join(opts.Mountpoint, g.Path)
	for _, x := range []datagen.File{f, g} { // cached now
		if err := verify(opts.Mountpoint, x, datagen.Content(x)); err != nil {
			t.Fatal(err)
		}
	}
	openF := openRead(t, pf, f.Size/2) // passthrough: a cache hit
	h, err := handover.Hold(context.Background(), mountapi.HandoverSocket(opts.CacheDir), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(m.Proc.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.Proc.Done

	rec := recoverHeld(t, bin, opts, h)
	if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
		t.Fatalf("a new open while the dead process's passthrough file is open: %v, want its bytes (passthrough with its id)\n%s", err, rec.Tail(8000))
	}
	openG := openRead(t, pg, g.Size/3) // an id of the recovered process's own
	checkPassthrough(t, opts.CacheDir, 2)
	if err := syscall.Kill(rec.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-rec.Done

	rec = recoverHeld(t, bin, opts, h) // the first process's state: the table's token is the connection's
	for _, x := range []datagen.File{f, g} {
		if err := verify(opts.Mountpoint, x, datagen.Content(x)); err != nil {
			t.Fatalf("after the second kill, a new open of %s, held open by a dead process: %v\n%s", x.Path, err, rec.Tail(8000))
		}
	}
	checkPassthrough(t, opts.CacheDir, 2)
	checkRest(t, openF, f, f.Size/2) // reads on
	checkRest(t, openG, g, g.Size/3)
	if strings.Contains(rec.Tail(1<<20), "recovering without the dead process's backing table") {
		t.Fatalf("the backing table was not trusted:\n%s", rec.Tail(8000))
	}
	openF.Close()
	openG.Close()
	// RELEASE is asynchronous: wait until both inodes' ids are unregistered.
	waitCount(t, rec, `predecessor's passthrough backing" id=\d+ errno=0`, 2)
	dev := fuseconn.Device{Fd: h.Fd}
	var leaked []int32
	for id := int32(1); id <= 64; id++ { // ids are allocated cyclically from 1
		if dev.UnregisterBackingFd(id) == 0 {
			leaked = append(leaked, id)
		}
	}
	if len(leaked) != 0 {
		t.Fatalf("backing ids still registered after every file was closed: %v (leaked)\n%s", leaked, rec.Tail(8000))
	}
	t.Logf("two kill -9 with passthrough files open: new opens of their inodes read right (passthrough with the dead processes' ids); no id left registered after the closes")
}

// checkPassthrough checks that the mount process answered its opens
// (want) with passthrough backings, and that no READ of a cached file
// reached it.
func checkPassthrough(t *testing.T, cacheDir string, want float64) {
	t.Helper()
	m := mountMetrics(t, cacheDir, "cachefs_")
	if m["cachefs_passthrough_opens_total"] != want || m["cachefs_cached_file_reads_total"] != 0 {
		t.Fatalf("the recovered process: %v passthrough opens, %v READs of cached files; want %v and 0",
			m["cachefs_passthrough_opens_total"], m["cachefs_cached_file_reads_total"], want)
	}
}

// recoverHeld starts a mount process recovering the connection h holds
// (what Supervise does) and waits until it serves.
func recoverHeld(t *testing.T, bin string, opts mountapi.CommandOptions, h *handover.Held) *testenv.Proc {
	t.Helper()
	stateR, stateW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(h.Fd) // the child's; h.Fd stays the test's
	if err != nil {
		t.Fatal(err)
	}
	dev := os.NewFile(uintptr(fd), "/dev/fuse")
	cmd := exec.Command(bin, append(opts.Args(), "--"+mountapi.FlagRecoverFD, "3")...)
	cmd.ExtraFiles = []*os.File{dev, stateR}
	rec, err := testenv.StartProc("cachefs mount --recover-fd", cmd, &testenv.SyncBuffer{})
	dev.Close()
	stateR.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Terminate(20 * time.Second) })
	if err := handover.WriteState(stateW, h.State); err != nil {
		t.Fatal(err)
	}
	stateW.Close()
	waitLog(t, rec, "serving the taken-over connection")
	return rec
}
