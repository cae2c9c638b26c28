package main_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
)

// TestClusterScopeCapacities: three real mounts whose --peers advertise
// their capacity (C = D/3, then C = D/6) with a manifest own the files
// peer.Assign gives them: after an epoch in which every mount reads every
// file, each cache holds exactly its assigned bytes (within C) and no file
// without an owner is cached anywhere; in the next epoch the backend serves
// only the files without an owner, once per reader — none at C = D/3 but a
// few small files' worth, about D/2 per reader at C = D/6 (the cluster
// cache's goals for epoch ≥ 2 are in make bench-cluster: a distributed sampler
// reads each file once per epoch).
func TestClusterScopeCapacities(t *testing.T) {
	spec := datagen.Spec{Files: 300, Classes: 5, MedianSize: 20_000, MinSize: 1000, MaxSize: 120_000, Seed: 17}
	ce := newClusterEnv(t, spec)
	man, err := manifest.ReadFile(ce.manifest, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	for _, div := range []int64{3, 6} {
		t.Run(fmt.Sprintf("C=D/%d", div), func(t *testing.T) {
			capacity := ce.total / div
			var members []peer.Peer
			var list []string
			for _, id := range ids {
				p := peer.Peer{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), Capacity: capacity}
				members = append(members, p)
				list = append(list, peer.FormatPeer(p))
			}
			a := peer.Assign(members, ce.dataset, man, 0)
			unowned, total := a.Unowned()
			if total != ce.total {
				t.Fatalf("the manifest holds %d bytes, the dataset %d", total, ce.total)
			}
			var mounts []*clusterMount
			for _, p := range members {
				cm := startClusterMount(t, ce.bin, ce.src, capacity, ce.env, mountapi.CommandOptions{Manifest: ce.manifest,
					CacheScope: mountapi.ScopeCluster, Peers: strings.Join(list, ","), PeerListen: p.Addr, PeerID: p.ID,
					PeerTokenFile: ce.tokenFile})
				cm.id, cm.peerAddr = p.ID, p.Addr
				mounts = append(mounts, cm)
			}
			ce.proxy.take()
			runEpochs(t, ce, mounts, 10*uint64(div), nil)
			_, bytes1 := ce.proxy.take()
			for k, cm := range mounts {
				s, _ := testenv.Scrape(t, cm.url())
				used := int64(s["cachefs_cache_used_bytes"])
				owned, bound := a.Load(k)
				if used != owned || owned > capacity || bound != capacity {
					t.Errorf("%s caches %d bytes; assigned %d (bound %d), capacity %d", cm.id, used, owned, bound, capacity)
				}
			}
			runEpochs(t, ce, mounts, 10*uint64(div)+1, nil)
			_, bytes2 := ce.proxy.take()
			t.Logf("D = %d, C = %d: without owner %d bytes (%.2f%% of D); backend bytes epoch 1 %d, epoch 2 %d (%.2f%% of D)",
				ce.total, capacity, unowned, 100*float64(unowned)/float64(ce.total), bytes1, bytes2, 100*float64(bytes2)/float64(ce.total))
			// Epoch 1: each owned file once cluster-wide (its owner's fetch,
			// coalesced with the peers' requests), each unowned one once per
			// reader.
			if want := total - unowned + 3*unowned; bytes1 > want {
				t.Errorf("epoch 1: backend bytes %d, want ≤ %d", bytes1, want)
			}
			if bytes2 > 3*unowned {
				t.Errorf("epoch 2: backend bytes %d, more than the unowned files once per reader (3 × %d)", bytes2, unowned)
			}
			switch div {
			case 3:
				if unowned > ce.total/100 {
					t.Errorf("C = D/3: %d bytes (%.2f%% of D) without owner, want ≤ 1%%", unowned, 100*float64(unowned)/float64(ce.total))
				}
			case 6:
				if want := ce.total / 2; unowned < want || unowned > want+ce.total/50 {
					t.Errorf("C = D/6: %d bytes without owner, want D/2 = %d (+2%%)", unowned, want)
				}
			}
			for _, cm := range mounts {
				cm.kill()
			}
		})
	}
}
