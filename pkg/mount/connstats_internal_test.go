package mount

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConnStatsCarried: each process starts from its predecessor's
// counters and adds its own event; the histogram's buckets are cumulative.
func TestConnStatsCarried(t *testing.T) {
	var first connStats
	if err := first.load(nil); err != nil {
		t.Fatal(err)
	}
	first.record(stallTakeover, 5*time.Millisecond)
	var second connStats
	if err := second.load(first.marshal()); err != nil {
		t.Fatal(err)
	}
	second.record(stallRecovery, 2*time.Second)
	c := second.record(stallRecovery, time.Minute) // past the last bucket
	if c.Handovers != 1 || c.Recoveries != 2 {
		t.Fatalf("handovers %d recoveries %d, want 1 and 2", c.Handovers, c.Recoveries)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&second)
	want := `
# HELP cachefs_connection_recoveries_total Recoveries of this mount's FUSE connection after its serving process died (--supervise, or a holder that lent it), by every process that served it.
# TYPE cachefs_connection_recoveries_total counter
cachefs_connection_recoveries_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cachefs_connection_recoveries_total"); err != nil {
		t.Error(err)
	}
	rec := c.Stalls[stallRecovery]
	for i, le := range stallBuckets {
		n := uint64(0)
		if le >= 2 {
			n = 1
		}
		if rec.Buckets[i] != n {
			t.Errorf("recovery bucket le=%v: %d, want %d", le, rec.Buckets[i], n)
		}
	}
	if rec.Count != 2 || rec.Sum != 62 {
		t.Errorf("recovery count %d sum %v, want 2 and 62", rec.Count, rec.Sum)
	}
}

// TestConnStatsLoad: other bounds are mapped onto this binary's (counts
// never go back); a malformed predecessor's counters are refused.
func TestConnStatsLoad(t *testing.T) {
	var s connStats
	if err := s.load(json.RawMessage(`{"handovers":3,"stalls":{"takeover":{"count":3,"sum":1.5,"le":[0.01,1],"buckets":[1,2]}}}`)); err != nil {
		t.Fatal(err)
	}
	h := s.c.Stalls[stallTakeover]
	for i, le := range stallBuckets {
		want := uint64(0)
		switch {
		case le >= 1:
			want = 2
		case le >= 0.01:
			want = 1
		}
		if h.Buckets[i] != want {
			t.Errorf("le=%v: %d, want %d", le, h.Buckets[i], want)
		}
	}
	for name, raw := range map[string]string{
		"not json":          `{`,
		"unknown kind":      `{"stalls":{"nap":{"count":0,"le":[],"buckets":[]}}}`,
		"bucket over count": `{"stalls":{"recovery":{"count":1,"le":[1],"buckets":[2]}}}`,
		"buckets go back":   `{"stalls":{"recovery":{"count":3,"le":[1,2],"buckets":[2,1]}}}`,
		"bounds go back":    `{"stalls":{"recovery":{"count":3,"le":[2,1],"buckets":[1,2]}}}`,
		"lengths differ":    `{"stalls":{"recovery":{"count":3,"le":[1],"buckets":[1,2]}}}`,
		"negative sum":      `{"stalls":{"recovery":{"count":1,"sum":-1,"le":[1],"buckets":[1]}}}`,
	} {
		if err := new(connStats).load(json.RawMessage(raw)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}
