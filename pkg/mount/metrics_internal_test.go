package mount

import (
	"context"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
)

// fakeMirror is a Backend with per-replica counters, as a mirror has.
type fakeMirror struct {
	backend.Backend
	stats []backend.ReplicaStat
}

func (f *fakeMirror) ReplicaStats() []backend.ReplicaStat { return f.stats }

type plain struct{ backend.Backend }

func (plain) ID() string { return "plain" }

func (plain) ReadAt(context.Context, string, string, []byte, int64) (int, error) { return 0, nil }

func gather(t *testing.T, src backend.Backend) map[string]*dto.MetricFamily {
	t.Helper()
	reg, _ := newRegistry(func() cache.Stats { return cache.Stats{} }, src)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestReplicaMetrics(t *testing.T) {
	buckets := []float64{0.001, 0.01}
	src := &fakeMirror{Backend: plain{}, stats: []backend.ReplicaStat{
		{Index: 0, Up: true, Requests: 10, Served: 3, Hedges: 1, LatencyBuckets: buckets, LatencyCounts: []uint64{1, 3}, LatencyCount: 3, LatencySum: 0.012},
		{Index: 2, Up: false, Requests: 5, Errors: 2, Served: 1, HedgeWins: 1, Disagreements: 1, LatencyBuckets: buckets, LatencyCounts: []uint64{0, 1}, LatencyCount: 1},
	}}
	mfs := gather(t, src)
	value := func(name, replica string) float64 {
		mf, ok := mfs[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == "replica" && m.GetLabel()[0].GetValue() == replica {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		t.Fatalf("%s has no replica=%q", name, replica)
		return 0
	}
	for _, c := range []struct {
		name, replica string
		want          float64
	}{
		{"cachefs_backend_replica_requests_total", "0", 10},
		{"cachefs_backend_replica_errors_total", "2", 2},
		{"cachefs_backend_replica_hedges_total", "0", 1},
		{"cachefs_backend_replica_hedge_wins_total", "2", 1},
		{"cachefs_backend_replica_reads_served_total", "0", 3},
		{"cachefs_backend_replica_served_ratio", "0", 0.75},
		{"cachefs_backend_replica_served_ratio", "2", 0.25},
		{"cachefs_backend_replica_disagreements_total", "2", 1},
		{"cachefs_backend_replica_up", "0", 1},
		{"cachefs_backend_replica_up", "2", 0},
		{"cachefs_backend_replica_read_seconds", "0", 3},
	} {
		if got := value(c.name, c.replica); got != c.want {
			t.Errorf("%s{replica=%q} = %v, want %v", c.name, c.replica, got, c.want)
		}
	}

	for name := range gather(t, plain{}) {
		if strings.HasPrefix(name, "cachefs_backend_replica_") {
			t.Errorf("a non-mirror backend exports %s", name)
		}
	}
}
