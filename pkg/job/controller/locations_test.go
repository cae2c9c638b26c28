package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/cachelabel"
)

// locationNamespace is the driver namespace of the tests' controller.
const locationNamespace = "epochfs-system"

// cacheLocation writes node's cache-location Lease as its CSI node plugin
// would: annotations cache.epochfs.io/<dataset-id> = percent.
func (e *env) cacheLocation(t *testing.T, node string, pcts map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: locationNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: cachelabel.LeaseName(node), Namespace: locationNamespace,
			Labels: map[string]string{cachelabel.NodeLabel: cachelabel.NodeLabelValue(node)}, Annotations: pcts},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(3600)), RenewTime: &now},
	}
	if err := e.c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// TestCacheTerms: the preference terms of a dataset's locations: per tier,
// the nodes above its percent, sorted, at most maxPreferredNodes (the most
// cached ones); a node holding everything gets all four weights (100); no
// locations, no terms.
func TestCacheTerms(t *testing.T) {
	if got := cacheTerms(nil); len(got) != 0 {
		t.Errorf("no locations: %v", got)
	}
	locs := []cachelabel.Location{{Node: "full", Percent: 100}, {Node: "most", Percent: 95}, {Node: "half", Percent: 60}, {Node: "none", Percent: 0}}
	terms := cacheTerms(locs)
	want := [][]string{{"full", "half", "most"}, {"full", "half", "most"}, {"full", "most"}, {"full"}}
	if len(terms) != len(want) {
		t.Fatalf("terms %+v", terms)
	}
	weight := map[string]int32{}
	for i, term := range terms {
		f := term.Preference.MatchFields
		if len(f) != 1 || f[0].Key != "metadata.name" || f[0].Operator != corev1.NodeSelectorOpIn || !slices.Equal(f[0].Values, want[i]) {
			t.Errorf("term %d: %+v, want metadata.name in %v", i, term.Preference, want[i])
		}
		for _, n := range f[0].Values {
			weight[n] += term.Weight
		}
	}
	if weight["full"] != 100 || weight["none"] != 0 {
		t.Errorf("weights %v", weight)
	}

	var many []cachelabel.Location
	for i := range 3 * maxPreferredNodes {
		many = append(many, cachelabel.Location{Node: fmt.Sprintf("n-%04d", i), Percent: 100 - i*100/(3*maxPreferredNodes)})
	}
	for _, term := range cacheTerms(many) {
		vs := term.Preference.MatchFields[0].Values
		if len(vs) > maxPreferredNodes || !slices.Contains(vs, "n-0000") {
			t.Errorf("a term of %d nodes, with the most cached %v", len(vs), slices.Contains(vs, "n-0000"))
		}
	}
}
