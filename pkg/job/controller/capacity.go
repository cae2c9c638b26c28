package controller

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// capacityShortfall reports whether the pods (their requests, in order)
// can be placed together on the cluster's nodes now: each node offers its
// allocatable minus the requests of the pods bound to it that have not
// finished. Only nodes that are Ready and schedulable count; taints are not
// considered. It returns "" when the pods fit, else a sentence naming what
// is short.
//
// Placement is first-fit over nodes sorted by name, pods largest first: a
// check, not a scheduler, so it may refuse a packing a scheduler would
// find only when resources are fragmented, and says so.
func capacityShortfall(nodes []corev1.Node, pods []corev1.Pod, gang []corev1.ResourceList, what string) string {
	if len(gang) == 0 || allEmpty(gang) {
		return ""
	}
	free := map[string]corev1.ResourceList{}
	alloc := map[string]corev1.ResourceList{}
	var names []string
	for i := range nodes {
		n := &nodes[i]
		if n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		names = append(names, n.Name)
		free[n.Name] = n.Status.Allocatable.DeepCopy()
		alloc[n.Name] = n.Status.Allocatable
	}
	sort.Strings(names)
	for i := range pods {
		p := &pods[i]
		f, ok := free[p.Spec.NodeName]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for k, v := range podRequests(p) {
			q := f[k]
			q.Sub(v)
			f[k] = q
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("no node is Ready and schedulable, so %s cannot start", what)
	}

	// Whole-cluster sums first: they name the resource that is short.
	need := corev1.ResourceList{}
	for _, r := range gang {
		addTimes(need, r, 1)
	}
	var short []string
	for _, k := range sortedNames(need) {
		v := need[k]
		var totalFree, totalAlloc resource.Quantity
		for _, n := range names {
			if q, ok := free[n][k]; ok && q.Sign() > 0 {
				totalFree.Add(q)
			}
			if q, ok := alloc[n][k]; ok {
				totalAlloc.Add(q)
			}
		}
		if totalFree.Cmp(v) >= 0 {
			continue
		}
		if totalAlloc.IsZero() {
			hint := ""
			if k == ResourceGPU {
				hint = " (no GPU nodes, or the NVIDIA device plugin is not running): remove gpus or add GPU nodes"
			}
			short = append(short, fmt.Sprintf("%s: need %s, but no Ready node has any%s", k, v.String(), hint))
			continue
		}
		short = append(short, fmt.Sprintf("%s: need %s, %s free of %s allocatable on %d Ready nodes",
			k, v.String(), totalFree.String(), totalAlloc.String(), len(names)))
	}
	if len(short) > 0 {
		return fmt.Sprintf("cannot fit %s: %s", what, strings.Join(short, "; "))
	}

	// Then placement: the sums fit, but do the pods fit node by node?
	order := make([]corev1.ResourceList, len(gang))
	copy(order, gang)
	sort.SliceStable(order, func(i, j int) bool { return weight(order[i]) > weight(order[j]) })
	placed := 0
	for _, r := range order {
		for _, n := range names {
			if fits(free[n], r) {
				for k, v := range r {
					q := free[n][k]
					q.Sub(v)
					free[n][k] = q
				}
				placed++
				break
			}
		}
	}
	if placed < len(gang) {
		return fmt.Sprintf("cannot fit %s: the free resources are spread over the nodes so that only %d of the %d pods fit (per pod: %s)",
			what, placed, len(gang), formatList(gang[len(gang)-1]))
	}
	return ""
}

func allEmpty(rs []corev1.ResourceList) bool {
	for _, r := range rs {
		if len(r) > 0 {
			return false
		}
	}
	return true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func fits(free, r corev1.ResourceList) bool {
	for k, v := range r {
		q, ok := free[k]
		if !ok || q.Cmp(v) < 0 {
			return false
		}
	}
	return true
}

// weight orders pods for first-fit: GPUs dominate, then CPU.
func weight(r corev1.ResourceList) float64 {
	w := 0.0
	if q, ok := r[ResourceGPU]; ok {
		w += 1e6 * q.AsApproximateFloat64()
	}
	if q, ok := r[corev1.ResourceCPU]; ok {
		w += q.AsApproximateFloat64()
	}
	return w
}

// podRequests is what the scheduler counts for a pod: the larger of the
// sum of its containers and each init container, plus its overhead.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		addTimes(out, c.Resources.Requests, 1)
	}
	for _, c := range p.Spec.InitContainers {
		for k, v := range c.Resources.Requests {
			if q, ok := out[k]; !ok || q.Cmp(v) < 0 {
				out[k] = v.DeepCopy()
			}
		}
	}
	addTimes(out, p.Spec.Overhead, 1)
	return out
}

func sortedNames(r corev1.ResourceList) []corev1.ResourceName {
	var ks []corev1.ResourceName
	for k := range r {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func formatList(r corev1.ResourceList) string {
	var parts []string
	for _, k := range sortedNames(r) {
		v := r[k]
		parts = append(parts, string(k)+"="+v.String())
	}
	return strings.Join(parts, ", ")
}
