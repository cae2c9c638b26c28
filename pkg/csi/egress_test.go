package csi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestNodeNeverReadsDataset: the node plugin's path to a dataset's size
// (datasetBytes, for node labels and volume stats) asks the dataset's
// mount, never the dataset: a source on loopback, even one a network rule
// names, receives no request, and without a mount to answer there is no
// size. Before, the node plugin opened the source to read the manifest.
func TestNodeNeverReadsDataset(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer srv.Close()
	source := "s3://datasets/ds?endpoint=" + srv.URL + "&region=us-east-1"

	for _, tc := range []struct {
		name  string
		rules []string
	}{
		{"no rule", nil},
		{"rule names the endpoint", []string{"s3://datasets?endpoint=" + srv.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNodeState(t, nil)
			n.cfg.egressRules = tc.rules
			ds := &datasetMount{Key: "ds-" + strings.ReplaceAll(tc.name, " ", "-"), CacheDir: t.TempDir(),
				Params: volumeParams{Source: source, CacheSize: 1 << 20}}
			if size := n.datasetBytes(context.Background(), ds); size != -1 {
				t.Errorf("datasetBytes = %d, want -1 (no mount answers)", size)
			}
			if requests.Load() > 0 {
				t.Errorf("%d requests reached the source", requests.Load())
			}
		})
	}
}
