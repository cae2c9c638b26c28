// Package kubepeer is the Kubernetes discovery of cluster-scope cache peers
// (issue 15 item 3): each node plugin advertises, on its own Node object,
// one annotation per cluster-scope dataset group it mounts,
//
//	peer.epochfs.io/<group>: <peer-id>=<host>:<port>
//
// and watches the Nodes: the peers of a group are the nodes carrying its
// annotation, less those whose Ready condition is present and not True. A
// node that stops mounting the dataset removes its annotation (Withdraw);
// one that dies stays listed until it is NotReady, meanwhile the readers'
// down-marking (pkg/peer) sends its files to the backend.
//
// Why Node annotations: the node plugin already gets and patches its own
// Node (node labels, pkg/csi); the only extra RBAC is list/watch on nodes.
// No object per dataset has to be created, garbage-collected or owned.
//
// It lives apart from pkg/peer so that the cachefs binary does not link
// client-go: the mount process reads its peers from a file the node plugin
// rewrites (peer.File, `cachefs mount --peers-file`).
package kubepeer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/epochfs/epochfs/pkg/peer"
)

// AnnotationPrefix starts the annotation key of a group.
const AnnotationPrefix = "peer.epochfs.io/"

// Directory advertises this node's peers and watches everyone's. Safe for
// concurrent use.
type Directory struct {
	client kubernetes.Interface
	node   string

	mu       sync.Mutex
	groups   map[string][]peer.Peer // group → peers sorted by id (replaced, never modified)
	onChange []func()
}

// Start watches the Nodes (until ctx is done) and returns once the first
// list is in. node is this node's name (Advertise patches it).
func Start(ctx context.Context, client kubernetes.Interface, node string) (*Directory, error) {
	d := &Directory{client: client, node: node, groups: map[string][]peer.Peer{}}
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Nodes().Informer()
	store := inf.GetStore()
	rebuild := func(any) { d.rebuild(store.List()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: rebuild, DeleteFunc: rebuild,
		UpdateFunc: func(_, n any) { rebuild(n) },
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("kubepeer: no list of Nodes within a minute (RBAC: the node plugin needs list and watch on nodes)")
	}
	d.rebuild(store.List())
	return d, nil
}

// Key is the annotation key of group.
func Key(group string) string { return AnnotationPrefix + group }

// ValidGroup checks a group name: it is the name part of an annotation key
// (1–63 bytes of [a-z0-9-], here).
func ValidGroup(g string) error {
	if g == "" || len(g) > 63 {
		return fmt.Errorf("kubepeer: group %q must be 1 to 63 bytes", g)
	}
	for _, c := range g {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("kubepeer: group %q: only a-z, 0-9 and - are allowed", g)
		}
	}
	return nil
}

// Advertise records on this node that it serves group's peers as p.
func (d *Directory) Advertise(ctx context.Context, group string, p peer.Peer) error {
	if err := ValidGroup(group); err != nil {
		return err
	}
	v := peer.FormatPeer(p)
	if _, err := peer.ParsePeers(v); err != nil {
		return err
	}
	return d.patch(ctx, map[string]any{Key(group): v})
}

// Withdraw removes this node's annotation of group.
func (d *Directory) Withdraw(ctx context.Context, group string) error {
	if err := ValidGroup(group); err != nil {
		return err
	}
	return d.patch(ctx, map[string]any{Key(group): nil})
}

func (d *Directory) patch(ctx context.Context, ann map[string]any) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = d.client.CoreV1().Nodes().Patch(ctx, d.node, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubepeer: annotate node %s: %w", d.node, err)
	}
	return nil
}

// Peers returns group's current peers, sorted by id (shared; never
// modified).
func (d *Directory) Peers(group string) []peer.Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.groups[group]
}

// Group is group's peers as a peer.Membership.
func (d *Directory) Group(group string) peer.Membership { return groupMembership{d, group} }

type groupMembership struct {
	d     *Directory
	group string
}

func (g groupMembership) Peers() []peer.Peer { return g.d.Peers(g.group) }

// OnChange calls f (on the watch's goroutine) after every change of any
// group's peers.
func (d *Directory) OnChange(f func()) {
	d.mu.Lock()
	d.onChange = append(d.onChange, f)
	d.mu.Unlock()
}

func (d *Directory) rebuild(objs []any) {
	groups := map[string][]peer.Peer{}
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok || !ready(n) {
			continue
		}
		for k, v := range n.Annotations {
			group, ok := strings.CutPrefix(k, AnnotationPrefix)
			if !ok || ValidGroup(group) != nil {
				continue
			}
			ps, err := peer.ParsePeers(v)
			if err != nil || len(ps) != 1 {
				continue // not ours to fix; the node's plugin rewrites it
			}
			groups[group] = append(groups[group], ps[0])
		}
	}
	for g, ps := range groups {
		slices.SortFunc(ps, func(a, b peer.Peer) int { return strings.Compare(a.ID, b.ID) })
		// Two nodes claiming one id: keep the first (ids must be unique).
		groups[g] = slices.CompactFunc(ps, func(a, b peer.Peer) bool { return a.ID == b.ID })
	}
	d.mu.Lock()
	changed := len(groups) != len(d.groups)
	for g, ps := range groups {
		if !slices.Equal(ps, d.groups[g]) {
			changed = true
		}
	}
	d.groups = groups
	fs := slices.Clone(d.onChange)
	d.mu.Unlock()
	if changed {
		for _, f := range fs {
			f()
		}
	}
}

// ready: no Ready condition (a Node no kubelet reports on yet) or Ready
// True.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}
