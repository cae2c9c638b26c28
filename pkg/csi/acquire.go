package csi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The dataset mounts' users: a volume acquires its dataset's mount
// (starting, or repairing, it) and releases it; the last user's release
// stops it. Locks: see nodeState.

// acquire is acquireAs for a volume of no namespace (not limited).
func (n *nodeState) acquire(key string, params volumeParams, secrets map[string]string, id string) (*datasetMount, error) {
	return n.acquireAs(key, params, secrets, id, "")
}

// acquireAs returns a live dataset mount with key (n.datasetKey of params
// and secrets) for volume id of namespace ns, starting or repairing it as
// needed; ns is charged for the mount first (nsbudget.go). Called with the
// dataset's lock held, which the start of a new mount may hold up to the
// mount timeout; no other dataset waits on it.
func (n *nodeState) acquireAs(key string, params volumeParams, secrets map[string]string, id, ns string) (ds *datasetMount, err error) {
	if err := n.checkScope(params); err != nil {
		return nil, err
	}
	charged, err := n.budget.charge(ns, key, id, params.CacheSize)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && charged {
			n.budget.discharge(key, id)
		}
	}()
	ds = n.dataset(key)
	if ds == nil {
		if ds, err = n.startNew(key, params, secrets); err != nil {
			return nil, err
		}
	} else if why := n.healthy(ds); why != nil {
		if err := n.restore(ds, secrets, why); err != nil {
			return nil, err
		}
	}
	if err := n.addUser(ds, params, id); err != nil {
		return nil, err
	}
	return ds, nil
}

// startNew starts a new dataset mount with key for params and records it.
// Its secrets file is this volume's: the file of a live dataset is never
// rewritten, since another volume reaches it only with equal credentials
// (they are part of the key). On failure nothing of the mount is left: no
// record, reservation, secrets file, peer port, mount point, nor a cache
// directory this start made. Called with the dataset's lock held.
func (n *nodeState) startNew(key string, params volumeParams, secrets map[string]string) (*datasetMount, error) {
	if err := n.budget.reserve(key, params.CacheSize); err != nil {
		return nil, err
	}
	if err := n.writeSecrets(key, secrets); err != nil {
		n.budget.release(key)
		return nil, status.Error(codes.Internal, err.Error())
	}
	ds := &datasetMount{Key: key, Params: params, MountPoint: n.mountPath(key), CacheDir: filepath.Join(n.cfg.cacheRoot, key)}
	if params.Cluster() {
		if err := n.prepareCluster(ds, secrets); err != nil {
			_ = removeFile(n.secretPath(key))
			n.ports.free(key)
			n.budget.release(key)
			return nil, err
		}
	}
	_, statErr := os.Stat(ds.CacheDir)
	newCache := errors.Is(statErr, os.ErrNotExist)
	if err := n.start(ds); err != nil {
		// No dataset record: nothing else would remove these, and
		// unstage of an unrecorded volume does nothing. A cache
		// directory this start made holds nothing worth keeping.
		_ = removeFile(n.secretPath(key))
		_ = os.Remove(ds.MountPoint) // only if empty and not mounted
		if newCache {
			_ = os.RemoveAll(ds.CacheDir)
		}
		n.leaveCluster(ds)
		n.budget.release(key)
		return nil, mountError(err)
	}
	n.mu.Lock()
	n.datasets[key] = ds
	n.mu.Unlock()
	if ds.PeerGroup != "" {
		n.refreshPeers() // peers that joined while it started
	}
	return ds, nil
}

// restore repairs ds, broken (why), for a volume that brings secrets.
// After a node reboot the tmpfs holding the secrets is empty: a volume
// that stages the dataset again brings them. Equal keys mean equal
// credentials (they are part of the key), so this is never another
// tenant's. Called with ds's lock held.
func (n *nodeState) restore(ds *datasetMount, secrets map[string]string, why error) error {
	if ds.Credentials && len(secrets) > 0 {
		if _, serr := os.Stat(n.secretPath(ds.Key)); errors.Is(serr, os.ErrNotExist) {
			if err := n.writeSecrets(ds.Key, secrets); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
	}
	if err := n.repair(ds, why); err != nil {
		return mountError(err)
	}
	return nil
}

// addUser records volume id as a user of ds, and its prefetch if it asks
// for one, and starts ds's prefetch unless it runs. Called with ds's lock
// held.
func (n *nodeState) addUser(ds *datasetMount, params volumeParams, id string) error {
	if !slices.Contains(ds.Users, id) {
		ds.Users = append(ds.Users, id)
	}
	if params.Prefetch && !ds.Params.Prefetch {
		ds.Params.Prefetch = true
	}
	if err := n.saveDataset(ds); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if ds.Params.Prefetch {
		n.startPrefetch(ds)
	}
	return nil
}

// release drops volume id from its dataset mount and stops the mount when no
// volume uses it. Called with the dataset's lock held.
func (n *nodeState) release(key, id string) error {
	n.budget.discharge(key, id)
	ds := n.dataset(key)
	if ds == nil {
		return nil
	}
	ds.Users = slices.DeleteFunc(ds.Users, func(u string) bool { return u == id })
	if len(ds.Users) > 0 {
		return n.saveDataset(ds)
	}
	n.mu.Lock()
	if run, ok := n.prefetching[key]; ok {
		run.cancel()
		delete(n.prefetching, key)
	}
	n.mu.Unlock()
	if err := n.stop(ds); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.datasets, key)
	n.mu.Unlock()
	n.leaveCluster(ds)
	n.budget.release(key) // its cache stays, idle, for the next stage
	n.removeLog(key)
	_ = removeFile(n.secretPath(key))
	return removeFile(n.datasetPath(key))
}

// dropVolume releases volume v's dataset mount and forgets the volume, in
// memory and in the state dir. Called with v's volume and dataset locks
// held.
func (n *nodeState) dropVolume(v *nodeVolume) error {
	if err := n.release(v.DatasetKey, v.ID); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.volumes, v.ID)
	n.mu.Unlock()
	n.info.drop(v.ID, "")
	return removeFile(n.volumePath(v.ID))
}
