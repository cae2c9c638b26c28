package controller

import (
	"context"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/epochfs/epochfs/pkg/cachelabel"
)

// Cache-aware placement reads where datasets are cached from the CSI node
// plugins' location Leases in the driver's namespace (pkg/cachelabel;
// Config.CacheLocationNamespace), not from Node labels: a node plugin then
// needs no write access to Nodes. The Leases are read
// when a gang's Jobs are created (each attempt), and the preference is
// written into the pod template as node names (matchFields metadata.name),
// graded like the labels were (cacheTiers). RBAC: `list` on leases in that
// namespace only, a Role the chart and kustomize base add beside the
// generated ClusterRole (no kubebuilder marker: it would be cluster-wide).

// maxLocationLeases bounds the location Leases read (one per node).
const maxLocationLeases = 5000

// maxPreferredNodes bounds the node names in one preference term: the most
// cached nodes of a dataset first. It keeps a pod template small on a
// large cluster.
const maxPreferredNodes = 100

// cacheLocations lists the live location Leases: dataset ID → nodes, most
// cached first. Nil when placement is off (no namespace) or the list fails
// (logged: placement is a preference only, the job is created without it).
func (r *Reconciler) cacheLocations(ctx context.Context) map[string][]cachelabel.Location {
	ns := r.cfg.CacheLocationNamespace
	if ns == "" {
		return nil
	}
	var leases coordinationv1.LeaseList
	if err := r.cfg.APIReader.List(ctx, &leases, client.InNamespace(ns), client.HasLabels{cachelabel.NodeLabel},
		client.Limit(maxLocationLeases)); err != nil {
		log.FromContext(ctx).Info("no cache-aware placement: cannot list the cache-location Leases", "namespace", ns, "err", err.Error())
		return nil
	}
	return cachelabel.Locations(leases.Items, r.cfg.Now())
}

// cacheTerms are the preference terms for the nodes caching dataset id:
// per tier, the nodes holding more than its percent.
func cacheTerms(locs []cachelabel.Location) []corev1.PreferredSchedulingTerm {
	var terms []corev1.PreferredSchedulingTerm
	for _, t := range cacheTiers {
		var nodes []string
		for _, l := range locs { // most cached first
			if l.Percent > t.above && len(nodes) < maxPreferredNodes {
				nodes = append(nodes, l.Node)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		slices.Sort(nodes)
		terms = append(terms, corev1.PreferredSchedulingTerm{Weight: t.weight, Preference: corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: nodes}},
		}})
	}
	return terms
}
