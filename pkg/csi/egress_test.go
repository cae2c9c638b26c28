package csi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount"
)

// TestNodeManifestReadsRestricted: the node plugin's own read of a
// dataset's manifest (datasetBytes, for node labels and volume stats) goes
// through the node's egress dialer: a source on loopback reaches nothing
// without a network rule naming it, and is asked with one. Before the
// egress dialer the node plugin connected to any source a volume named.
func TestNodeManifestReadsRestricted(t *testing.T) {
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
		want  bool // requests reach the server
	}{
		{"no rule", nil, false},
		{"rule for another endpoint", []string{"s3://datasets?endpoint=http://127.0.0.1:1"}, false},
		{"rule names the endpoint", []string{"s3://datasets?endpoint=" + srv.URL}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			n := newTestNodeState(t, nil)
			eg, err := mount.NewEgress(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			n.cfg.egress, n.cfg.egressRules = eg, tc.rules
			ds := &datasetMount{Key: "ds-" + strings.ReplaceAll(tc.name, " ", "-"), Params: volumeParams{Source: source, CacheSize: 1 << 20}}
			if size := n.datasetBytes(context.Background(), ds); size != -1 {
				t.Errorf("datasetBytes = %d, want -1 (no manifest can be read)", size)
			}
			if got := requests.Load() > 0; got != tc.want {
				t.Errorf("requests reached the source on loopback: %v (%d), want %v", got, requests.Load(), tc.want)
			}
		})
	}
}
