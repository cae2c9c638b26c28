package csi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestCheckLaunch: what a mounter accepts to start. The credentials
// descriptor is the mounter's own to name.
func TestCheckLaunch(t *testing.T) {
	logDir := "/state/node/logs"
	ok := launchRequest{Args: mountapi.CommandOptions{Source: "/src", Mountpoint: "/state/node/mnt/ds-a", CacheDir: "/c"}.Args(), Log: filepath.Join(logDir, "ds-a.log")}
	for _, tc := range []struct {
		name    string
		mutate  func(*launchRequest)
		wantErr string
	}{
		{"mount with credentials", func(r *launchRequest) { r.Env = []string{"AWS_ACCESS_KEY_ID=a", "AWS_SECRET_ACCESS_KEY=s"} }, ""},
		{"another command", func(r *launchRequest) { r.Args[0] = "prefetch" }, "only `cachefs mount"},
		{"unknown variable", func(r *launchRequest) { r.Env = []string{"LD_PRELOAD=/x.so"} }, `"LD_PRELOAD" is not allowed`},
		{"credentials fd", func(r *launchRequest) { r.Args = append(r.Args, "--"+mountapi.FlagCredentialsFD, "0") }, "--credentials-fd is set by the mounter"},
		{"credentials fd=", func(r *launchRequest) { r.Args = append(r.Args, "--"+mountapi.FlagCredentialsFD+"=4") }, "--credentials-fd is set by the mounter"},
		{"recover fd", func(r *launchRequest) { r.Args = append(r.Args, "--"+mountapi.FlagRecoverFD, "3") }, "--recover-fd is set by the mounter"},
		{"log elsewhere", func(r *launchRequest) { r.Log = "/etc/x.log" }, "must be a .log file in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			req.Args = append([]string(nil), ok.Args...)
			tc.mutate(&req)
			err := checkLaunch(req, logDir)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("checkLaunch = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestMounterLauncherWaitsForMounter: a launch sent before the mounter
// listens (its pod starting beside a new node plugin pod) is retried until
// it does, and starts the process once.
func TestMounterLauncherWaitsForMounter(t *testing.T) {
	stateDir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "mounter.sock")
	ml, err := newMounterLauncher("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		done <- RunMounter(ctx, MounterConfig{Socket: sock, CachefsBinary: "/bin/true", StateDir: stateDir})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	pid, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, filepath.Join(stateDir, "node", "logs", "k.log"))
	if err != nil || pid <= 0 {
		t.Fatalf("launch = %d, %v; want a pid once the mounter listens", pid, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("launch answered after %v, before the mounter listened", d)
	}

	ml.wait = 0
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if _, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, filepath.Join(stateDir, "node", "logs", "k.log")); err == nil {
		t.Fatal("launch with no mounter and no wait succeeded")
	}
}

// TestMounterLeavesNewerSocket: a mounter that stops after a newer one
// took over its socket path leaves the newer one's socket in place, so the
// driver keeps reaching the newer mounter.
func TestMounterLeavesNewerSocket(t *testing.T) {
	stateDir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "mounter.sock")
	start := func() (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- RunMounter(ctx, MounterConfig{Socket: sock, CachefsBinary: "/bin/true", StateDir: stateDir})
		}()
		return cancel, done
	}
	ml, err := newMounterLauncher("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(stateDir, "node", "logs", "k.log")
	stopOld, oldDone := start()
	if _, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, log); err != nil {
		t.Fatal(err)
	}
	old, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	stopNew, newDone := start()
	for i := 0; ; i++ {
		if cur, err := os.Stat(sock); err == nil && !os.SameFile(old, cur) {
			break
		}
		if i == 500 {
			t.Fatal("the second mounter did not replace the socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopOld()
	if err := <-oldDone; err != nil {
		t.Fatal(err)
	}
	ml.wait = 0
	if _, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, log); err != nil {
		t.Fatalf("launch after the older mounter stopped: %v (it removed the newer one's socket)", err)
	}
	stopNew()
	if err := <-newDone; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the last mounter left its socket behind: %v", err)
	}
}

// TestMounterServesRemovedSocketAgain: when its socket is removed from
// under it (an older mounter stopping removes the path, whoever's it is),
// the mounter serves a new one, and the driver's launch (which retries a
// refused dial) reaches it.
func TestMounterServesRemovedSocketAgain(t *testing.T) {
	stateDir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "mounter.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunMounter(ctx, MounterConfig{Socket: sock, CachefsBinary: "/bin/true", StateDir: stateDir})
	}()
	ml, err := newMounterLauncher("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(stateDir, "node", "logs", "k.log")
	if _, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, log); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if _, err := ml.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), nil, log); err != nil {
		t.Fatalf("launch after the socket was removed: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the mounter left its socket behind: %v", err)
	}
}
