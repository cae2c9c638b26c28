package csi

import (
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestPublishClaim: what epochfs_volume_info takes from a publish context.
func TestPublishClaim(t *testing.T) {
	named := map[string]string{volattr.ClaimName: "imagenet", volattr.ClaimNamespace: "team-a", volattr.PVName: "pv-1"}
	for _, tc := range []struct {
		name   string
		id     string
		vctx   map[string]string
		inline bool
		want   volumeClaim
	}{
		{"all names", "vol-1", named, false, volumeClaim{Namespace: "team-a", Name: "imagenet", PV: "pv-1"}},
		{"static PV without names: the handle", "epochfs-imagenet", nil, false, volumeClaim{PV: "epochfs-imagenet"}},
		{"CreateVolume's id is no PV name", "cfs-0123456789abcdef0123456789abcdef", nil, false, volumeClaim{}},
		{"inline: the pod author's attributes are not read", "csi-abc", named, true, volumeClaim{}},
		{"bad names left out", "Vol_1", map[string]string{volattr.ClaimName: strings.Repeat("x", 254), volattr.ClaimNamespace: "Team-A",
			volattr.PVName: "pv/../x"}, false, volumeClaim{}},
		{"a handle that is no object name", strings.Repeat("h", 254), nil, false, volumeClaim{}},
	} {
		if got := publishClaim(tc.id, tc.vctx, tc.inline); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestVolumeInfoSet: the namespace is the kubelet's pod namespace over a
// PV's claim namespace; drop removes one target or all of a volume's.
func TestVolumeInfoSet(t *testing.T) {
	var vi volumeInfo
	v := &nodeVolume{ID: "v1", Pods: map[string]podRef{"/t1": {Namespace: "team-a", Name: "p1"}, "/t2": {Namespace: "team-a", Name: "p2"}},
		Claim: volumeClaim{Namespace: "team-b", Name: "c", PV: "pv"}}
	ds := &datasetMount{Key: "ds-1", Params: volumeParams{Source: "/data"}}
	vi.set(v, ds, "/t1")
	vi.set(v, ds, "/t2")
	vi.set(&nodeVolume{ID: "v2"}, nil, "/t3")
	if lv := vi.entries[volumeTarget{"v1", "/t1"}]; lv[2] != "team-a" || lv[3] != "c" || lv[4] != "pv" || lv[5] != "p1" || lv[1] != "ds-1" || len(lv[0]) != 16 {
		t.Errorf("v1 at /t1: %q", lv)
	}
	vi.drop("v1", "/t1")
	if len(vi.entries) != 2 {
		t.Errorf("after dropping one target: %v", vi.entries)
	}
	vi.drop("v1", "")
	if _, ok := vi.entries[volumeTarget{"v2", "/t3"}]; len(vi.entries) != 1 || !ok {
		t.Errorf("after dropping v1: %v, want v2's only", vi.entries)
	}
}

// TestVolumeInfoReloaded: a restarted node plugin rebuilds the series of
// its published volumes from the state dir.
func TestVolumeInfoReloaded(t *testing.T) {
	dir := t.TempDir()
	cfg := nodeConfig{dir: dir + "/node", cacheRoot: dir + "/cache"}
	n, err := newNodeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &nodeVolume{ID: "vol-r", DatasetKey: "ds-r", StagingPath: "/s", Targets: []string{"/t"},
		Pods: map[string]podRef{"/t": {Namespace: "team-a", Name: "p"}}, Claim: volumeClaim{Namespace: "team-a", Name: "imagenet", PV: "pv-r"}}
	if err := n.saveVolume(v); err != nil {
		t.Fatal(err)
	}
	again, err := newNodeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lv, ok := again.info.entries[volumeTarget{"vol-r", "/t"}]
	if !ok || lv[2] != "team-a" || lv[3] != "imagenet" || lv[4] != "pv-r" || lv[5] != "p" {
		t.Errorf("after a restart: %q (present %v), want vol-r's series", lv, ok)
	}
}
