package controller

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// capacityRequest is what the pre-check asks: can these pods start now?
type capacityRequest struct {
	// what names the pods in messages, e.g. "2 workers (each nvidia.com/gpu=4)".
	what string
	// pods are the pods that must fit together (the gang), each with its
	// requests and pod template.
	pods []item
	// spec is the workers' pod template: its nodeSelector and tolerations
	// say which nodes count in the sums and the messages.
	spec *corev1.PodSpec
}

// reservation is an admitted TrainingJob whose pods are not all placed yet
// (not created, or created and not bound to a node): the check holds their
// requests for it, so that two jobs admitted one after the other do not
// both count the same free GPUs.
type reservation struct {
	job  string // namespace/name, for messages
	pods []item
}

// capacityShortfall reports whether req's pods can be placed together on
// the cluster's nodes now. A node counts when it is Ready, not cordoned,
// carries the labels of the pods' nodeSelector and has no NoSchedule or
// NoExecute taint they do not tolerate; it offers its allocatable minus
// the requests of the unfinished pods bound to it, minus what the reserved
// jobs hold. It returns "" when the pods fit, else a sentence naming what
// is short and which nodes were not counted.
//
// Placement is first-fit over nodes sorted by name, pods largest first: a
// check, not a scheduler, so it may refuse a packing a scheduler would
// find only when resources are fragmented, and says so. Reserved pods are
// placed first on their own; those that do not fit even alone (a job stuck
// behind a lost node, say) hold nothing, so one stuck job does not block
// every later one. Then the held pods and req's pods are placed together.
func capacityShortfall(nodes []corev1.Node, pods []corev1.Pod, req capacityRequest, reserved []reservation) string {
	var reqs []corev1.ResourceList
	for _, it := range req.pods {
		reqs = append(reqs, it.reqs)
	}
	if len(reqs) == 0 {
		return ""
	}
	free := map[string]corev1.ResourceList{}
	alloc := map[string]corev1.ResourceList{}
	byName := map[string]*corev1.Node{}
	var all []string
	for i := range nodes {
		n := &nodes[i]
		all = append(all, n.Name)
		byName[n.Name] = n
		free[n.Name] = n.Status.Allocatable.DeepCopy()
		alloc[n.Name] = n.Status.Allocatable
	}
	sort.Strings(all)
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

	// The nodes req's pods may use, and why the others do not count.
	var names, skipped []string
	for _, n := range all {
		if why := nodeRefuses(byName[n], req.spec); why != "" {
			skipped = append(skipped, n+" ("+why+")")
			continue
		}
		names = append(names, n)
	}
	notCounted := ""
	if len(skipped) > 0 {
		if len(skipped) > 5 {
			skipped = append(skipped[:5], fmt.Sprintf("and %d more", len(skipped)-5))
		}
		notCounted = "; nodes not counted: " + strings.Join(skipped, ", ")
	}
	if len(names) == 0 {
		if len(all) == 0 {
			return fmt.Sprintf("no node is registered, so %s cannot start", req.what)
		}
		return fmt.Sprintf("no node is Ready, schedulable and open to the pods (nodeSelector, tolerations), so %s cannot start%s", req.what, notCounted)
	}

	// Reserved pods alone: those that fit are held.
	var held []item
	for _, r := range reserved {
		for _, it := range r.pods {
			it.job = r.job
			held = append(held, it)
		}
	}
	afterHeld := cloneFree(free)
	held = place(held, all, byName, afterHeld)
	var holders []string
	for _, it := range held {
		if !slices.Contains(holders, it.job) {
			holders = append(holders, it.job)
		}
	}
	slices.Sort(holders)

	// Whole-cluster sums first: they name the resource that is short.
	need := corev1.ResourceList{}
	for _, r := range reqs {
		addTimes(need, r, 1)
	}
	var short []string
	for _, k := range sortedNames(need) {
		v := need[k]
		var totalFree, totalAlloc, totalHeld resource.Quantity
		for _, n := range names {
			if q, ok := afterHeld[n][k]; ok && q.Sign() > 0 {
				totalFree.Add(q)
			}
			if q, ok := alloc[n][k]; ok {
				totalAlloc.Add(q)
			}
			h := free[n][k]
			h.Sub(afterHeld[n][k])
			totalHeld.Add(h)
		}
		if totalFree.Cmp(v) >= 0 {
			continue
		}
		if totalAlloc.IsZero() {
			hint := ""
			if k == v1alpha1.ResourceGPU {
				hint = " (no GPU nodes, or the NVIDIA device plugin is not running): remove gpus or add GPU nodes"
			}
			short = append(short, fmt.Sprintf("%s: need %s, but no eligible node has any%s", k, v.String(), hint))
			continue
		}
		msg := fmt.Sprintf("%s: need %s, %s free of %s allocatable on %d eligible nodes", k, v.String(), totalFree.String(), totalAlloc.String(), len(names))
		if totalHeld.Sign() > 0 {
			msg += fmt.Sprintf(" (%s of it held for admitted jobs whose pods are not placed yet: %s)", totalHeld.String(), strings.Join(holders, ", "))
		}
		short = append(short, msg)
	}
	if len(short) > 0 {
		return fmt.Sprintf("cannot fit %s: %s%s", req.what, strings.Join(short, "; "), notCounted)
	}

	// Then placement: the sums fit, but do the pods fit node by node,
	// together with the held ones?
	items := append([]item(nil), held...)
	for _, it := range req.pods {
		it.job = ""
		items = append(items, it)
	}
	placed := place(items, all, byName, cloneFree(free))
	if len(placed) < len(items) {
		// A replica type no node takes at all (parameter servers, which
		// have no GPU toleration, on a cluster of tainted GPU nodes).
		for _, it := range req.pods {
			var why []string
			for _, n := range all {
				if w := nodeRefuses(byName[n], it.spec); w != "" {
					why = append(why, n+" ("+w+")")
				}
			}
			if len(why) == len(all) {
				if len(why) > 8 {
					why = append(why[:8], fmt.Sprintf("and %d more", len(why)-8))
				}
				return fmt.Sprintf("cannot fit %s: no node takes its %s pods: %s", req.what, replicaNoun(it.replica), strings.Join(why, ", "))
			}
		}
		if len(held) == 0 {
			return fmt.Sprintf("cannot fit %s: the free resources are spread over the nodes so that only %d of the %d pods fit (per pod: %s)%s",
				req.what, len(placed), len(reqs), formatList(reqs[len(reqs)-1]), notCounted)
		}
		return fmt.Sprintf("cannot fit %s next to the %d pods held for %s: the free resources are spread over the nodes so that only %d of these %d pods fit (per pod of this job: %s)%s",
			req.what, len(held), strings.Join(holders, ", "), len(placed), len(items), formatList(reqs[len(reqs)-1]), notCounted)
	}
	return ""
}

// item is one pod to place: its requests, its template (which nodes it
// may use) and the job holding it ("" for the job being checked).
type item struct {
	reqs    corev1.ResourceList
	spec    *corev1.PodSpec
	replica string // ReplicaWorker or ReplicaPS
	job     string
}

func replicaNoun(replica string) string {
	if replica == v1alpha1.ReplicaPS {
		return "parameter-server"
	}
	return "worker"
}

// place puts items first-fit, largest first, onto the nodes (names in
// order) that accept them, subtracting from free, and returns the items
// that were placed.
func place(items []item, names []string, nodes map[string]*corev1.Node, free map[string]corev1.ResourceList) []item {
	order := append([]item(nil), items...)
	sort.SliceStable(order, func(i, j int) bool { return weight(order[i].reqs) > weight(order[j].reqs) })
	var placed []item
	for _, it := range order {
		for _, n := range names {
			if nodeRefuses(nodes[n], it.spec) != "" || !fits(free[n], it.reqs) {
				continue
			}
			for k, v := range it.reqs {
				q := free[n][k]
				q.Sub(v)
				free[n][k] = q
			}
			placed = append(placed, it)
			break
		}
	}
	return placed
}

func cloneFree(free map[string]corev1.ResourceList) map[string]corev1.ResourceList {
	out := make(map[string]corev1.ResourceList, len(free))
	for n, r := range free {
		out[n] = r.DeepCopy()
	}
	return out
}

// nodeRefuses says why a pod with spec cannot run on n ("" when it can):
// cordoned, not Ready, a nodeSelector label missing, or a NoSchedule or
// NoExecute taint not tolerated.
func nodeRefuses(n *corev1.Node, spec *corev1.PodSpec) string {
	switch {
	case n.Spec.Unschedulable:
		return "cordoned"
	case !nodeReady(n):
		return "not Ready"
	}
	if spec == nil {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(spec.NodeSelector)) {
		if v, ok := n.Labels[k]; !ok || v != spec.NodeSelector[k] {
			return fmt.Sprintf("no label %s=%s of the nodeSelector", k, spec.NodeSelector[k])
		}
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerates(spec.Tolerations, t) {
			return "taint " + t.ToString() + " not tolerated"
		}
	}
	return ""
}

// tolerates reports whether one of tols tolerates taint.
func tolerates(tols []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(logr.Discard(), taint, false) {
			return true
		}
	}
	return false
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
	if q, ok := r[v1alpha1.ResourceGPU]; ok {
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

// capacityPods are the gang's pods for the capacity check (as gangPods,
// each with its pod template), less placedPS parameter servers and
// placedWorkers workers that are placed already. Pods without requests
// are left out.
func (p *plan) capacityPods(sched Schedulers, placedPS, placedWorkers int32) []item {
	gang := p.gangPods()
	nPS := min(p.tj.Spec.ParameterServers, int32(len(gang)))
	var out []item
	add := func(replica string, reqs corev1.ResourceList, n int32) {
		if n <= 0 || len(reqs) == 0 {
			return
		}
		spec := p.job(replica, sched).Spec.Template.Spec
		for range n {
			out = append(out, item{reqs: reqs, spec: &spec, replica: replica})
		}
	}
	add(v1alpha1.ReplicaPS, p.psReqs, nPS-placedPS)
	add(v1alpha1.ReplicaWorker, p.workerReqs, int32(len(gang))-nPS-placedWorkers)
	return out
}
