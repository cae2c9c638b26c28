package csi

import (
	"slices"
	"testing"
	"time"
)

// TestListingRefusalsDue: the bound of the ListingRefused events. A cap
// whose count went up is due; one reported less than an interval ago is not
// (its increase waits, and is due once the interval has passed); an
// unchanged count and an unknown cap label (not in the fixed set, so never
// in an event's text) are never due; a count that went back (a new process
// under the same supervisor) counts from 0.
func TestListingRefusalsDue(t *testing.T) {
	const every = time.Minute
	t0 := time.Unix(1_000_000, 0)
	rc := &refusalCounts{reported: map[string]float64{}, at: map[string]time.Time{}}
	report := func(counts map[string]float64, now time.Time) []string {
		due := rc.due(counts, now, every)
		for _, c := range due {
			rc.reported[c], rc.at[c] = counts[c], now
		}
		return due
	}
	steps := []struct {
		counts map[string]float64
		after  time.Duration
		want   []string
	}{
		{map[string]float64{"max-dir-entries": 1, "max-listing-memory": 0, "<script>": 5}, 0, []string{"max-dir-entries"}},
		{map[string]float64{"max-dir-entries": 1}, 30 * time.Second, nil}, // no new refusal
		// max-dir-entries went up within the interval of its last event: it waits.
		{map[string]float64{"max-dir-entries": 3, "page-size": 1}, 40 * time.Second, []string{"page-size"}},
		{map[string]float64{"max-dir-entries": 3, "page-size": 1}, every + time.Second, []string{"max-dir-entries"}},
		{map[string]float64{"max-dir-entries": 3, "page-size": 1}, 10 * every, nil},
		// A recovered mount process counts from 0 again: its new refusals
		// are due, not hidden under the dead process's count.
		{map[string]float64{"max-dir-entries": 2, "page-size": 0}, 12 * every, []string{"max-dir-entries"}},
	}
	for i, s := range steps {
		if got := report(s.counts, t0.Add(s.after)); !slices.Equal(got, s.want) {
			t.Errorf("step %d: due %v, want %v", i, got, s.want)
		}
	}
}

func TestPublishPod(t *testing.T) {
	if p, ok := publishPod(map[string]string{"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "ns"}); !ok || p != (podRef{Namespace: "ns", Name: "p"}) {
		t.Errorf("publishPod: %+v %v", p, ok)
	}
	const uid = "0f8fad5b-d9cb-469f-a165-70867728950e"
	if p, ok := publishPod(map[string]string{"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "ns",
		"csi.storage.k8s.io/pod.uid": uid}); !ok || p.UID != uid {
		t.Errorf("publishPod with a uid: %+v %v", p, ok)
	}
	if p, _ := publishPod(map[string]string{"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "ns",
		"csi.storage.k8s.io/pod.uid": "../" + uid[3:]}); p.UID != "" {
		t.Errorf("publishPod took the uid %q", p.UID)
	}
	for _, vctx := range []map[string]string{
		{"csi.storage.k8s.io/pod.name": "p"},
		{"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "Not A Namespace"},
		{"csi.storage.k8s.io/pod.name": "p\nq", "csi.storage.k8s.io/pod.namespace": "ns"},
	} {
		if p, ok := publishPod(vctx); ok {
			t.Errorf("publishPod(%q) took %+v", vctx, p)
		}
	}
}
