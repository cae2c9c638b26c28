package csi

import (
	"context"
	"errors"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// controlSocketWait bounds how long a prefetch waits for a new mount's
// control socket.
const controlSocketWait = 30 * time.Second

// prefetchRun is one background prefetch.
type prefetchRun struct{ cancel context.CancelFunc }

// startPrefetch fills ds's cache in the background through its mount's
// control socket, unless a prefetch of it already runs. A driver restart
// cancels it; the re-adopting driver starts it again, and it resumes.
// Called with ds's lock held.
func (n *nodeState) startPrefetch(ds *datasetMount) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, running := n.prefetching[ds.Key]; running {
		return
	}
	ctx, cancel := context.WithCancel(n.ctx)
	run := &prefetchRun{cancel: cancel}
	n.prefetching[ds.Key] = run
	key, cacheDir, source := ds.Key, ds.CacheDir, ds.Params.Source
	go func() {
		defer func() {
			n.mu.Lock()
			if n.prefetching[key] == run {
				delete(n.prefetching, key)
			}
			n.mu.Unlock()
			cancel()
		}()
		// A mount serves its control socket a moment after its FUSE mount
		// answers (what start waits for): until then, ask again.
		var sum mountapi.PrefetchSummary
		var err error
		for wait := time.Now().Add(controlSocketWait); ; {
			sum, err = mountapi.RemotePrefetch(ctx, cacheDir, mountapi.ControlRequest{Source: source}, nil)
			if !errors.Is(err, mountapi.ErrNoControl) || time.Now().After(wait) || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			n.cfg.log.Warn("prefetch stopped", "key", key, "source", source, "err", err)
			return
		}
		n.cfg.log.Info("prefetch finished", "key", key, "source", source, "state", sum.State, "message", sum.Message)
	}()
}
