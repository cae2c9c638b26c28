package csi_test

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/csi"
)

// hangingEndpoint accepts TCP connections on 127.0.0.1 and never answers
// (an S3 endpoint behind a black-holing firewall, a wedged proxy). accepted
// is closed at the first connection. Everything stops in t.Cleanup.
func hangingEndpoint(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var (
		once  sync.Once
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(first) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String(), first
}

// TestHangingSourceDelaysOnlyItsVolumes: while one volume's mount waits on a
// source that never answers (up to the mount timeout), other volumes stage,
// publish, report stats, unpublish and unstage at once; another volume of
// the hanging dataset waits for it (its own deadline ends the wait); and
// the hanging stage then fails and leaves nothing behind, not even the
// cache directory it made.
func TestHangingSourceDelaysOnlyItsVolumes(t *testing.T) {
	const mountTimeout = 12 * time.Second
	addr, accepted := hangingEndpoint(t)
	td := startDriver(t, func(c *csi.Config) {
		c.MountTimeout = mountTimeout
		c.NetworkRules = []string{"s3://stuck?endpoint=http://" + addr} // the endpoint is on loopback
	})
	work := td.workDir(t)

	hangCtx := map[string]string{"source": "s3://stuck/ds?endpoint=http://" + addr + "&region=us-east-1", "cacheSize": "16Mi"}
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": "AKIAHANGING", "AWS_SECRET_ACCESS_KEY": "hanging-secret-key"}
	stageHang := func(ctx context.Context, id string) error {
		staging := filepath.Join(work, id)
		_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: id, StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: hangCtx, Secrets: secrets,
		})
		return err
	}
	hangStart := time.Now()
	hangDone := make(chan error, 1)
	go func() { hangDone <- stageHang(context.Background(), "vol-hang") }()
	select {
	case <-accepted:
	case err := <-hangDone:
		t.Fatalf("the stage of the hanging source returned before it reached the source: %v", err)
	case <-time.After(mountTimeout):
		t.Fatal("the mount never connected to the hanging source")
	}

	// Another dataset, while the first one hangs: every call returns at
	// once (a few seconds at most for a mount start on a loaded machine).
	dir, files := dataset(t)
	okCtx := map[string]string{"source": dir, "cacheSize": "16Mi"}
	begin := time.Now()
	staging, target := filepath.Join(work, "ok-staging"), filepath.Join(work, "ok-target")
	stage(t, td, "vol-ok", staging, okCtx)
	publish(t, td, "vol-ok", staging, target, okCtx)
	checkFiles(t, target, files)
	if _, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-ok", VolumePath: target}); err != nil {
		t.Errorf("stats of vol-ok: %v", err)
	}
	if st := td.driver.NodeStats(); st.DatasetMounts != 1 {
		t.Errorf("NodeStats while a mount hangs = %+v, want 1 dataset mount (the live one)", st)
	}
	unpublish(t, td, "vol-ok", target)
	unstage(t, td, "vol-ok", staging)
	took := time.Since(begin)
	select {
	case err := <-hangDone:
		t.Fatalf("the hanging stage returned (%v) before the other volume was done: the test proves nothing; raise mountTimeout", err)
	default:
	}
	t.Logf("stage, publish, read, stats, unpublish, unstage of another dataset: %s, while the hanging one waits", took.Round(time.Millisecond))

	// A second volume of the hanging dataset waits on it, and its own
	// deadline ends the wait.
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := stageHang(short, "vol-hang-2")
	cancel()
	if got := status.Code(err); got != codes.DeadlineExceeded {
		t.Errorf("second volume of the hanging dataset: %v (%v), want DeadlineExceeded", got, err)
	}

	select {
	case err := <-hangDone:
		if err == nil {
			t.Fatal("a stage of a source that never answers succeeded")
		}
		t.Logf("hanging stage failed after %s: %v", time.Since(hangStart).Round(time.Millisecond), status.Convert(err).Message())
	case <-time.After(mountTimeout + 30*time.Second):
		t.Fatal("the hanging stage did not end after the mount timeout")
	}
	nothingLeftBut(t, td, work, 1) // vol-ok's cache is kept for its next stage
}
