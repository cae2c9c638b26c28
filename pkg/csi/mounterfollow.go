package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// The node plugin's side of a mounter RollingUpdate (mountergen.go): it
// polls the mounter at the socket, and moves every mount whose supervisor
// is not that mounter's child to it by a graceful takeover (`cachefs mount
// --supervise --takeover`, launched through it): the old supervisor exits
// 0 once its mount process has handed over, which is no death.

// takeoverBackoff is how long a dataset whose takeover failed is left
// alone (its old mount serves on meanwhile).
const takeoverBackoff = 30 * time.Second

// info asks the mounter who it is.
func (m *mounterLauncher) info(ctx context.Context) (mounterInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mounter/v1/info", nil)
	if err != nil {
		return mounterInfo{}, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return mounterInfo{}, err
	}
	defer resp.Body.Close()
	var out mounterInfo
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("csi: mounter info: %s", resp.Status) // an older mounter
	}
	err = json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 4096)).Decode(&out)
	return out, err
}

// followMounter moves mounts to the current mounter every interval until
// ctx ends.
func (n *nodeState) followMounter(ctx context.Context, m *mounterLauncher, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failed := map[string]time.Time{}
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := m.info(qctx)
		cancel()
		if err != nil {
			continue // away, or an older mounter without generations
		}
		if !processAlive(info.PID, info.StartTicks) {
			if !warned {
				n.cfg.log.Warn("the mounter's pid is not this node plugin's to see (hostPID?); mounts do not follow mounter generations", "pid", info.PID)
				warned = true
			}
			continue
		}
		for _, key := range n.datasetKeys() {
			if time.Since(failed[key]) < takeoverBackoff {
				continue
			}
			if err := n.follow(key, info); err != nil {
				failed[key] = time.Now()
				n.cfg.log.Warn("dataset mount not moved to the new mounter; its mount serves on", "key", key, "err", err)
			}
		}
	}
}

// follow moves the dataset with key to the mounter info, unless it is
// its child already (or busy: the next round sees it).
func (n *nodeState) follow(key string, info mounterInfo) error {
	unlock, ok := n.dsLocks.tryLock(key)
	if !ok {
		return nil
	}
	defer unlock()
	ds := n.dataset(key)
	if ds == nil || len(ds.Users) == 0 || !processAlive(ds.PID, ds.StartTicks) || parentPID(ds.PID) == info.PID {
		return nil
	}
	return n.moveTo(ds)
}

// moveTo launches a supervised mount of ds taking over its connection and
// waits until it serves; ds.PID is then its supervisor. Called with ds's
// lock held.
func (n *nodeState) moveTo(ds *datasetMount) error {
	creds, err := n.relaunchCredentials(ds)
	if err != nil {
		return err
	}
	opts := n.commandOptions(ds)
	opts.Takeover = mountapi.HandoverSocket(ds.CacheDir)
	logStart := n.logSize(ds.Key)
	began := time.Now()
	pid, err := n.cfg.launcher.launch(opts.Args(), creds, n.logPath(ds.Key))
	if err != nil {
		return err
	}
	old := *ds
	ds.PID = pid
	ds.StartTicks, _ = startTicks(pid)
	h := n.holds.get(ds.Key)
	if err := n.waitServing(ds, h, old.PID, logStart); err != nil {
		if processAlive(ds.PID, ds.StartTicks) {
			_ = syscall.Kill(ds.PID, syscall.SIGTERM) // not serving: its child never took the connection
		}
		ds.PID, ds.StartTicks = old.PID, old.StartTicks
		return err
	}
	if err := n.saveDataset(ds); err != nil {
		return err
	}
	n.takeovers.Add(1)
	if h != nil {
		n.watch(ds, h)
	}
	n.cfg.log.Info("dataset mount moved to the current mounter", "key", ds.Key, "from", old.PID, "to", ds.PID, "took", time.Since(began).Round(time.Millisecond).String())
	return nil
}
