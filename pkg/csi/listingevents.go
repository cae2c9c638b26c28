package csi

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Listing refusals as Kubernetes events.
//
// A mount without a manifest caps its listings (pkg/fusefs/listlimit.go):
// past a cap the directory reads as EFBIG, the mount log has an ERROR line
// naming it, and cachefs_listing_refusals_total{cap} counts it. The user who
// sees "File too large" looks at their pod, not at the mount log: at every
// health check the node plugin reads each dataset mount's counter (through
// its control socket, as its /metrics does) and, where a cap's count went
// up since the last check, records one Warning event ListingRefused on each
// pod that uses that dataset mount on this node (NodePublish's
// csi.storage.k8s.io/pod.name and pod.namespace, which the kubelet sends
// because the CSIDriver has podInfoOnMount).
//
// Bounds: at most one event per dataset mount, cap and pod per health
// interval (an increase seen sooner is reported at the next check after
// it), through client-go's EventRecorder, which rate-limits and aggregates
// repeats into one Event's count. The message is built from fixed text
// only: the cap and its flag come from listingCaps (an unknown label value
// is ignored), the dataset by its id (a hash), never a directory name, the
// source URL or a credential.
const (
	// ReasonListingRefused is the reason of the Warning event.
	ReasonListingRefused = "ListingRefused"
	// eventComponent is the events' source component.
	eventComponent = "epochfs-node"
)

// listingCaps are the cap label values of cachefs_listing_refusals_total
// and the mount flag each one is set by: the only cap text an event carries.
var listingCaps = map[string]string{
	metrics.CapDirEntries:    "--" + mountapi.FlagMaxDirEntries,
	metrics.CapListingMemory: "--" + mountapi.FlagMaxListingMemory,
	metrics.CapListingPages:  "--" + mountapi.FlagMaxDirEntries + " (the page cap: its value / 100 + 100 requests)",
	"page-size":              "none (an S3 listing page over 8 MiB)",
}

// podRef names a pod the kubelet published a volume to. UID is optional
// (older records); with it `kubectl describe pod` shows the event, which
// it looks up by the pod's uid.
type podRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// publishPod returns the pod of a NodePublish volume context, if the
// kubelet sent it (podInfoOnMount).
func publishPod(vctx map[string]string) (podRef, bool) {
	p := podRef{Namespace: vctx[volattr.PodNamespace], Name: vctx[volattr.PodName]}
	if !(len(validation.IsDNS1123Label(p.Namespace)) == 0 && len(validation.IsDNS1123Subdomain(p.Name)) == 0) {
		return podRef{}, false
	}
	if uid := vctx[volattr.KubernetesPrefix+"pod.uid"]; isUID(uid) {
		p.UID = uid
	}
	return p, true
}

// isUID reports whether s has the form of a Kubernetes uid (a UUID:
// 8-4-4-4-12 lowercase hex digits).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
				return false
			}
		}
	}
	return true
}

// listingEvents records the events; it remembers, per dataset mount
// process, the counts last seen and when each cap was last reported.
type listingEvents struct {
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	node        string
	every       time.Duration // least time between two events of one dataset mount and cap

	mu   sync.Mutex
	seen map[string]*refusalCounts // by dataset key
}

// refusalCounts is what one dataset mount process has counted.
type refusalCounts struct {
	pid      int
	reported map[string]float64   // by cap: the count last reported
	at       map[string]time.Time // by cap: when it was last reported
}

// due returns the caps (known ones only, sorted) whose count went up since
// the last report, leaving out those reported less than every ago: their
// increase waits for a later check.
func (rc *refusalCounts) due(counts map[string]float64, now time.Time, every time.Duration) []string {
	var out []string
	for c, v := range counts {
		if v < rc.reported[c] {
			// The count went back: a new mount process under the same
			// supervisor (a crash recovery or a takeover; the pid kept is
			// the supervisor's) counts from 0.
			rc.reported[c] = 0
		}
		if _, known := listingCaps[c]; !known || v <= rc.reported[c] {
			continue
		}
		if last, ok := rc.at[c]; ok && now.Sub(last) < every {
			continue
		}
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func newListingEvents(client kubernetes.Interface, nodeID string, every time.Duration) *listingEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &listingEvents{
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent, Host: nodeID}),
		broadcaster: b,
		node:        nodeID,
		every:       every,
		seen:        map[string]*refusalCounts{},
	}
}

// refusals reads a mount's cachefs_listing_refusals_total by cap.
func refusals(ctx context.Context, cacheDir string) (map[string]float64, error) {
	mfs, err := remoteMetrics(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	if mf := mfs["cachefs_listing_refusals_total"]; mf != nil {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == metrics.LabelCap {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out, nil
}

// reportListingRefusals is the health loop's step: see the top of the
// file. Without a kube client it says so in the log, once.
func (n *nodeState) reportListingRefusals(ctx context.Context) {
	ev := n.cfg.events
	if ev == nil {
		n.noEventsOnce.Do(func() {
			n.cfg.log.Info("listing refusals are not reported as Kubernetes events: no kube client (neither --node-labels nor cluster scope); the mount logs and cachefs_listing_refusals_total have them")
		})
		return
	}
	keys := n.datasetKeys()
	targets := n.refusalTargets(keys)
	all := n.scrapeRefusals(ctx, targets)
	now := time.Now()
	for i, t := range targets {
		if all[i] != nil {
			ev.report(n.cfg.log, t, all[i], now)
		}
	}
	ev.forget(keys)
}

// refusalTarget is a dataset mount whose refusals are reported, with the
// pods they are reported on.
type refusalTarget struct {
	ds   *datasetMount // its identity (datasetMount.identity)
	pid  int
	pods []podRef
}

// refusalTargets returns the dataset mounts with keys that volumes use,
// with the pods of those volumes. A dataset whose lock is held (a start,
// stop or repair) is left to the next round.
func (n *nodeState) refusalTargets(keys []string) []refusalTarget {
	var targets []refusalTarget
	for _, key := range keys {
		unlock, ok := n.dsLocks.tryLock(key)
		if !ok {
			continue
		}
		if ds := n.dataset(key); ds != nil && len(ds.Users) > 0 {
			t := refusalTarget{ds: ds.identity(), pid: ds.PID}
			n.mu.Lock()
			for _, v := range n.volumes {
				if v.DatasetKey == key {
					for _, p := range v.Pods {
						if !slices.Contains(t.pods, p) {
							t.pods = append(t.pods, p)
						}
					}
				}
			}
			n.mu.Unlock()
			targets = append(targets, t)
		}
		unlock()
	}
	return targets
}

// scrapeRefusals reads the refusal counts of the targets' mounts, nil for
// a mount that did not answer. It asks them in parallel, as a scrape does:
// a mount that does not answer within mountScrapeTimeout delays this step
// by that much only.
func (n *nodeState) scrapeRefusals(ctx context.Context, targets []refusalTarget) []map[string]float64 {
	all := make([]map[string]float64, len(targets))
	sctx, cancel := context.WithTimeout(ctx, mountScrapeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts, err := refusals(sctx, t.ds.CacheDir)
			if err != nil {
				n.cfg.log.Debug("dataset mount metrics not read for listing refusals", "key", t.ds.Key, "err", err)
				return
			}
			all[i] = counts
		}()
	}
	wg.Wait()
	return all
}

// report records one event on each of t's pods for every cap whose count
// in counts is due (refusalCounts.due), and remembers what it reported.
func (ev *listingEvents) report(log *slog.Logger, t refusalTarget, counts map[string]float64, now time.Time) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	rc := ev.seen[t.ds.Key]
	if rc == nil || rc.pid != t.pid { // a new process counts from 0
		rc = &refusalCounts{pid: t.pid, reported: map[string]float64{}, at: map[string]time.Time{}}
		ev.seen[t.ds.Key] = rc
	}
	for _, c := range rc.due(counts, now, ev.every) {
		added := counts[c] - rc.reported[c]
		rc.reported[c], rc.at[c] = counts[c], now
		id, _ := cachelabel.DatasetID(t.ds.Params.Source)
		msg := fmt.Sprintf("epochfs refused %.0f directory listing(s) of dataset %s on node %s: past the mount's %s cap (flag %s). "+
			"Those directories read as EFBIG (\"File too large\"); the mount keeps serving every other directory. "+
			"Give the dataset a manifest, split the directory, or ask the admin to raise the cap; the node's mount log names the directory.",
			added, id, ev.node, c, listingCaps[c])
		if len(t.pods) == 0 {
			log.Warn("listing refused; no pod to report it on", "key", t.ds.Key, "cap", c, "count", counts[c])
		}
		for _, p := range t.pods {
			ev.recorder.Event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)},
				corev1.EventTypeWarning, ReasonListingRefused, msg)
		}
	}
}

// forget drops what was seen of the dataset mounts whose key is not in
// keys: their mounts are gone.
func (ev *listingEvents) forget(keys []string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for key := range ev.seen {
		if !slices.Contains(keys, key) {
			delete(ev.seen, key)
		}
	}
}

// ReportListingRefusals runs the health loop's listing-refusal step now
// (events are sent asynchronously by the recorder).
func (d *Driver) ReportListingRefusals(ctx context.Context) {
	if d.node != nil {
		d.node.reportListingRefusals(ctx)
	}
}
