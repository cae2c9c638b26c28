package peer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsModes: aggregated (the default) exports one series per peer
// counter whatever the number of peers, with no peer label; per-peer one
// series per peer id.
func TestMetricsModes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       *Metrics
		series  int // of cachefs_peer_hits_total after hits from 3 peers
		ownerOf string
	}{
		{"aggregated", NewMetrics(), 1, ""},
		{"per-peer", NewPerPeerMetrics(), 3, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			tc.m.Register(reg)
			for _, id := range []string{"a", "b", "b", "c"} {
				tc.m.Hits.For(id).Inc()
				tc.m.ServedBytes.For(id).Add(10)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]int{}
			for _, mf := range mfs {
				byName[mf.GetName()] = len(mf.GetMetric())
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == LabelPeer && tc.ownerOf == "" {
							t.Errorf("%s has a peer label in aggregated mode", mf.GetName())
						}
					}
				}
			}
			if byName["cachefs_peer_hits_total"] != tc.series || byName["cachefs_peer_served_bytes_total"] != tc.series {
				t.Errorf("series %v, want %d of hits and served bytes", byName, tc.series)
			}
			if tc.ownerOf != "" {
				if got := testutil.ToFloat64(tc.m.Hits.For(tc.ownerOf)); got != 2 {
					t.Errorf("hits of %s: %v, want 2", tc.ownerOf, got)
				}
			} else if got := testutil.ToFloat64(tc.m.Hits.For("anything")); got != 4 {
				t.Errorf("aggregated hits %v, want 4", got)
			}
			if _, ok := byName["cachefs_peer_owned_ratio"]; !ok {
				t.Errorf("no cachefs_peer_owned_ratio in %v", byName)
			}
		})
	}
}

func TestParseMetricsMode(t *testing.T) {
	for in, want := range map[string]bool{"": false, MetricsAggregated: false, MetricsPerPeer: true} {
		if got, err := ParseMetricsMode(in); err != nil || got != want {
			t.Errorf("ParseMetricsMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"peer", "Per-Peer", "all"} {
		if _, err := ParseMetricsMode(in); err == nil {
			t.Errorf("ParseMetricsMode(%q) accepted", in)
		}
	}
}
