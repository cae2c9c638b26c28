// Package cachelabel names the records through which a node says which
// datasets its EpochFS cache holds: one coordination.k8s.io/v1 Lease per
// node in the driver's namespace (LeaseName), held by the node, renewed by
// its CSI node plugin at every health check, with one annotation per
// dataset, `cache.epochfs.io/<dataset-id>`, whose value is the cached
// percent ("0".."100"). The job controller reads the live ones
// (Locations) to prefer nodes that already hold a job's datasets.
//
// Why Leases, not Node labels: writing labels needs
// `nodes patch`, with which any compromised node plugin could relabel,
// annotate or taint every Node; a Lease in the driver's namespace needs a
// Role there only, and one nobody renews (a dead node) expires by itself.
//
// The dataset ID is a stable short hash of the canonical source URL, so two
// spellings of one source (query parameters in another order, a trailing
// slash) have one ID. This package knows only pkg/backend's URL parser and
// the Lease type.
package cachelabel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epochfs/epochfs/pkg/source"
)

// Prefix starts every cache annotation key of a location Lease.
const Prefix = "cache.epochfs.io/"

// NodeLabel labels every location Lease (its value: a hash of the node
// name), so that the job controller lists them by label.
const NodeLabel = "cache.epochfs.io/node"

// MaxDatasetsPerLease bounds the annotations a reader takes from one Lease
// (a node mounts at most --max-mounts datasets, 64 by default).
const MaxDatasetsPerLease = 1024

// idLen is the number of hex digits of a dataset ID: 64 bits, short enough
// for a label name (63 characters at most), long enough that two datasets
// of one cluster never collide in practice.
const idLen = 16

// DatasetID returns the stable ID of a dataset source URL: the first 16 hex
// digits of the SHA-256 of its canonical form (source.Source.String). A
// malformed URL is an error from source.Parse naming the bad part.
func DatasetID(rawURL string) (string, error) {
	src, err := source.Parse(rawURL)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(src.String()))
	return hex.EncodeToString(sum[:])[:idLen], nil
}

// Key returns the annotation key for a dataset source URL:
// "cache.epochfs.io/<dataset-id>".
func Key(rawURL string) (string, error) {
	id, err := DatasetID(rawURL)
	if err != nil {
		return "", err
	}
	return Prefix + id, nil
}

// FormatPercent returns the annotation value for a cached percent, clamped to
// 0..100.
func FormatPercent(p int) string {
	return strconv.Itoa(min(max(p, 0), 100))
}

// ParsePercent parses an annotation value written by FormatPercent.
func ParsePercent(v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 100 {
		return 0, fmt.Errorf("cachelabel: value %q: want an integer percent 0..100", v)
	}
	return p, nil
}

func nodeHash(node string) string {
	s := sha256.Sum256([]byte(node))
	return hex.EncodeToString(s[:8])
}

// LeaseName is the name of node's location Lease ("cache-" and a hash of
// the node name: node names may be 253 bytes long).
func LeaseName(node string) string { return "cache-" + nodeHash(node) }

// NodeLabelValue is the NodeLabel value of node's Lease.
func NodeLabelValue(node string) string { return nodeHash(node) }

// Location is a node holding part of a dataset in its cache.
type Location struct {
	Node    string
	Percent int
}

// Locations reads location Leases: dataset ID → the nodes that hold some
// of it, most cached first (then by name). Leases that expired (renewTime
// plus leaseDurationSeconds is past at now), whose name is not their
// holder's LeaseName or whose holder is not a valid node name are skipped,
// as are annotations that are not Prefix + an ID with a percent; at most
// MaxDatasetsPerLease datasets are taken from one Lease.
func Locations(leases []coordinationv1.Lease, now time.Time) map[string][]Location {
	out := map[string][]Location{}
	for i := range leases {
		l := &leases[i]
		h := l.Spec.HolderIdentity
		if h == nil || len(validation.IsDNS1123Subdomain(*h)) > 0 || l.Name != LeaseName(*h) || !live(l, now) {
			continue
		}
		n := 0
		for k, v := range l.Annotations {
			id, ok := strings.CutPrefix(k, Prefix)
			if !ok || !validID(id) {
				continue
			}
			pct, err := ParsePercent(v)
			if err != nil {
				continue
			}
			if n++; n > MaxDatasetsPerLease {
				break
			}
			out[id] = append(out[id], Location{Node: *h, Percent: pct})
		}
	}
	for _, locs := range out {
		slices.SortFunc(locs, func(a, b Location) int {
			if a.Percent != b.Percent {
				return b.Percent - a.Percent
			}
			return strings.Compare(a.Node, b.Node)
		})
	}
	return out
}

func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func live(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}
