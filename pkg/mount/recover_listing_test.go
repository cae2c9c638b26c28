package mount_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// nestedDataset writes spec's files three directories deeper than
// datagen lays them out (class/sN/tN/name), so that node ids of a listing
// mount have parents several levels down.
func nestedDataset(t *testing.T, spec datagen.Spec) (string, []datagen.File) {
	t.Helper()
	dir := t.TempDir()
	files := spec.Plan()
	for i := range files {
		f := &files[i]
		f.Path = filepath.Join(filepath.Dir(f.Path), fmt.Sprintf("s%d", i%3), fmt.Sprintf("t%d", i%2), filepath.Base(f.Path))
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, datagen.Content(*f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// listingSupervisedOpts: a supervised mount of src from listings (no
// manifest).
func listingSupervisedOpts(t *testing.T, src string) mountapi.CommandOptions {
	return mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: mountapi.ManifestNone, WholeFileMax: 1 << 20, BlockSize: 256 << 10, LogLevel: "info", Supervise: true}
}

// maxRecoveryStall bounds, loosely, the longest open+read+close of the
// probe across one kill (a correctness test: the stall is logged, the
// bound only catches a recovery gone slow by an order of magnitude).
const maxRecoveryStall = 2 * time.Second

// TestRecoverListingAfterKill is TestRecoverAfterKill for a listing-based
// mount (no manifest) of a dataset of nested directories: two readers
// verify every byte in a loop while the mount process is killed (-9) 6
// times at random points, the first ones while the first round is still
// creating node ids (so that recovered processes both answer the dead
// ones' ids from the node table and append their own). No reader error,
// no wrong byte; files and a directory opened before the kills read on
// after them; the probe's longest round trip per kill is logged and held
// to maxRecoveryStall.
func TestRecoverListingAfterKill(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "recover")
	src, files := nestedDataset(t, datagen.Spec{Files: 60, Classes: 3, MedianSize: 400 << 10, MaxSize: 3 << 20, Seed: 33})
	opts := listingSupervisedOpts(t, src)
	opts.MaxRestarts = 20
	sup := startSupervisor(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup)
	mnt := opts.Mountpoint
	small, large := pick(t, files, 1<<20)
	smallF := openRead(t, filepath.Join(mnt, small.Path), small.Size/2)
	largeF := openRead(t, filepath.Join(mnt, large.Path), 300<<10)
	dirF, err := os.Open(filepath.Join(mnt, filepath.Dir(small.Path)))
	if err != nil {
		t.Fatal(err)
	}
	defer dirF.Close()
	if _, err := dirF.Readdirnames(1); err != nil {
		t.Fatal(err)
	}

	rd := startReaders(t, mnt, files, 2, small)
	const kills = 6
	var stalls []string
	var worst time.Duration
	for i := range kills {
		pause := 300 * time.Millisecond
		if i == 0 {
			pause = 50 * time.Millisecond // most likely within the first round, which creates the node ids
		}
		time.Sleep(time.Duration(rand.Int64N(int64(pause)))) // a random point of the readers' loop
		if err := syscall.Kill(childPid(t, sup), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup, `msg="supervise: recovered"`, i+1)
		if i >= 1 {
			rd.waitRounds(1)
		}
		d := time.Duration(rd.probeMax.Swap(0))
		worst = max(worst, d)
		stalls = append(stalls, d.Round(time.Millisecond).String())
	}
	rd.waitRounds(1)
	rd.stop()
	var recovered []string
	for _, m := range regexp.MustCompile(`msg="supervise: recovered" pid=\d+ stall=(\S+)`).FindAllStringSubmatch(sup.Tail(1<<22), -1) {
		recovered = append(recovered, m[1])
	}
	nodes := regexp.MustCompile(`recovered the dead process's node table" nodes=(\d+)`).FindAllStringSubmatch(sup.Tail(1<<22), -1)
	var counts []string
	for _, m := range nodes {
		counts = append(counts, m[1])
	}
	checkRest(t, smallF, small, small.Size/2)
	checkRest(t, largeF, large, 300<<10)
	smallF.Close()
	largeF.Close()
	if names, err := dirF.Readdirnames(-1); err != nil || len(names) == 0 {
		t.Fatalf("a directory opened before the kills: %v (%d more names)", err, len(names))
	}
	t.Logf("%d files verified by 2 readers over %d rounds across %d kill -9 of a listing mount; longest open+read+close of a cached file per kill: %s; death to serving (supervisor): %s; node ids loaded per recovery: %s",
		rd.files.Load(), rd.rounds.Load(), kills, strings.Join(stalls, " "), strings.Join(recovered, " "), strings.Join(counts, " "))
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors across the kills; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
	if len(recovered) != kills || len(counts) != kills {
		t.Fatalf("%d recoveries and %d node tables logged, want %d:\n%s", len(recovered), len(counts), kills, sup.Tail(8000))
	}
	if worst > maxRecoveryStall {
		t.Errorf("a reader stalled %v across a kill, over %v", worst, maxRecoveryStall)
	}
}

// TestRecoverListingAfterTakeover: a supervised listing mount is taken
// over (`--supervise --takeover`: the successor appends to the node table
// its state names), then its mount process is killed (-9) twice, while
// readers verify every byte: the recovered processes answer the ids of
// all three predecessors, 0 reader errors.
func TestRecoverListingAfterTakeover(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := nestedDataset(t, datagen.Spec{Files: 30, Classes: 2, MedianSize: 200 << 10, MaxSize: 2 << 20, Seed: 46})
	opts := listingSupervisedOpts(t, src)
	old := startSupervisor(t, bin, opts)
	waitHeld(t, opts.CacheDir, old)
	rd := startReaders(t, opts.Mountpoint, files, 2, files[0])
	rd.waitRounds(1)
	next := opts
	next.Takeover = mountapi.HandoverSocket(opts.CacheDir)
	sup := testenv.StartCachefs(t, bin, next)
	waitLog(t, sup.Proc, "supervise: holding the connection")
	if err := old.Err(); err != nil {
		t.Fatalf("the old supervisor after its mount handed over: %v, want exit 0:\n%s", err, old.Tail(8000))
	}
	rd.waitRounds(1)
	for i := range 2 {
		if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup.Proc, `msg="supervise: recovered"`, i+1)
		rd.waitRounds(1)
	}
	rd.stop()
	log := sup.Tail(1 << 22)
	t.Logf("%d files verified over %d rounds across 1 takeover and 2 kill -9 of a listing mount", rd.files.Load(), rd.rounds.Load())
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
	if strings.Contains(log, "node table is unusable") || strings.Count(log, "recovered the dead process's node table") != 2 {
		t.Fatalf("the successor did not go on with the running mount's node table, or a recovery did not load it:\n%s", sup.Tail(8000))
	}
}

// TestRecoverListingTableFull: a listing mount whose node ids outgrow the
// node table (--listing-cache-entries 10, 30 files) serves on, logs one
// ERROR saying its ids are no longer recorded, and a recovery after a
// kill -9 is refused (the table is marked incomplete) rather than served
// without the ids: the supervisor gives up after 3 refused starts and
// unmounts, a visible failure.
func TestRecoverListingTableFull(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 30, Classes: 2, Seed: 47})
	opts := listingSupervisedOpts(t, src)
	opts.ListingCacheEntries = 10
	sup := startSupervisor(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup)
	for _, f := range files {
		if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
			t.Fatalf("a mount whose node table is full must serve on: %v", err)
		}
	}
	if n := strings.Count(sup.Tail(1<<22), "fusefs: node table: node ids are no longer recorded"); n != 1 {
		t.Fatalf("%d ERROR lines about the full node table, want 1:\n%s", n, sup.Tail(8000))
	}
	if err := syscall.Kill(childPid(t, sup), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sup.Done
	log := sup.Tail(1 << 22)
	if sup.Err() == nil || !strings.Contains(log, "supervise: giving up") || strings.Contains(log, `msg="supervise: recovered"`) ||
		!strings.Contains(log, "is incomplete") {
		t.Fatalf("the supervisor after a kill with an incomplete node table: %v, want the recoveries refused (incomplete) and a failure:\n%s", sup.Err(), sup.Tail(8000))
	}
	if _, err := os.Stat(filepath.Join(opts.Mountpoint, files[0].Path)); err == nil {
		t.Fatal("the mount still serves after the supervisor gave up")
	}
	t.Logf("a full node table: the mount served on, the recovery was refused and the supervisor gave up")
}
