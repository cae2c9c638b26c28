package controller

// The capacity pre-check's arithmetic (capacity.go reads the cluster): do a
// gang's pods fit the nodes now, next to what admitted jobs hold? Pure
// functions of the Nodes, Pods and requests they are given.

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
	if len(req.pods) == 0 {
		return ""
	}
	c := newCluster(nodes, pods)
	eligible, notCounted := c.eligible(req.spec)
	if len(eligible) == 0 {
		if len(c.names) == 0 {
			return fmt.Sprintf("no node is registered, so %s cannot start", req.what)
		}
		return fmt.Sprintf("no node is Ready, schedulable and open to the pods (nodeSelector, tolerations), so %s cannot start%s", req.what, notCounted)
	}
	h := c.hold(reserved)
	// Whole-cluster sums first: they name the resource that is short.
	if short := c.sums(req, eligible, h); len(short) > 0 {
		return fmt.Sprintf("cannot fit %s: %s%s", req.what, strings.Join(short, "; "), notCounted)
	}
	return c.fit(req, h, notCounted)
}

// cluster is what the check knows of the nodes: each one's allocatable
// and what is free of it once the pods bound to it are counted.
type cluster struct {
	names []string // every node, sorted
	nodes map[string]*corev1.Node
	alloc map[string]corev1.ResourceList
	free  map[string]corev1.ResourceList
}

// newCluster counts the unfinished pods bound to nodes against their
// allocatable.
func newCluster(nodes []corev1.Node, pods []corev1.Pod) *cluster {
	c := &cluster{nodes: map[string]*corev1.Node{}, alloc: map[string]corev1.ResourceList{}, free: map[string]corev1.ResourceList{}}
	for i := range nodes {
		n := &nodes[i]
		c.names = append(c.names, n.Name)
		c.nodes[n.Name] = n
		c.free[n.Name] = n.Status.Allocatable.DeepCopy()
		c.alloc[n.Name] = n.Status.Allocatable
	}
	sort.Strings(c.names)
	for i := range pods {
		p := &pods[i]
		f, ok := c.free[p.Spec.NodeName]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for k, v := range podRequests(p) {
			q := f[k]
			q.Sub(v)
			f[k] = q
		}
	}
	return c
}

// eligible are the nodes pods of spec may use, and notCounted a clause
// naming the others and why ("" when every node counts).
func (c *cluster) eligible(spec *corev1.PodSpec) (eligible []string, notCounted string) {
	var skipped []string
	for _, n := range c.names {
		if why := nodeRefuses(c.nodes[n], spec); why != "" {
			skipped = append(skipped, n+" ("+why+")")
			continue
		}
		eligible = append(eligible, n)
	}
	if len(skipped) > 0 {
		if len(skipped) > 5 {
			skipped = append(skipped[:5], fmt.Sprintf("and %d more", len(skipped)-5))
		}
		notCounted = "; nodes not counted: " + strings.Join(skipped, ", ")
	}
	return eligible, notCounted
}

// holding is what the reserved jobs hold: their pods that fit on their
// own, the jobs holding them (sorted) and what is free after them.
type holding struct {
	pods      []item
	holders   []string
	afterHeld map[string]corev1.ResourceList
}

// hold places the reserved pods on their own: those that fit are held.
func (c *cluster) hold(reserved []reservation) holding {
	var pods []item
	for _, r := range reserved {
		for _, it := range r.pods {
			it.job = r.job
			pods = append(pods, it)
		}
	}
	h := holding{afterHeld: cloneFree(c.free)}
	h.pods = place(pods, c.names, c.nodes, h.afterHeld)
	for _, it := range h.pods {
		if !slices.Contains(h.holders, it.job) {
			h.holders = append(h.holders, it.job)
		}
	}
	slices.Sort(h.holders)
	return h
}

// sums compares what req needs of each resource with what is free of it
// on the eligible nodes after the held pods, and describes each resource
// that is short.
func (c *cluster) sums(req capacityRequest, eligible []string, h holding) (short []string) {
	need := corev1.ResourceList{}
	for _, it := range req.pods {
		addTimes(need, it.reqs, 1)
	}
	for _, k := range sortedNames(need) {
		v := need[k]
		var totalFree, totalAlloc, totalHeld resource.Quantity
		for _, n := range eligible {
			if q, ok := h.afterHeld[n][k]; ok && q.Sign() > 0 {
				totalFree.Add(q)
			}
			if q, ok := c.alloc[n][k]; ok {
				totalAlloc.Add(q)
			}
			held := c.free[n][k]
			held.Sub(h.afterHeld[n][k])
			totalHeld.Add(held)
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
		msg := fmt.Sprintf("%s: need %s, %s free of %s allocatable on %d eligible nodes", k, v.String(), totalFree.String(), totalAlloc.String(), len(eligible))
		if totalHeld.Sign() > 0 {
			msg += fmt.Sprintf(" (%s of it held for admitted jobs whose pods are not placed yet: %s)", totalHeld.String(), strings.Join(h.holders, ", "))
		}
		short = append(short, msg)
	}
	return short
}

// fit places the held pods and req's together, node by node, once the sums
// fit: "" when all are placed, else why not.
func (c *cluster) fit(req capacityRequest, h holding, notCounted string) string {
	items := append([]item(nil), h.pods...)
	for _, it := range req.pods {
		it.job = ""
		items = append(items, it)
	}
	placed := place(items, c.names, c.nodes, cloneFree(c.free))
	if len(placed) == len(items) {
		return ""
	}
	// A replica type no node takes at all (parameter servers, which have
	// no GPU toleration, on a cluster of tainted GPU nodes).
	for _, it := range req.pods {
		var why []string
		for _, n := range c.names {
			if w := nodeRefuses(c.nodes[n], it.spec); w != "" {
				why = append(why, n+" ("+w+")")
			}
		}
		if len(why) == len(c.names) {
			if len(why) > 8 {
				why = append(why[:8], fmt.Sprintf("and %d more", len(why)-8))
			}
			return fmt.Sprintf("cannot fit %s: no node takes its %s pods: %s", req.what, replicaNoun(it.replica), strings.Join(why, ", "))
		}
	}
	per := formatList(req.pods[len(req.pods)-1].reqs)
	if len(h.pods) == 0 {
		return fmt.Sprintf("cannot fit %s: the free resources are spread over the nodes so that only %d of the %d pods fit (per pod: %s)%s",
			req.what, len(placed), len(req.pods), per, notCounted)
	}
	return fmt.Sprintf("cannot fit %s next to the %d pods held for %s: the free resources are spread over the nodes so that only %d of these %d pods fit (per pod of this job: %s)%s",
		req.what, len(h.pods), strings.Join(h.holders, ", "), len(placed), len(items), per, notCounted)
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
