package csi_test

import (
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// TestVolumeStatsDuringUnpublish calls NodeGetVolumeStats while other
// targets of the volume are published and unpublished: under -race, a
// handler that reads the volume's fields after unlocking is a data race.
func TestVolumeStatsDuringUnpublish(t *testing.T) {
	td := startDriver(t, nil)
	data, _ := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	vctx := map[string]string{"source": data, "cacheSize": "64MiB"}
	stage(t, td, "vol-s", staging, vctx)
	target := filepath.Join(work, "pod", "vol")
	publish(t, td, "vol-s", staging, target, vctx)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-s", VolumePath: target}); err != nil {
				t.Errorf("stats: %v", err)
				return
			}
		}
	}()
	for i := 0; i < 15; i++ {
		other := filepath.Join(work, "pod-"+itoa(i), "vol")
		publish(t, td, "vol-s", staging, other, vctx)
		unpublish(t, td, "vol-s", other)
	}
	close(done)
	wg.Wait()
	unpublish(t, td, "vol-s", target)
	unstage(t, td, "vol-s", staging)
}
