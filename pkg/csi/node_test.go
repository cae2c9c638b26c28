package csi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/fusectl"
)

var (
	readerCap = &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
	}
	ctx = context.Background()
)

// dataset writes a small image-like dataset and returns its dir and files.
func dataset(t *testing.T) (string, []datagen.File) {
	t.Helper()
	dir := t.TempDir()
	files, err := datagen.Write(dir, datagen.Spec{Files: 40, Classes: 4, MedianSize: 20_000, MinSize: 100, MaxSize: 200_000, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	return dir, files
}

// checkFiles reads every file under root and compares it with the dataset.
func checkFiles(t *testing.T, root string, files []datagen.File) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f.Path))
		if err != nil {
			t.Fatalf("read %s: %v", f.Path, err)
		}
		if sha256.Sum256(b) != datagen.Sum(f) {
			t.Fatalf("%s under %s: wrong bytes", f.Path, root)
		}
	}
}

func stage(t *testing.T, td *testDriver, id, staging string, vctx map[string]string) {
	t.Helper()
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
	})
	if err != nil {
		t.Fatalf("stage %s: %v", id, err)
	}
}

func publish(t *testing.T, td *testDriver, id, staging, target string, vctx map[string]string) {
	t.Helper()
	_, err := node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: readerCap, Readonly: true, VolumeContext: vctx,
	})
	if err != nil {
		t.Fatalf("publish %s at %s: %v", id, target, err)
	}
}

func unpublish(t *testing.T, td *testDriver, id, target string) {
	t.Helper()
	if _, err := node(td).NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("unpublish %s: %v", target, err)
	}
}

func unstage(t *testing.T, td *testDriver, id, staging string) {
	t.Helper()
	if _, err := node(td).NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage %s: %v", id, err)
	}
}

// mountProcesses returns the pids of the mount supervisors (`cachefs mount
// … --supervise`, one per dataset mount: what the driver launches) whose
// command line mentions dir (the test's state dir). allMountProcesses
// adds the mount processes they run.
func mountProcesses(t *testing.T, dir string) []int { return testenv.MountSupervisors(t, dir) }

func allMountProcesses(t *testing.T, dir string) []int { return testenv.MountProcesses(t, dir) }

// mountCmdline returns the arguments (NUL-separated) of the driver's one
// mount process.
func mountCmdline(t *testing.T, td *testDriver) []byte {
	t.Helper()
	pids := mountProcesses(t, td.stateDir)
	if len(pids) != 1 {
		t.Fatalf("%d mount processes, want 1", len(pids))
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", itoa(pids[0]), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	return cmdline
}

// TestStageOncePublishTwice is what kubelet does for two pods on one node:
// one FUSE process, two read-only bind mounts with the same bytes.
func TestStageOncePublishTwice(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	t1, t2 := filepath.Join(work, "pod1", "vol"), filepath.Join(work, "pod2", "vol")
	vctx := map[string]string{"source": data, "cacheSize": "100MiB"}

	stage(t, td, "vol-1", staging, vctx)
	stage(t, td, "vol-1", staging, vctx) // idempotent
	publish(t, td, "vol-1", staging, t1, vctx)
	publish(t, td, "vol-1", staging, t2, vctx)
	publish(t, td, "vol-1", staging, t2, vctx) // idempotent
	checkFiles(t, t1, files)
	checkFiles(t, t2, files)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 1 {
		t.Errorf("%d cachefs processes, want 1", len(pids))
	}
	if _, err := os.Create(filepath.Join(t1, "new")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create in a published volume: %v, want EROFS", err)
	}

	st, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: t2})
	if err != nil {
		t.Fatal(err)
	}
	if u := st.GetUsage()[0]; u.Total != 100<<20 || u.Used <= 0 || u.Used != datagen.TotalSize(files) {
		t.Errorf("stats: total %d used %d, want 100MiB and %d (every file cached)", u.Total, u.Used, datagen.TotalSize(files))
	}

	unpublish(t, td, "vol-1", t1)
	if _, err := os.Stat(t1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target %s still exists after unpublish: %v", t1, err)
	}
	checkFiles(t, t2, files) // the other pod still reads
	unpublish(t, td, "vol-1", t2)
	unpublish(t, td, "vol-1", t2) // idempotent
	unstage(t, td, "vol-1", staging)
	unstage(t, td, "vol-1", staging) // idempotent
	if pids := mountProcesses(t, td.stateDir); len(pids) != 0 {
		t.Errorf("cachefs processes %v still run after unstage", pids)
	}
	if m := mountsUnder(t, work); len(m) != 0 {
		t.Errorf("still mounted: %v", m)
	}
}

// TestPathsWithSpaces: a state dir (so the dataset's FUSE mount point),
// staging path and target with spaces in their names are found mounted
// (mountinfo escapes them) and unmounted.
func TestPathsWithSpaces(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state dir")
	work := filepath.Join(t.TempDir(), "kubelet dir")
	td := startDriver(t, func(c *cfgT) { c.StateDir, c.KubeletDir = stateDir, work })
	data, files := dataset(t)
	staging, target := filepath.Join(work, "staging path"), filepath.Join(work, "pod 1", "vol")
	vctx := map[string]string{"source": data, "cacheSize": "100MiB"}

	stage(t, td, "vol-1", staging, vctx)
	stage(t, td, "vol-1", staging, vctx) // idempotent: found mounted
	publish(t, td, "vol-1", staging, target, vctx)
	checkFiles(t, target, files)
	if _, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target}); err != nil {
		t.Errorf("stats of a target with a space: %v", err)
	}
	if pids := mountProcesses(t, stateDir); len(pids) != 1 {
		t.Errorf("%d cachefs processes, want 1", len(pids))
	}
	unpublish(t, td, "vol-1", target)
	unstage(t, td, "vol-1", staging)
	if m := append(mountsUnder(t, work), mountsUnder(t, stateDir)...); len(m) != 0 {
		t.Errorf("still mounted: %q", m)
	}
}

// TestTwoVolumesOneDataset: two volumes with the same parameters share one
// mount process and one cache, which lives until the last is unstaged.
func TestTwoVolumesOneDataset(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	vctx := map[string]string{"source": data, "cacheSize": "100MiB"}
	s1, s2 := filepath.Join(work, "s1"), filepath.Join(work, "s2")
	stage(t, td, "vol-a", s1, vctx)
	stage(t, td, "vol-b", s2, vctx)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 1 {
		t.Fatalf("%d cachefs processes for two volumes of one dataset, want 1", len(pids))
	}
	if st := td.driver.NodeStats(); st.DatasetMounts != 1 || st.Volumes != 2 {
		t.Errorf("NodeStats %+v, want 1 dataset mount and 2 volumes", st)
	}
	unstage(t, td, "vol-a", s1)
	checkFiles(t, view(t, td, "vol-b", s2), files)
	unstage(t, td, "vol-b", s2)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 0 {
		t.Errorf("cachefs processes %v still run", pids)
	}
}

// TestInlineEphemeral: no stage call; publish mounts (a network source with
// the pod's own secrets, as inline volumes must be), unpublish cleans up.
func TestInlineEphemeral(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "inline")
	files := datagen.Spec{Files: 20, Classes: 3, MedianSize: 5000, MinSize: 100, MaxSize: 50000, Seed: 4}.Plan()
	mi.PutFiles(t, "inline", "ds/", files)
	td := startDriver(t, func(c *cfgT) { c.NetworkRules = []string{"s3://inline?endpoint=" + mi.Endpoint} }) // MinIO is on loopback
	target := filepath.Join(td.workDir(t), "pod", "vol")
	vctx := map[string]string{"source": "s3://inline/ds?endpoint=" + mi.Endpoint, "cacheSize": "64MiB", "csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": "p"}
	capSNW := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	_, err := node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: "csi-abc123", TargetPath: target, VolumeCapability: capSNW, Readonly: true, VolumeContext: vctx,
		Secrets: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, target, files)
	unpublish(t, td, "csi-abc123", target)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 0 {
		t.Errorf("cachefs processes %v still run after the inline volume's unpublish", pids)
	}
}

// TestDeadMountRepaired kills the mount process: the health check restarts
// it and re-binds the targets; a publish repairs it too.
func TestDeadMountRepaired(t *testing.T) {
	for _, via := range []string{"health check", "publish"} {
		t.Run(via, func(t *testing.T) {
			interval := time.Duration(0)
			if via == "health check" {
				interval = 100 * time.Millisecond
			}
			td := startDriver(t, func(c *cfgT) { c.HealthInterval = interval })
			data, files := dataset(t)
			work := td.workDir(t)
			staging, t1, t2 := filepath.Join(work, "staging"), filepath.Join(work, "t1"), filepath.Join(work, "t2")
			vctx := map[string]string{"source": data, "cacheSize": "64MiB"}
			stage(t, td, "vol-r", staging, vctx)
			publish(t, td, "vol-r", staging, t1, vctx)
			checkFiles(t, t1, files)

			pids := mountProcesses(t, td.stateDir)
			if len(pids) != 1 {
				t.Fatalf("%d mount processes, want 1", len(pids))
			}
			// A dead mount despite its holders (the supervisor and the
			// node plugin each hold the connection, so killing processes
			// only stalls it): the connection itself aborted, as when
			// both holders died; then the supervisor's session killed.
			var st syscall.Stat_t
			if err := syscall.Stat(t1, &st); err != nil {
				t.Fatal(err)
			}
			if err := fusectl.Abort(unix.Minor(st.Dev)); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(-pids[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if via == "publish" {
				waitFor(t, 5*time.Second, "the mount to die", func() bool {
					_, err := os.ReadFile(filepath.Join(t1, files[1].Path))
					return errors.Is(err, syscall.ENOTCONN)
				})
				publish(t, td, "vol-r", staging, t2, vctx)
				checkFiles(t, t2, files)
			}
			waitFor(t, 15*time.Second, "the mount to be repaired", func() bool {
				p := mountProcesses(t, td.stateDir)
				_, err := os.ReadFile(filepath.Join(t1, files[1].Path))
				return err == nil && len(p) == 1 && p[0] != pids[0]
			})
			checkFiles(t, t1, files)
			if m := mountsUnder(t, staging); len(m) != 0 {
				t.Errorf("the repair mounted the staging path: %v", m)
			}
			if via == "publish" {
				unpublish(t, td, "vol-r", t2)
			}
			unpublish(t, td, "vol-r", t1)
			unstage(t, td, "vol-r", staging)
		})
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBadInput: each bad request is a clear gRPC error, mounts nothing and
// starts nothing.
func TestBadInput(t *testing.T) {
	td := startDriver(t, nil)
	data, _ := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{"source": data, "cacheSize": "64MiB"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	modeCap := func(m csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
		return &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}, AccessMode: &csipb.VolumeCapability_AccessMode{Mode: m}}
	}
	blockCap := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}, AccessMode: readerCap.AccessMode}

	stageCases := []struct {
		name    string
		req     *csipb.NodeStageVolumeRequest
		code    codes.Code
		message string
	}{
		{"no volume id", &csipb.NodeStageVolumeRequest{StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "volume id is required"},
		{"volume id with slash", &csipb.NodeStageVolumeRequest{VolumeId: "a/b", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "only letters, digits"},
		{"volume id dot-dot", &csipb.NodeStageVolumeRequest{VolumeId: "..", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "must not start with '.'"},
		{"volume id too long", &csipb.NodeStageVolumeRequest{VolumeId: strings.Repeat("x", 129), StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "over the 128-byte limit"},
		{"no staging path", &csipb.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "staging target path is required"},
		{"relative staging path", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "rel/path", VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "must be absolute"},
		{"staging path with dot-dot", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging + "/../x", VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "without '..'"},
		{"no capability", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeContext: good}, codes.InvalidArgument, "volume capability is required"},
		{"block", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: blockCap, VolumeContext: good}, codes.InvalidArgument, "block access is not supported"},
		{"multi-node writer", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: modeCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), VolumeContext: good}, codes.InvalidArgument, "is a writer mode"},
		{"multi-node single writer", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: modeCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER), VolumeContext: good}, codes.InvalidArgument, "is a writer mode"},
		{"no source", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("source", "")}, codes.InvalidArgument, `parameter "source" is required`},
		{"bad source URL", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("source", "s3:///prefix")}, codes.InvalidArgument, "bucket"},
		{"relative source", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("source", "data/x")}, codes.InvalidArgument, `parameter "source"`},
		{"unknown parameter", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("cachesize", "1Gi")}, codes.InvalidArgument, `unknown parameters ["cachesize"]`},
		{"bad cache size", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("cacheSize", "lots")}, codes.InvalidArgument, `parameter "cacheSize"`},
		{"bad policy", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("policy", "mru")}, codes.InvalidArgument, `"mru" is not a cache policy of EpochFS (the only one is "nr")`},
		{"bad readaheadFiles", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("readaheadFiles", "many")}, codes.InvalidArgument, `parameter "readaheadFiles": "many" is neither "auto" nor a number of files from 0 to 256`},
		{"negative readaheadFiles", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("readaheadFiles", "-1")}, codes.InvalidArgument, `parameter "readaheadFiles"`},
		{"huge readaheadFiles", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("readaheadFiles", "100000")}, codes.InvalidArgument, `parameter "readaheadFiles"`},
		{"unknown secret", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good, Secrets: map[string]string{"password": "hunter2"}}, codes.InvalidArgument, `unknown secret keys ["password"]`},
		{"missing source dir", &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: with("source", filepath.Join(data, "nope"))}, codes.NotFound, "no such file or directory"},
	}
	for _, tc := range stageCases {
		t.Run("stage/"+tc.name, func(t *testing.T) {
			_, err := node(td).NodeStageVolume(ctx, tc.req)
			expectCode(t, err, tc.code, tc.message)
			if strings.Contains(status.Convert(err).Message(), "hunter2") {
				t.Error("the error repeats a secret value")
			}
			if m := mountsUnder(t, work); len(m) != 0 {
				t.Errorf("mounted after a bad request: %v", m)
			}
			if m := mountsUnder(t, td.stateDir); len(m) != 0 {
				t.Errorf("mounted after a bad request: %v", m)
			}
			if pids := mountProcesses(t, td.stateDir); len(pids) != 0 {
				t.Errorf("mount processes left: %v", pids)
			}
		})
	}

	publishCases := []struct {
		name    string
		req     *csipb.NodePublishVolumeRequest
		code    codes.Code
		message string
	}{
		{"relative target", &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: "pods/x", VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "target path \"pods/x\" must be absolute"},
		{"no target", &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "target path is required"},
		{"no staging path", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: filepath.Join(work, "t"), VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "staging target path is required"},
		{"not staged", &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: filepath.Join(work, "t"), VolumeCapability: readerCap, VolumeContext: good}, codes.FailedPrecondition, "is not staged"},
		{"target with dot-dot", &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: work + "/../../etc", VolumeCapability: readerCap, VolumeContext: good}, codes.InvalidArgument, "without '..'"},
	}
	for _, tc := range publishCases {
		t.Run("publish/"+tc.name, func(t *testing.T) {
			_, err := node(td).NodePublishVolume(ctx, tc.req)
			expectCode(t, err, tc.code, tc.message)
			if m := mountsUnder(t, work); len(m) != 0 {
				t.Errorf("mounted after a bad request: %v", m)
			}
		})
	}

	createCases := []struct {
		name    string
		req     *csipb.CreateVolumeRequest
		code    codes.Code
		message string
	}{
		{"no name", &csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: good}, codes.InvalidArgument, "volume name is required"},
		{"writer mode", &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{modeCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, Parameters: good}, codes.InvalidArgument, "EpochFS volumes are read-only datasets"},
		{"bad source", &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: with("source", "s3://bucket/x?foo=bar")}, codes.InvalidArgument, "foo"},
		{"unknown parameter", &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: with("size", "1")}, codes.InvalidArgument, `unknown parameters ["size"]`},
	}
	for _, tc := range createCases {
		t.Run("create/"+tc.name, func(t *testing.T) {
			_, err := controller(td).CreateVolume(ctx, tc.req)
			expectCode(t, err, tc.code, tc.message)
		})
	}
}

func expectCode(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), substr) {
		t.Fatalf("got %v, want %s containing %q", err, code, substr)
	}
}

// TestReadaheadFilesParameter: readaheadFiles reaches the mount process as
// --readahead-files (it reads ahead: a first epoch opens fewer misses than
// files), and a volume without it keeps its own mount (the dataset key
// differs only when the parameter is set).
func TestReadaheadFilesParameter(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	staging := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-ra", staging, map[string]string{"source": data, "cacheSize": "1GiB", "readaheadFiles": "4"})
	target := view(t, td, "vol-ra", staging)
	cmdline := mountCmdline(t, td)
	if !bytes.Contains(cmdline, []byte("\x00--readahead-files\x004\x00")) {
		t.Errorf("mount arguments %q lack --readahead-files 4", strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	checkFiles(t, target, files)

	plain := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-plain", plain, map[string]string{"source": data, "cacheSize": "1GiB"})
	if n := len(mountProcesses(t, td.stateDir)); n != 2 {
		t.Errorf("%d mount processes for a volume with readaheadFiles and one without, want 2", n)
	}
	// "auto" is the default: the plain volume's mount. "0" (off) is not
	// the default any more: a mount of its own, told so.
	auto := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-auto", auto, map[string]string{"source": data, "cacheSize": "1GiB", "readaheadFiles": "auto"})
	off := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-off", off, map[string]string{"source": data, "cacheSize": "1GiB", "readaheadFiles": "0"})
	flags := map[string]int{}
	for _, pid := range mountProcesses(t, td.stateDir) {
		cmdline, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "cmdline"))
		if err != nil {
			t.Fatal(err)
		}
		_, v, ok := bytes.Cut(cmdline, []byte("\x00--readahead-files\x00"))
		if !ok {
			flags["none"]++
			continue
		}
		v, _, _ = bytes.Cut(v, []byte{0})
		flags[string(v)]++
	}
	if want := map[string]int{"4": 1, "none": 1, "0": 1}; !maps.Equal(flags, want) {
		t.Errorf("mount processes by --readahead-files: %v, want %v (auto shares the plain volume's)", flags, want)
	}
	unstage(t, td, "vol-off", off)
	unstage(t, td, "vol-auto", auto)
	unstage(t, td, "vol-plain", plain)
	unstage(t, td, "vol-ra", staging)
}

// TestPrefetchParameter: a volume with prefetch=true has its cache filled in
// the background right after staging, without any reader.
func TestPrefetchParameter(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	staging := filepath.Join(td.workDir(t), "staging")
	stage(t, td, "vol-p", staging, map[string]string{"source": data, "cacheSize": "1GiB", "prefetch": "true"})
	target := view(t, td, "vol-p", staging)
	want := datagen.TotalSize(files)
	waitFor(t, 30*time.Second, "the prefetch to cache the whole dataset", func() bool {
		caches, _ := filepath.Glob(filepath.Join(td.cacheDir, "ds-*"))
		if len(caches) != 1 {
			return false
		}
		info, err := cache.ReadInfo(caches[0])
		return err == nil && info.UsedBytes == want
	})
	checkFiles(t, target, files)
	unstage(t, td, "vol-p", staging)

	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "vol-q", StagingTargetPath: staging,
		VolumeCapability: readerCap, VolumeContext: map[string]string{"source": data, "prefetch": "yes please"}})
	expectCode(t, err, codes.InvalidArgument, `parameter "prefetch"`)
}

// view publishes staged volume id at a new target next to its staging path
// and returns the target: the way to read a staged volume (nothing is
// mounted at the staging path itself).
func view(t *testing.T, td *testDriver, id, staging string) string {
	t.Helper()
	target := staging + ".view"
	publish(t, td, id, staging, target, nil)
	return target
}

// TestKubeletUnmountDeviceCheck: kubelet unstages a volume only when its
// GetDeviceMountRefs check (k8s.io/mount-utils GetMountRefs on the staging
// path, then HasMountRefs) finds no other mount of the device. Two volumes
// of one dataset share its mount process; once the first one's pod is gone
// its staging path has no references, so kubelet unstages it, the second
// keeps reading, and after the second's unstage the process is gone.
func TestKubeletUnmountDeviceCheck(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	vctx := map[string]string{"source": data, "cacheSize": "100MiB"}
	s1, s2 := filepath.Join(work, "globalmount-1"), filepath.Join(work, "globalmount-2")
	t1, t2 := filepath.Join(work, "pod1", "mount"), filepath.Join(work, "pod2", "mount")
	stage(t, td, "vol-1", s1, vctx)
	stage(t, td, "vol-2", s2, vctx)
	publish(t, td, "vol-1", s1, t1, vctx)
	publish(t, td, "vol-2", s2, t2, vctx)
	checkFiles(t, t1, files)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 1 {
		t.Fatalf("%d cachefs processes for one dataset, want 1", len(pids))
	}
	unpublish(t, td, "vol-1", t1)

	// kubelet's UnmountDevice check, as in its operation generator.
	refs, err := mountutils.New("").GetMountRefs(s1)
	if err != nil {
		t.Fatalf("GetMountRefs(%s): %v", s1, err)
	}
	if hasMountRefs(s1, refs) {
		t.Fatalf("kubelet would refuse UnmountDevice: %s is still mounted by other references %v", s1, refs)
	}
	unstage(t, td, "vol-1", s1)
	checkFiles(t, t2, files) // the other pod still reads
	unpublish(t, td, "vol-2", t2)
	refs, err = mountutils.New("").GetMountRefs(s2)
	if err != nil || hasMountRefs(s2, refs) {
		t.Fatalf("GetMountRefs(%s) = %v, %v: kubelet would refuse UnmountDevice", s2, refs, err)
	}
	unstage(t, td, "vol-2", s2)
	if pids := mountProcesses(t, td.stateDir); len(pids) != 0 {
		t.Errorf("cachefs processes %v still run after the last unstage", pids)
	}
	if m := mountsUnder(t, work); len(m) != 0 {
		t.Errorf("still mounted: %v", m)
	}
}

// hasMountRefs is kubelet's util.HasMountRefs (k8s.io/kubernetes
// pkg/volume/util, v1.31), copied since k8s.io/kubernetes is not a library:
// a reference counts unless its path contains the mount path's part from
// /plugins/kubernetes.io/ on.
func hasMountRefs(mountPath string, refs []string) bool {
	find := mountPath
	if i := strings.Index(mountPath, "/plugins/kubernetes.io/"); i > -1 {
		find = mountPath[i:]
	}
	for _, r := range refs {
		if !strings.Contains(r, find) {
			return true
		}
	}
	return false
}
