package mount_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// testHolder is a holder in the test process, as the CSI node plugin is:
// it holds a duplicate of a mount's descriptor and lends it on its own
// socket (handover.ServeHeld), with the time its mount was seen dead.
type testHolder struct {
	sock string
	mu   sync.Mutex
	held *handover.Held
}

func startHolder(t *testing.T, cacheDir string) *testHolder {
	t.Helper()
	h, err := handover.Hold(context.Background(), mountapi.HandoverSocket(cacheDir), "test")
	if err != nil {
		t.Fatal(err)
	}
	th := &testHolder{sock: filepath.Join(t.TempDir(), "holder.sock"), held: h}
	l, err := handover.Listen(th.sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = handover.ServeHeld(l, func() (*handover.Held, error) {
			th.mu.Lock()
			defer th.mu.Unlock()
			return th.held, nil
		}, func(string, ...any) {})
	}()
	t.Cleanup(func() {
		l.Close()
		<-served
		unix.Close(h.Fd)
	})
	return th
}

// died records when the held connection's processes were killed.
func (th *testHolder) died(at time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.held.DiedAt = at
}

// TestSuperviseRecoverFrom: a holder (the test) lends the connection of a
// supervised mount whose supervisor and mount process were both killed
// with SIGKILL; `cachefs mount --supervise --recover-from SOCKET` serves it
// on (then recovers it itself after one more kill -9), while readers that
// verify every byte see no error. A socket that does not answer, a holder
// of another mount point and another dataset fail with a clear error.
func TestSuperviseRecoverFrom(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := buildVersion(t, t.TempDir(), "sup")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 30, Classes: 2, MedianSize: 200 << 10, MaxSize: 2 << 20, Seed: 46})
	opts := supervisedOpts(t, bin, src, 1<<30)
	first := testenv.StartCachefs(t, bin, opts)
	waitHeld(t, opts.CacheDir, first.Proc)
	holder := startHolder(t, opts.CacheDir)
	rd := startReaders(t, opts.Mountpoint, files, 2, files[0])
	rd.waitRounds(1)

	pid := childPid(t, first.Proc)
	// The supervisor first (it would recover its mount), by pid: its Wait
	// ends only with the mount process, which shares its output.
	for _, p := range []int{first.Cmd.Process.Pid, pid} {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	<-first.Done
	holder.died(time.Now())

	other, _ := testenv.WriteDataset(t, datagen.Spec{Files: 3, Classes: 1, Seed: 47})
	otherDataset := supervisedOpts(t, bin, other, 1<<30)
	otherDataset.Mountpoint, otherDataset.CacheDir = opts.Mountpoint, opts.CacheDir
	otherMountpoint := opts
	otherMountpoint.Mountpoint = t.TempDir()
	for _, c := range []struct {
		name string
		opts mountapi.CommandOptions
		from string
		want string
	}{
		{"no holder", opts, filepath.Join(t.TempDir(), "none.sock"), "lends no connection"},
		{"another mount point", otherMountpoint, holder.sock, "holds the connection mounted at " + opts.Mountpoint},
		{"another dataset", otherDataset, holder.sock, "the held connection served"},
	} {
		c.opts.RecoverFrom = c.from
		out, err := exec.Command(bin, c.opts.Args()...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() <= 0 || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: %v, want a failure exit code and %q:\n%s", c.name, err, c.want, out)
		}
	}

	next := opts
	next.RecoverFrom = holder.sock
	sup := testenv.StartCachefs(t, bin, next)
	waitLog(t, sup.Proc, "supervise: holding the connection")
	rd.waitRounds(1)
	if err := syscall.Kill(childPid(t, sup.Proc), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitCount(t, sup.Proc, `msg="supervise: recovered"`, 1)
	rd.waitRounds(1)
	rd.stop()
	var stalls []string
	for _, m := range regexp.MustCompile(`msg="serving the taken-over connection" stall=(\S+) kind=recovery`).FindAllStringSubmatch(sup.Tail(1<<22), -1) {
		stalls = append(stalls, m[1])
	}
	t.Logf("%d files verified over %d rounds across the death of a supervisor and its mount, a --recover-from and one more kill -9; recovery stalls (death to serving; the first spans the three refused starts): %s",
		rd.files.Load(), rd.rounds.Load(), strings.Join(stalls, ", "))
	if n := rd.errs.Load(); n != 0 {
		t.Fatalf("%d reader errors; first: %v\n%s", n, rd.firstErr, sup.Tail(8000))
	}
	for name, want := range map[string]float64{"cachefs_connection_recoveries_total": 2, `cachefs_connection_stall_seconds_count{kind="recovery"}`: 2} {
		if got := mountMetrics(t, opts.CacheDir, "cachefs_connection_")[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
