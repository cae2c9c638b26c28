package csi_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestMountLogRotated: a mount log over --mount-log-max-size is copied to
// .log.1 and truncated by the health check, the mount process keeps
// logging into it (from its start: no hole), and the logs go when the
// dataset is released.
func TestMountLogRotated(t *testing.T) {
	const max = 64 << 10
	data, files := dataset(t)
	td := startDriver(t, func(c *csi.Config) {
		c.HealthInterval = 100 * time.Millisecond
		c.MountLogMaxSize = max
	})
	staging := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-l", staging, map[string]string{"source": data, "cacheSize": "16Mi"})
	logs, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "logs", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("mount logs: %v, want 1", logs)
	}
	log := logs[0]
	// The stage returns once the mount is live, which may be just before
	// the mount process logs that it is: the filler (and the rotation it
	// triggers) must come after that line.
	waitFor(t, 10*time.Second, "the mount to log that it is mounted", func() bool {
		b, _ := os.ReadFile(log)
		return bytes.Contains(b, []byte(`"msg":"mounted"`))
	})
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat(`{"msg":"filler line of the test"}`+"\n", 2*max/34)
	if _, err := f.WriteString(filler); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitFor(t, 10*time.Second, "the log to be rotated", func() bool {
		st, err := os.Stat(log)
		_, err1 := os.Stat(log + ".1")
		return err == nil && st.Size() < max && err1 == nil
	})
	rotated, err := os.ReadFile(log + ".1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rotated, []byte(`"msg":"mounted"`)) || !bytes.Contains(rotated, []byte("filler line")) {
		t.Errorf("the rotated log lacks the mount's start line or the filler (%d bytes)", len(rotated))
	}

	// The mount logs a prefetch it runs for its control socket.
	key := strings.TrimSuffix(filepath.Base(log), ".log")
	if _, err := mountapi.RemotePrefetch(ctx, filepath.Join(td.cacheDir, key), mountapi.ControlRequest{}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the mount to log the prefetch", func() bool {
		b, _ := os.ReadFile(log)
		return bytes.Contains(b, []byte("prefetch ended"))
	})
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[0] != '{' || bytes.IndexByte(b, 0) >= 0 || bytes.Contains(b, []byte("filler")) {
		t.Errorf("the log after rotation does not start with the mount's new lines:\n%.300q", b)
	}
	checkFiles(t, view(t, td, "vol-l", staging), files)
	unstage(t, td, "vol-l", staging)
	waitFor(t, 10*time.Second, "the released dataset's logs to be removed", func() bool {
		m, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "logs", "*"))
		return len(m) == 0
	})
}
