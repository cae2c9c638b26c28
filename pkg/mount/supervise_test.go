package mount_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// startSupervisor runs bin with opts (a supervised mount) and extra as its
// descriptors from 3 on, and waits until the mount point is mounted; it is
// stopped (SIGTERM, then SIGKILL) in t.Cleanup.
func startSupervisor(t *testing.T, bin string, opts mountapi.CommandOptions, extra ...*os.File) *testenv.Proc {
	t.Helper()
	cmd := exec.Command(bin, opts.Args()...)
	cmd.ExtraFiles = extra
	p, err := testenv.StartProc("cachefs mount --supervise", cmd, &testenv.SyncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range extra {
		f.Close()
	}
	t.Cleanup(func() {
		p.Terminate(20 * time.Second)
		_ = syscall.Unmount(opts.Mountpoint, syscall.MNT_DETACH)
	})
	exited := make(chan error, 1)
	go func() { exited <- p.Err() }()
	if err := testenv.WaitMounted(opts.Mountpoint, 30*time.Second, exited); err != nil {
		t.Fatalf("cachefs mount --supervise: %v\n%s", err, p.Tail(8000))
	}
	return p
}

// checkNoSecret fails if secret is in the argv or the environment of pid.
func checkNoSecret(t *testing.T, pid int, secret string) {
	t.Helper()
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), f))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Fatalf("/proc/%d/%s is empty: the process is gone", pid, f)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("the secret key is in /proc/%d/%s", pid, f)
		}
	}
}

// TestSuperviseCredentialsFD: a supervised mount of a MinIO bucket given
// its credentials on --credentials-fd: the supervisor reads them once and
// gives each mount process a fresh pipe, so the processes that recover the
// mount after two kill -9 reach the bucket too, every byte right; the
// secret key is in no argv or environment of the supervisor or a child.
func TestSuperviseCredentialsFD(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "datasets")
	files := datagen.Spec{Files: 30, Classes: 2, MedianSize: 200 << 10, MaxSize: 2 << 20, Seed: 41}.Plan()
	mi.PutFiles(t, "datasets", "train/", files)
	src := "s3://datasets/train?endpoint=" + mi.Endpoint + "&region=us-east-1"
	opts := mountapi.CommandOptions{
		Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: filepath.Join(t.TempDir(), "manifest"), WholeFileMax: 1 << 20, BlockSize: 256 << 10,
		LogLevel: "info", Supervise: true, CredentialsFD: 3,
	}
	index := exec.Command(bin, "index", src, "--out", opts.Manifest)
	index.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+mi.AccessKey, "AWS_SECRET_ACCESS_KEY="+mi.SecretKey)
	if out, err := index.CombinedOutput(); err != nil {
		t.Fatalf("cachefs index: %v\n%s", err, out)
	}
	b, err := mountapi.EncodeCredentials([]string{"AWS_ACCESS_KEY_ID=" + mi.AccessKey, "AWS_SECRET_ACCESS_KEY=" + mi.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sup := startSupervisor(t, bin, opts, r)
	waitHeld(t, opts.CacheDir, sup)
	rd := startReaders(t, opts.Mountpoint, files, 2, files[0])
	rd.waitRounds(1)
	checkNoSecret(t, sup.Cmd.Process.Pid, mi.SecretKey)
	for i := range 2 {
		pid := childPid(t, sup)
		checkNoSecret(t, pid, mi.SecretKey)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup, `msg="supervise: recovered"`, i+1)
		rd.waitRounds(1)
	}
	checkNoSecret(t, childPid(t, sup), mi.SecretKey)
	rd.stop()
	if strings.Contains(sup.Tail(1<<22), mi.SecretKey) {
		t.Error("the secret key is in the log")
	}
	t.Logf("%d files verified over %d rounds across 2 kill -9 of an S3 mount with credentials on a pipe", rd.files.Load(), rd.rounds.Load())
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
}

// TestSuperviseListing: a listing-based mount (no manifest) under
// --supervise is held and recovered like a manifest mount: readers verify
// every byte of it in a loop across two kill -9 of the mount process, with
// 0 errors (the node ids the kernel holds are the node table's); no "not
// recoverable" warning; and the mount's own exit is the supervisor's
// (SIGTERM to the mount: it unmounts and exits 0).
func TestSuperviseListing(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 24, Classes: 3, MedianSize: 100 << 10, MaxSize: 2 << 20, Seed: 42})
	opts := mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30,
		Manifest: mountapi.ManifestNone, WholeFileMax: 1 << 20, BlockSize: 256 << 10, LogLevel: "info", Supervise: true}
	sup := startSupervisor(t, bin, opts)
	waitHeld(t, opts.CacheDir, sup)
	rd := startReaders(t, opts.Mountpoint, files, 2, files[0])
	rd.waitRounds(1)
	for i := range 2 {
		if err := syscall.Kill(childPid(t, sup), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitCount(t, sup, `msg="supervise: recovered"`, i+1)
		rd.waitRounds(1)
	}
	rd.stop()
	log := sup.Tail(1 << 22)
	if strings.Contains(log, "supervise: not recoverable") {
		t.Errorf("the supervisor warns that the listing mount is not recoverable:\n%s", sup.Tail(8000))
	}
	if n := strings.Count(log, "recovered the dead process's node table"); n != 2 {
		t.Errorf("%d recovered node tables logged, want 2:\n%s", n, sup.Tail(8000))
	}
	t.Logf("listing mount under --supervise: %d files verified over %d rounds across 2 kill -9", rd.files.Load(), rd.rounds.Load())
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors across the kills; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
	if err := syscall.Kill(childPid(t, sup), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := sup.Err(); err != nil {
		t.Fatalf("the supervisor after its mount exited 0: %v\n%s", err, sup.Tail(8000))
	}
}

// TestSuperviseTakeoverRefused: `--supervise --takeover` whose first
// process cannot take over (another dataset): the supervisor exits with
// that process's exit code, recovers nothing, and the running mount
// serves on.
func TestSuperviseTakeoverRefused(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 8, Classes: 1, Seed: 43})
	opts := supervisedOpts(t, bin, src, 1<<30)
	old := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, old.Proc)
	other, _ := testenv.WriteDataset(t, datagen.Spec{Files: 3, Classes: 1, Seed: 44})
	next := supervisedOpts(t, bin, other, 1<<30)
	next.Mountpoint, next.CacheDir, next.Takeover = opts.Mountpoint, opts.CacheDir, mountapi.HandoverSocket(opts.CacheDir)
	out, err := exec.Command(bin, next.Args()...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
		t.Fatalf("the refused takeover: %v, want a failure exit code:\n%s", err, out)
	}
	if !strings.Contains(string(out), "mount: takeover") || strings.Contains(string(out), "recovering its connection") {
		t.Errorf("exit %d; want the takeover's failure and no recovery:\n%s", exit.ExitCode(), out)
	}
	t.Logf("refused takeover under --supervise: exit code %d", exit.ExitCode())
	select {
	case <-old.Done:
		t.Fatalf("the running mount exited:\n%s", old.Tail(4000))
	default:
	}
	for _, f := range files {
		if err := verify(opts.Mountpoint, f, datagen.Content(f)); err != nil {
			t.Fatal(err)
		}
	}
}
