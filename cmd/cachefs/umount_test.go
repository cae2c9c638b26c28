package main_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestUmountBinary: `cachefs umount MOUNTPOINT` stops the mount serving
// it over its control socket: with a file held open, the mount point goes
// at once (detached) and the reader still reads, and the process exits 0
// once the file is closed; an idle mount exits at once. Nothing mounted,
// a mount that is not cachefs's, and a cache directory of another mount
// are refused with clear errors; a usage error exits 2.
func TestUmountBinary(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := testenv.GoBuild(t, "./cmd/cachefs")
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 20, Classes: 2, MedianSize: 5000, MinSize: 100, MaxSize: 20_000, Seed: 8})
	start := func() *testenv.Cachefs {
		return testenv.StartCachefs(t, bin, mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30})
	}
	umount := func(args ...string) (string, int) {
		var out bytes.Buffer
		cmd := exec.Command(bin, append([]string{"umount"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	}
	a, b := start(), start()

	notMounted := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{notMounted}, 1, "cachefs: umount: nothing is mounted on " + notMounted},
		{[]string{"/proc"}, 1, "cachefs: umount: /proc is not a cachefs mount (it is a proc mount of proc): use umount(8)"},
		{[]string{b.Opts.Mountpoint, "--cache-dir", a.Opts.CacheDir}, 1, "control: unmount: this mount serves " + a.Opts.Mountpoint + ", not"},
		{nil, 2, "accepts 1 arg(s), received 0"},
	} {
		out, code := umount(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.says) {
			t.Errorf("umount %q: exit %d, %q; want exit %d saying %q", tc.args, code, out, tc.code, tc.says)
		}
	}
	for _, c := range []*testenv.Cachefs{a, b} {
		if ok, err := testenv.Mounted(c.Opts.Mountpoint); !ok || err != nil {
			t.Fatalf("%s: mounted %v, %v after the refusals", c.Opts.Mountpoint, ok, err)
		}
	}

	// A reader holds a file of a: detached, served until it closes it.
	f, err := os.Open(filepath.Join(a.Opts.Mountpoint, files[0].Path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, code := umount(a.Opts.Mountpoint)
	if code != 0 || !strings.Contains(out, "unmounted "+a.Opts.Mountpoint) || !strings.Contains(out, "serves the files still open") {
		t.Fatalf("umount of a busy mount: exit %d, %q", code, out)
	}
	if ok, err := testenv.Mounted(a.Opts.Mountpoint); ok || err != nil {
		t.Errorf("%s still a mount point (%v) after umount", a.Opts.Mountpoint, err)
	}
	data, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(data, datagen.Content(files[0])) {
		t.Errorf("the open file after the detach: %d bytes, %v; want %d bytes of its content", len(data), err, files[0].Size)
	}
	select {
	case <-a.Done:
		t.Fatalf("the mount process exited while a file was open: %v\n%s", a.Err(), a.Tail(4000))
	default:
	}
	f.Close()
	if err := a.Err(); err != nil {
		t.Errorf("busy mount's process after the last close: %v\n%s", err, a.Tail(4000))
	}

	// An idle mount, by a relative path: gone, and its process exited 0.
	rel, err := filepath.Rel(mustGetwd(t), b.Opts.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := umount(rel); code != 0 || !strings.Contains(out, "unmounted "+b.Opts.Mountpoint+" (mount pid") {
		t.Fatalf("umount %s: exit %d, %q", rel, code, out)
	}
	if err := b.Err(); err != nil {
		t.Errorf("idle mount's process: %v\n%s", err, b.Tail(4000))
	}
	if !strings.Contains(b.Tail(4000), "asked over the control socket (cachefs umount)") {
		t.Errorf("the mount's log does not say why it unmounted:\n%s", b.Tail(4000))
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
