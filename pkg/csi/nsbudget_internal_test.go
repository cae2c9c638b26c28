package csi

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNamespaceChargesSurviveRestart: a restarted driver rebuilds the
// namespaces' charges from its volume records, so a namespace at its cap
// before the restart is still at it after (a restart is no way to reset
// the limits); a volume record without a namespace (older than the limits)
// is charged to no namespace.
func TestNamespaceChargesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := nodeConfig{dir: filepath.Join(dir, "node"), cacheRoot: filepath.Join(dir, "cache"), nsMounts: 1,
		nsBytes: CacheBudget{Bytes: 1 << 30}, budget: CacheBudget{Bytes: 1 << 40}}
	n, err := newNodeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	params := volumeParams{Source: "/data/a", CacheSize: 16 << 20, Policy: "nr"}
	for _, ds := range []*datasetMount{{Key: "ds-a", Params: params, Users: []string{"v1"}}, {Key: "ds-old", Params: params, Users: []string{"v0"}}} {
		if err := n.saveDataset(ds); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []*nodeVolume{{ID: "v1", DatasetKey: "ds-a", Namespace: "team-a"}, {ID: "v0", DatasetKey: "ds-old"}} {
		if err := n.saveVolume(v); err != nil {
			t.Fatal(err)
		}
	}

	restarted, err := newNodeState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = restarted.budget.charge("team-a", "ds-b", "v2", 1<<20)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-namespace-mounts 1") {
		t.Errorf("team-a's second mount after a restart: %v, want ResourceExhausted naming --max-namespace-mounts", err)
	}
	if _, err := restarted.budget.charge("team-b", "ds-b", "v3", 1<<20); err != nil {
		t.Errorf("team-b's first mount: %v", err)
	}
	if mounts, _ := restarted.budget.nsUsage(""); mounts != 1 {
		t.Errorf("the record without a namespace: %d mounts of namespace \"\", want 1 (ds-old, not limited)", mounts)
	}
	// Releasing v1 frees team-a's share.
	if err := restarted.release("ds-a", "v1"); err != nil {
		t.Logf("release (its mount process never ran): %v", err)
	}
	if _, err := restarted.budget.charge("team-a", "ds-b", "v2", 1<<20); err != nil {
		t.Errorf("team-a after its volume was released: %v", err)
	}
}
