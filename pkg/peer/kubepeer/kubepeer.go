// Package kubepeer is the Kubernetes discovery of cluster-scope cache peers:
// each node plugin advertises, in the driver's namespace, one
// coordination.k8s.io/v1 Lease per cluster-scope dataset group it mounts:
//
//	name:        peer-<group>-<hash of the node name>
//	labels:      peer.epochfs.io/group=<group>, peer.epochfs.io/node=<node label>
//	holder:      the node name
//	annotation:  peer.epochfs.io/peer: <peer-id>=<host>:<port>[;capacity=BYTES]
//	renewTime + leaseDurationSeconds: when it expires
//
// and watches the namespace's peer Leases: the peers of a group are the
// Leases labelled with it that have not expired. A node that stops mounting
// the dataset deletes its Lease (Withdraw); one whose delete failed, or that
// restarted without the dataset, deletes it at the next Retain (the node
// plugin's start and health loop); one that dies stops renewing and its
// Lease expires by itself; meanwhile the readers' down-marking (pkg/peer)
// sends its files to the backend.
//
// Why Leases in one namespace, not Node annotations: the node plugin needs
// no write access to any Node (a compromised node plugin could otherwise
// relabel, annotate or taint every Node), only a Role on Leases of the
// driver's namespace; and an entry that nobody renews goes away by itself.
//
// It lives apart from pkg/peer so that the cachefs binary does not link
// client-go: the mount process reads its peers from a file the node plugin
// rewrites (peer.File, `cachefs mount --peers-file`).
package kubepeer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/peer"
)

// Keys of a peer Lease's labels and annotation.
const (
	// GroupLabel holds the Lease's group (the node plugin's peer group
	// name, ValidGroup).
	GroupLabel = "peer.epochfs.io/group"
	// NodeLabel holds NodeLabelValue of the advertising node.
	NodeLabel = "peer.epochfs.io/node"
	// PeerAnnotation holds peer.FormatPeer of the node's peer.
	PeerAnnotation = "peer.epochfs.io/peer"
)

// DefaultLeaseDuration is Options.LeaseDuration's default.
const DefaultLeaseDuration = 90 * time.Second

// maxPeerValue bounds the annotation a reader parses (a peer is an id of at
// most 253 bytes, an address and a capacity).
const maxPeerValue = 1024

// Options configures a Directory.
type Options struct {
	// Namespace holds the Leases (the driver's namespace). Required.
	Namespace string
	// Node is this node's name: the holder of the Leases it writes.
	// Required.
	Node string
	// LeaseDuration is how long an advertisement lives unless renewed
	// (Advertise again); default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Directory advertises this node's peers and watches everyone's. Safe for
// concurrent use.
type Directory struct {
	client kubernetes.Interface
	opts   Options // immutable
	lister func() []any

	rebuildMu sync.Mutex // serialises rebuilds (watch events and the expiry timer), so an older one never lands last

	mu       sync.Mutex
	groups   map[string][]peer.Peer // group → live peers sorted by id (replaced, never modified)
	onChange []func()
}

// Start watches the peer Leases of opts.Namespace (until ctx is done) and
// returns once the first list is in. It also re-reads them every quarter
// of the lease duration, so that expired ones drop out without an event.
func Start(ctx context.Context, client kubernetes.Interface, opts Options) (*Directory, error) {
	if opts.Namespace == "" || opts.Node == "" {
		return nil, errors.New("kubepeer: a namespace and a node name are required")
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.LeaseDuration < 2*time.Second {
		return nil, fmt.Errorf("kubepeer: lease duration %s: want at least 2s", opts.LeaseDuration)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	d := &Directory{client: client, opts: opts, groups: map[string][]peer.Peer{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = GroupLabel }))
	inf := f.Coordination().V1().Leases().Informer()
	store := inf.GetStore()
	d.lister = store.List
	rebuild := func(any) { d.rebuild() }
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
		return nil, fmt.Errorf("kubepeer: no list of Leases in namespace %s within a minute (RBAC: the node plugin needs list and watch on leases there)", opts.Namespace)
	}
	d.rebuild()
	go func() {
		t := time.NewTicker(opts.LeaseDuration / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.rebuild()
			}
		}
	}()
	return d, nil
}

// ValidGroup checks a group name: it is a label value and part of a Lease
// name (1–63 bytes of [a-z0-9-], here).
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

// nodeHash is a short hash of a node name: node names are DNS subdomains
// of up to 253 bytes, too long for a Lease name with a group in it or for
// a label value.
func nodeHash(node string) string {
	s := sha256.Sum256([]byte(node))
	return hex.EncodeToString(s[:8])
}

// NodeLabelValue is the NodeLabel value of node: the name itself when it
// is a valid label value, else "h-" and a hash of it.
func NodeLabelValue(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 && !strings.HasPrefix(node, "h-") {
		return node
	}
	return "h-" + nodeHash(node)
}

// LeaseName is the name of node's Lease in group.
func LeaseName(group, node string) string { return "peer-" + group + "-" + nodeHash(node) }

// Advertise records that this node serves group's peers as p, or renews
// that record: a Lease that expires LeaseDuration from now unless renewed.
func (d *Directory) Advertise(ctx context.Context, group string, p peer.Peer) error {
	if err := ValidGroup(group); err != nil {
		return err
	}
	v := peer.FormatPeer(p)
	if ps, err := peer.ParsePeers(v); err != nil || len(ps) != 1 {
		return fmt.Errorf("kubepeer: peer %q is not one peer: %v", v, err)
	}
	now := metav1.NewMicroTime(d.opts.Now())
	leases := d.client.CoordinationV1().Leases(d.opts.Namespace)
	name := LeaseName(group, d.opts.Node)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(d.opts.Node),
		LeaseDurationSeconds: ptr.To(int32(d.opts.LeaseDuration / time.Second)),
		RenewTime:            &now,
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: d.opts.Namespace,
		Labels:      map[string]string{GroupLabel: group, NodeLabel: NodeLabelValue(d.opts.Node)},
		Annotations: map[string]string{PeerAnnotation: v}}
	for range 3 { // a conflicting update (two health rounds) is retried
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			spec.AcquireTime = &now
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: meta, Spec: spec}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		} else if err == nil {
			spec.AcquireTime = l.Spec.AcquireTime
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != d.opts.Node || spec.AcquireTime == nil {
				spec.AcquireTime = &now
			}
			l.Labels, l.Annotations, l.Spec = meta.Labels, meta.Annotations, spec
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("kubepeer: lease %s/%s: %w", d.opts.Namespace, name, err)
		}
		return nil
	}
	return fmt.Errorf("kubepeer: lease %s/%s: conflicting updates", d.opts.Namespace, name)
}

// Withdraw deletes this node's Lease of group (none: done).
func (d *Directory) Withdraw(ctx context.Context, group string) error {
	if err := ValidGroup(group); err != nil {
		return err
	}
	return d.delete(ctx, LeaseName(group, d.opts.Node))
}

func (d *Directory) delete(ctx context.Context, name string) error {
	err := d.client.CoordinationV1().Leases(d.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubepeer: delete lease %s/%s: %w", d.opts.Namespace, name, err)
	}
	return nil
}

// Retain deletes this node's Leases of every group not in groups: the
// entries of datasets it no longer mounts whose Withdraw failed or never
// ran (a node plugin killed mid-unstage). It lists from the API server,
// not the watch, so that a start sees every Lease. It returns the number
// deleted.
func (d *Directory) Retain(ctx context.Context, groups []string) (int, error) {
	sel := labels.SelectorFromSet(labels.Set{NodeLabel: NodeLabelValue(d.opts.Node)}).String()
	list, err := d.client.CoordinationV1().Leases(d.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 500})
	if err != nil {
		return 0, fmt.Errorf("kubepeer: list this node's leases in %s: %w", d.opts.Namespace, err)
	}
	var errs []error
	n := 0
	for _, l := range list.Items {
		g := l.Labels[GroupLabel]
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != d.opts.Node || slices.Contains(groups, g) {
			continue // another node's (a hash collision of the label) or kept
		}
		if err := d.delete(ctx, l.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	// More than 500 Leases of one node: the rest go at the next round.
	return n, errors.Join(errs...)
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

// OnChange calls f (on the watch's or the expiry timer's goroutine) after
// every change of any group's peers.
func (d *Directory) OnChange(f func()) {
	d.mu.Lock()
	d.onChange = append(d.onChange, f)
	d.mu.Unlock()
}

// Live reports whether l has not expired at now: its renewTime plus its
// leaseDurationSeconds lies ahead. A Lease without either is not live.
func Live(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// peerOf returns the group and peer a Lease advertises, ok false for one
// that is malformed, misnamed or expired.
func peerOf(l *coordinationv1.Lease, now time.Time) (string, peer.Peer, bool) {
	group := l.Labels[GroupLabel]
	v := l.Annotations[PeerAnnotation]
	if ValidGroup(group) != nil || l.Spec.HolderIdentity == nil || len(v) > maxPeerValue ||
		l.Name != LeaseName(group, *l.Spec.HolderIdentity) || !Live(l, now) {
		return "", peer.Peer{}, false
	}
	ps, err := peer.ParsePeers(v)
	if err != nil || len(ps) != 1 {
		return "", peer.Peer{}, false // not ours to fix; its node rewrites or drops it
	}
	return group, ps[0], true
}

func (d *Directory) rebuild() {
	d.rebuildMu.Lock()
	defer d.rebuildMu.Unlock()
	now := d.opts.Now()
	groups := map[string][]peer.Peer{}
	for _, o := range d.lister() {
		l, ok := o.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		if g, p, ok := peerOf(l, now); ok {
			groups[g] = append(groups[g], p)
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
