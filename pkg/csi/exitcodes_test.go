package csi

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/testenv"
	s3env "github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
)

// recordingLauncher starts cachefs as localLauncher does, but waits for each
// process itself and reports its exit status on exits. before, when set,
// runs first (to break the mount point).
type recordingLauncher struct {
	binary string
	before func(args []string)
	exits  chan int
}

func (l *recordingLauncher) launch(args, creds []string, logPath string) (int, error) {
	if l.before != nil {
		l.before(args)
	}
	cmd, err := startDetached(l.binary, args, creds, logPath)
	if err != nil {
		return 0, err
	}
	go func() {
		_ = cmd.Wait()
		l.exits <- cmd.ProcessState.ExitCode()
	}()
	return cmd.Process.Pid, nil
}

// exitCase is one way for `cachefs mount` to fail.
type exitCase struct {
	name    string
	minio   bool                                   // needs a MinIO server (m is nil otherwise)
	source  func(m *s3env.MinIO) string            // the volume's source
	secrets func(m *s3env.MinIO) map[string]string // nil: none
	// prepare breaks the node before the stage: key names the dataset's
	// cache directory (cacheRoot/key) and mount point.
	prepare func(t *testing.T, cacheDir string, l *recordingLauncher)
	// noRule: the node has no network rule naming the MinIO endpoint (on
	// loopback), so the mount's restricted egress refuses it.
	noRule   bool
	wantExit exitcode.Code
	wantGRPC codes.Code
	wantText string // part of the error, when set
}

// TestMountExitCodes covers every exit code of `cachefs mount` end to end:
// a real mount process fails, exits with the documented code and writes
// the failure line, and the driver's start path (acquire) turns that line
// into the documented gRPC code. The secrets never reach the log.
func TestMountExitCodes(t *testing.T) {
	testenv.RequireFUSE(t)
	cachefs, _ := buildBinaries(t)

	dataset := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataset, "a.jpg"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(corrupt, ".epochfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, ".epochfs", "manifest"), []byte("not a manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	nothingListening := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	const secret = "never-in-the-log-0123456789"
	s3 := func(bucket, endpoint string) string {
		return "s3://" + bucket + "/ds?endpoint=" + endpoint + "&region=us-east-1"
	}
	rootKeys := func(m *s3env.MinIO) map[string]string {
		return map[string]string{"AWS_ACCESS_KEY_ID": m.AccessKey, "AWS_SECRET_ACCESS_KEY": m.SecretKey}
	}
	fixed := func(s string) func(*s3env.MinIO) string { return func(*s3env.MinIO) string { return s } }

	for _, tc := range []exitCase{
		{name: "missing directory", source: fixed(filepath.Join(dataset, "nope")),
			wantExit: exitcode.NotFound, wantGRPC: codes.NotFound},
		{name: "missing bucket", minio: true, source: func(m *s3env.MinIO) string { return s3("no-such-bucket", m.Endpoint) },
			secrets: rootKeys, wantExit: exitcode.NotFound, wantGRPC: codes.NotFound},
		{name: "wrong secret key", minio: true, source: func(m *s3env.MinIO) string { return s3("datasets", m.Endpoint) },
			secrets: func(m *s3env.MinIO) map[string]string {
				return map[string]string{"AWS_ACCESS_KEY_ID": m.AccessKey, "AWS_SECRET_ACCESS_KEY": secret}
			},
			wantExit: exitcode.PermissionDenied, wantGRPC: codes.PermissionDenied},
		{name: "loopback endpoint no network rule names", minio: true, noRule: true,
			source: func(m *s3env.MinIO) string { return s3("datasets", m.Endpoint) }, secrets: rootKeys,
			wantExit: exitcode.PermissionDenied, wantGRPC: codes.PermissionDenied, wantText: "network rule"},
		{name: "unsupported source", source: fixed("ftp://host/data"),
			wantExit: exitcode.Usage, wantGRPC: codes.InvalidArgument},
		{name: "nothing listening at the endpoint", source: fixed(s3("datasets", nothingListening)),
			secrets: func(*s3env.MinIO) map[string]string {
				return map[string]string{"AWS_ACCESS_KEY_ID": "epochfs", "AWS_SECRET_ACCESS_KEY": secret}
			},
			wantExit: exitcode.Unavailable, wantGRPC: codes.Unavailable},
		{name: "cache locked by another store", source: fixed(dataset),
			prepare: func(t *testing.T, cacheDir string, _ *recordingLauncher) {
				s, err := cache.Open(cache.Options{Dir: cacheDir, Capacity: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
			},
			wantExit: exitcode.CacheLocked, wantGRPC: codes.Aborted},
		{name: "cache dir read-only", source: fixed(dataset),
			prepare: func(t *testing.T, cacheDir string, _ *recordingLauncher) {
				if err := os.MkdirAll(cacheDir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := bindReadOnly(cacheDir, cacheDir); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = unmountAll(cacheDir) })
			},
			wantExit: exitcode.CacheUnusable, wantGRPC: codes.FailedPrecondition},
		{name: "mount point is a file", source: fixed(dataset),
			prepare: func(t *testing.T, _ string, l *recordingLauncher) {
				l.before = func(args []string) { // args: mount SOURCE MOUNTPOINT …
					_ = os.Remove(args[2])
					_ = os.WriteFile(args[2], nil, 0o600)
				}
			},
			wantExit: exitcode.Mountpoint, wantGRPC: codes.Internal},
		{name: "corrupt manifest", source: fixed(corrupt),
			wantExit: exitcode.Internal, wantGRPC: codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m *s3env.MinIO
			if tc.minio {
				m = s3env.StartMinIO(t)
				m.MakeBucket(t, "datasets")
				m.Put(t, "datasets", "ds/a.jpg", []byte("data"))
			}
			l := &recordingLauncher{binary: cachefs, exits: make(chan int, 1)}
			n := newTestNodeState(t, l)
			// The mounts start with restricted egress (--restrict-egress):
			// the servers of these cases are on loopback, so the node's
			// rules name them, as an admin's would.
			n.cfg.egressRules = []string{"s3://datasets?endpoint=" + nothingListening}
			if m != nil && !tc.noRule {
				n.cfg.egressRules = append(n.cfg.egressRules, "s3://datasets?endpoint="+m.Endpoint)
			}
			params := volumeParams{Source: tc.source(m), CacheSize: 64 << 20, Policy: cache.PolicyNR}
			var secrets map[string]string
			if tc.secrets != nil {
				secrets = tc.secrets(m)
			}
			key := n.datasetKey(params, secrets)
			if tc.prepare != nil {
				tc.prepare(t, filepath.Join(n.cfg.cacheRoot, key), l)
			}

			unlock, err := n.lockDataset(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = n.acquire(key, params, secrets, "vol-1")
			if err == nil {
				_ = n.release(key, "vol-1")
			}
			unlock()

			select {
			case code := <-l.exits:
				if code != int(tc.wantExit) {
					t.Errorf("cachefs mount exited with %d, want %d (%s)", code, tc.wantExit, tc.wantExit.Reason())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("cachefs mount did not exit")
			}
			if got := status.Code(err); got != tc.wantGRPC {
				t.Errorf("acquire = %v (%v), want %v", got, err, tc.wantGRPC)
			}
			if want := fmt.Sprintf("(exit code %d, %s)", tc.wantExit, tc.wantExit.Reason()); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			if tc.wantText != "" && !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not say %q", err, tc.wantText)
			}
			log, _ := os.ReadFile(n.logPath(key))
			if strings.Contains(string(log), secret) {
				t.Errorf("the mount log holds the secret key:\n%s", log)
			}
			if t.Failed() {
				t.Logf("mount log:\n%s", log)
			}
		})
	}
}

// TestMountExitCodeThroughMounter: with a mounter starting the mount
// processes (the driver is not their parent), the driver reads the exit
// code from the log just the same.
func TestMountExitCodeThroughMounter(t *testing.T) {
	testenv.RequireFUSE(t)
	cachefs, _ := buildBinaries(t)
	stateDir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "mounter.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunMounter(ctx, MounterConfig{Socket: sock, CachefsBinary: cachefs, StateDir: stateDir})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ml, err := newMounterLauncher("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNodeState(nodeConfig{dir: filepath.Join(stateDir, "node"), cacheRoot: t.TempDir(), launcher: ml, mountTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n.run(ctx, 0)
	params := volumeParams{Source: filepath.Join(t.TempDir(), "nope"), CacheSize: 1 << 20, Policy: cache.PolicyNR}
	key := n.datasetKey(params, nil)
	unlock, err := n.lockDataset(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.acquire(key, params, nil, "vol-1")
	unlock()
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "(exit code 3, not_found)") {
		t.Fatalf("acquire = %v, want NotFound from exit code 3", err)
	}
}

// newTestNodeState returns a node state in a temporary directory that
// starts mounts with l.
func newTestNodeState(t *testing.T, l launcher) *nodeState {
	t.Helper()
	dir := t.TempDir()
	n, err := newNodeState(nodeConfig{
		dir:          filepath.Join(dir, "state", "node"),
		cacheRoot:    filepath.Join(dir, "cache"),
		launcher:     l,
		mountTimeout: 30 * time.Second,
		log:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n.run(ctx, 0)
	return n
}
