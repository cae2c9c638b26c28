package csi

import (
	"context"
	"time"
)

// Repairs of broken dataset mounts, and the health loop that looks for
// them and runs the node's other periodic chores.

// repair restarts a broken dataset mount and re-binds every target that
// uses it. Pods see the new mount through a target only if their
// mount propagation lets it in (HostToContainer); otherwise they need a
// restart. Called with ds's lock held.
func (n *nodeState) repair(ds *datasetMount, why error) error {
	n.cfg.log.Warn("repairing dataset mount", "key", ds.Key, "source", ds.Params.Source, "reason", why.Error())
	if n.recoverHeld(ds) {
		return nil // the same connection serves on: readers stalled, no target changed
	}
	n.repairs.Add(1)
	if processAlive(ds.PID, ds.StartTicks) {
		if err := n.stop(ds); err != nil {
			return err
		}
	}
	if err := n.start(ds); err != nil {
		return err
	}
	if err := n.saveDataset(ds); err != nil {
		return err
	}
	for _, id := range ds.Users {
		v := n.volume(id)
		if v == nil {
			continue
		}
		for _, t := range v.Targets {
			if err := rebind(ds.MountPoint, t); err != nil {
				return err
			}
		}
	}
	n.cfg.log.Info("dataset mount repaired", "key", ds.Key, "pid", ds.PID, "volumes", len(ds.Users))
	return nil
}

func rebind(src, dst string) error {
	if err := unmountAll(dst); err != nil {
		return err
	}
	return bindReadOnly(src, dst)
}

// healthLoop repairs broken dataset mounts every interval until ctx ends.
func (n *nodeState) healthLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n.checkAll()
		n.reportListingRefusals(ctx)
		n.budget.expire(time.Now())
		n.maintainMountLogs()
		if n.cfg.peer != nil {
			n.readvertise(ctx)
		}
		if n.cfg.labeler != nil {
			if err := n.cfg.labeler.sync(ctx, n); err != nil {
				n.cfg.log.Warn("node cache labels not updated", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkAll repairs every broken dataset mount that volumes use. A dataset
// whose lock is held (a start, stop or repair in progress) is left to the
// next round instead of making the loop wait on it.
func (n *nodeState) checkAll() {
	for _, key := range n.datasetKeys() {
		unlock, ok := n.dsLocks.tryLock(key)
		if !ok {
			continue
		}
		if ds := n.dataset(key); ds != nil && len(ds.Users) > 0 {
			if err := n.healthy(ds); err != nil {
				if err := n.repair(ds, err); err != nil {
					n.cfg.log.Error("dataset mount repair failed", "key", ds.Key, "err", err)
				}
			} else if h := n.holds.get(key); h != nil {
				n.refreshHold(ds, h) // the connection's counters
			}
		}
		unlock()
	}
}
