package csi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestSecretsNeverInArgsOrLogs stages an S3 volume with node-stage secrets,
// with the local launcher and through a mounter, while the driver's own
// environment holds other static AWS credentials, and checks that the
// mount reads the private bucket with the volume's credentials, which are
// in neither the mount process's environment (/proc/PID/environ) nor its
// arguments, nor in the driver's log (at debug level, which logs every
// request), the mount's log, or any state file but the 0600 secrets file on
// the secrets tmpfs; the driver's own credentials are not in the mount
// process's environment either.
func TestSecretsNeverInArgsOrLogs(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "secret")
	files := datagen.Spec{Files: 10, Classes: 2, MedianSize: 5000, MinSize: 100, MaxSize: 20000, Seed: 2}.Plan()
	mi.PutFiles(t, "secret", "ds/", files)
	// The driver's own static credentials: wrong for this MinIO, so a mount
	// that used them would fail to read.
	t.Setenv("AWS_ACCESS_KEY_ID", "NODEKEYID0123456789")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "node-secret-never-in-a-volume-mount")
	// Ambient identities a node may hold besides static keys: none may
	// reach a mount that brings its own credentials.
	for _, k := range ambientIdentity {
		t.Setenv(k, "/node/identity/"+k)
	}
	t.Run("local launcher", func(t *testing.T) { testSecretsNeverInArgsOrLogs(t, mi, files, false) })
	t.Run("mounter", func(t *testing.T) { testSecretsNeverInArgsOrLogs(t, mi, files, true) })
}

// ambientIdentity are variables through which a mount could read with an
// identity the volume did not bring (web identity, container credentials,
// a role, Ceph's keyring, GCP and Azure credentials).
var ambientIdentity = []string{
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
	"CEPH_KEYRING", "CEPH_ARGS", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
}

func testSecretsNeverInArgsOrLogs(t *testing.T, mi *s3.MinIO, files []datagen.File, viaMounter bool) {
	logs := &testenv.SyncBuffer{}
	var mounterEndpoint, stateDir string
	if viaMounter {
		cachefs, _ := buildBinaries(t)
		dir := t.TempDir()
		sock := filepath.Join(dir, "mounter.sock")
		stateDir = filepath.Join(dir, "state")
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- csi.RunMounter(mctx, csi.MounterConfig{Socket: sock, CachefsBinary: cachefs, StateDir: stateDir})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		waitSocket(t, sock)
		mounterEndpoint = "unix://" + sock
	}
	td := startDriver(t, func(c *csi.Config) {
		c.NetworkRules = []string{"s3://secret?endpoint=" + mi.Endpoint} // MinIO is on loopback
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if viaMounter {
			c.MounterEndpoint, c.StateDir = mounterEndpoint, stateDir
		}
	})
	checkSecretsTmpfs(t, td.stateDir)
	staging := filepath.Join(td.workDir(t), "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	vctx := map[string]string{"source": "s3://secret/ds?endpoint=" + mi.Endpoint, "cacheSize": "16Mi"}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-s", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
		Secrets: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, view(t, td, "vol-s", staging), files)

	secrets := [][]byte{[]byte(mi.SecretKey), []byte(mi.AccessKey), []byte("node-secret-never-in-a-volume-mount"), []byte("NODEKEYID0123456789")}
	cmdline := mountCmdline(t, td)
	for _, s := range secrets {
		if bytes.Contains(cmdline, s) {
			t.Errorf("the mount process's arguments hold a credential (%.4s…)", s)
		}
	}
	if !bytes.Contains(cmdline, []byte("\x00--credentials-fd\x003")) {
		t.Errorf("the mount process was not given --credentials-fd 3: %q", cmdline)
	}
	procs := allMountProcesses(t, td.stateDir) // the supervisor and the mount process it runs
	if len(procs) < 2 {
		t.Errorf("%d cachefs processes, want a supervisor and its mount process", len(procs))
	}
	for _, pid := range procs {
		if cmdline, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "cmdline")); err == nil {
			for _, s := range secrets {
				if bytes.Contains(cmdline, s) {
					t.Errorf("the arguments of %d hold a credential (%.4s…)", pid, s)
				}
			}
		}
		environ, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(environ, []byte("PATH=")) {
			t.Fatalf("environ of %d holds no PATH: the check proves nothing", pid)
		}
		for _, s := range secrets {
			if bytes.Contains(environ, s) {
				t.Errorf("/proc/%d/environ holds a credential (%.4s…)", pid, s)
			}
		}
		if bytes.Contains(environ, []byte("AWS_ACCESS_KEY_ID=")) || bytes.Contains(environ, []byte("AWS_SECRET_ACCESS_KEY=")) {
			t.Errorf("/proc/%d/environ sets AWS credential variables", pid)
		}
		for _, k := range ambientIdentity {
			if bytes.Contains(environ, []byte(k+"=")) {
				t.Errorf("/proc/%d/environ holds the node's %s", pid, k)
			}
		}
	}
	if strings.Contains(logs.String(), mi.SecretKey) {
		t.Error("the driver's log holds the secret key")
	}
	if !strings.Contains(logs.String(), "NodeStageVolume") {
		t.Error("the driver did not log the call at all: the grep proves nothing")
	}
	envFiles := 0
	err = filepath.Walk(td.stateDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || strings.Contains(p, "/node/mnt/") {
			return nil
		}
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return nil
		}
		if strings.HasSuffix(p, ".env") {
			envFiles++
			if fi.Mode().Perm() != 0o600 || filepath.Dir(p) != filepath.Join(td.stateDir, "node", "secrets") {
				t.Errorf("secrets file %s has mode %v, want 0600 in node/secrets", p, fi.Mode().Perm())
			}
			return nil
		}
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				t.Errorf("%s holds a credential (%.4s…)", p, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if envFiles != 1 {
		t.Errorf("%d secrets files, want 1", envFiles)
	}
	unstage(t, td, "vol-s", staging)
	if m, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "secrets", "*")); len(m) != 0 {
		t.Errorf("secrets files left after the last unstage: %v", m)
	}
}

// checkSecretsTmpfs fails unless <stateDir>/node/secrets is exactly one
// tmpfs, mode 0700, nosuid, nodev, noexec.
func checkSecretsTmpfs(t *testing.T, stateDir string) {
	t.Helper()
	dir := filepath.Join(stateDir, "node", "secrets")
	found, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != dir, false })
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].FSType != "tmpfs" {
		t.Fatalf("mounts on %s: %+v, want one tmpfs", dir, found)
	}
	opts := found[0].Options + "," + found[0].VFSOptions
	for _, o := range []string{"nosuid", "nodev", "noexec", "mode=700"} {
		if !strings.Contains(opts, o) {
			t.Errorf("the secrets tmpfs is mounted without %s: %s", o, opts)
		}
	}
	if st, err := os.Stat(dir); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("secrets dir has mode %v, want 0700", st.Mode().Perm())
	}
}

// TestSecretsAtRestAcrossRestarts, with the driver as its own process: the
// secrets dir is a tmpfs after the driver starts, and the same one after a
// kill -9 and a restart; a secrets file whose stage the kill interrupted
// (no dataset record) is removed by the restarted driver, which still
// restarts nothing and unstages the surviving volume (removing its secrets
// file and log). After a simulated node reboot (mount processes and the
// tmpfs gone) a volume whose credentials are lost fails to stage again
// with a clear error, and no mount process starts, though the driver's
// own environment holds credentials that would read the bucket and it
// lends them (--allow-node-credentials).
func TestSecretsAtRestAcrossRestarts(t *testing.T) {
	testenv.RequireFUSE(t)
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "rest")
	files := datagen.Spec{Files: 6, Classes: 2, MedianSize: 2000, MinSize: 100, MaxSize: 8000, Seed: 5}.Plan()
	mi.PutFiles(t, "rest", "ds/", files)
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}
	// A server that accepts and never answers: a stage that hangs.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	secretsDir := filepath.Join(stateDir, "node", "secrets")
	work := filepath.Join(dir, "kubelet", "pod")
	staging, stagingHang := filepath.Join(work, "staging"), filepath.Join(work, "staging-hang")
	if err := os.MkdirAll(work, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range mountProcesses(t, stateDir) { // the hanging mount, if it is still there
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, m := range append(mountsUnder(t, work), mountsUnder(t, dir)...) {
			t.Errorf("left mounted: %s", m)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	// The node's own credentials would read the bucket: a fallback to
	// them after the credentials are lost would go unnoticed by a read.
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	flags := []string{"--allow-node-credentials", "--health-interval", "100ms", "--mount-timeout", "20s",
		// Both servers are on loopback: the rules name them.
		"--network-rules", "s3://rest?endpoint=" + mi.Endpoint + ",s3://hang?endpoint=http://" + hang.Addr().String()}

	p1 := runDriverProcess(t, dir, "all", flags...)
	checkSecretsTmpfs(t, stateDir)
	stageS3(t, p1.td, "vol-a", staging, "s3://rest/ds?endpoint="+mi.Endpoint, secrets)
	read := view(t, p1.td, "vol-a", staging)
	checkFiles(t, read, files)
	live, _ := filepath.Glob(filepath.Join(secretsDir, "*.env"))
	if len(live) != 1 {
		t.Fatalf("secrets files: %v, want 1", live)
	}
	pids := mountProcesses(t, stateDir)
	// A stage that hangs, interrupted by the kill: its secrets file is
	// written, its dataset never recorded.
	go func() {
		_, _ = node(p1.td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: "vol-hang", StagingTargetPath: stagingHang, VolumeCapability: readerCap, Secrets: secrets,
			VolumeContext: map[string]string{"source": "s3://hang/ds?endpoint=http://" + hang.Addr().String(), "cacheSize": "16Mi"},
		})
	}()
	waitFor(t, 20*time.Second, "the hanging stage's secrets file", func() bool {
		m, _ := filepath.Glob(filepath.Join(secretsDir, "*.env"))
		return len(m) == 2
	})
	p1.kill9(t)
	checkSecretsTmpfs(t, stateDir)
	checkFiles(t, read, files)

	p2 := runDriverProcess(t, dir, "all", flags...)
	checkSecretsTmpfs(t, stateDir) // re-used, not stacked
	if !strings.Contains(p2.log.String(), "re-using the tmpfs") {
		t.Errorf("the restarted driver did not say it re-used the tmpfs:\n%s", p2.log)
	}
	if m, _ := filepath.Glob(filepath.Join(secretsDir, "*")); len(m) != 1 || m[0] != live[0] {
		t.Errorf("secrets files after the restart: %v, want only %v", m, live)
	}
	if now := mountProcesses(t, stateDir); !containsAll(now, pids) {
		t.Errorf("mount processes after the restart: %v, want %v among them", now, pids)
	}
	checkFiles(t, read, files)

	// A node reboot: the mount processes, the mounts and the tmpfs go; the
	// state dir stays.
	p2.kill9(t)
	for _, pid := range mountProcesses(t, stateDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitFor(t, 10*time.Second, "the mount processes to exit", func() bool { return len(mountProcesses(t, stateDir)) == 0 })
	for _, m := range append(mountsUnder(t, work), mountsUnder(t, filepath.Join(stateDir, "node", "mnt"))...) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	unmountSecretsTmpfs(stateDir)
	p3 := runDriverProcess(t, dir, "all", flags...)
	checkSecretsTmpfs(t, stateDir)
	// The health check cannot repair the dataset: its credentials are
	// gone, and it never falls back to the node's own.
	waitFor(t, 10*time.Second, "the health check to say the credentials are gone", func() bool {
		return strings.Contains(p3.log.String(), "credentials are gone")
	})
	if now := mountProcesses(t, stateDir); len(now) != 0 {
		t.Errorf("mount processes %v started without the volume's credentials", now)
	}
	// Kubelet stages the volume again after the reboot, with its secret:
	// that brings the credentials back, and the dataset mount with them.
	stageS3(t, p3.td, "vol-a", staging, "s3://rest/ds?endpoint="+mi.Endpoint, secrets)
	publish(t, p3.td, "vol-a", staging, read, nil)
	checkFiles(t, read, files)
	if m, _ := filepath.Glob(filepath.Join(secretsDir, "*.env")); len(m) != 1 {
		t.Errorf("secrets files after the restage: %v, want 1", m)
	}
	unpublish(t, p3.td, "vol-a", read)
	unstage(t, p3.td, "vol-a", staging)
	if m, _ := filepath.Glob(filepath.Join(secretsDir, "*")); len(m) != 0 {
		t.Errorf("secrets files after the unstage: %v", m)
	}
	waitFor(t, 10*time.Second, "the mount logs to be removed", func() bool {
		m, _ := filepath.Glob(filepath.Join(stateDir, "node", "logs", "*"))
		return len(m) == 0
	})
}

// stageS3 stages an S3 volume with secrets.
func stageS3(t *testing.T, td *testDriver, id, staging, source string, secrets map[string]string) {
	t.Helper()
	if _, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: readerCap, Secrets: secrets,
		VolumeContext: map[string]string{"source": source, "cacheSize": "16Mi"},
	}); err != nil {
		t.Fatalf("stage %s: %v", id, err)
	}
}

func containsAll(have, want []int) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
