// Package volattr is the contract between everything that describes an
// EpochFS dataset volume and the CSI driver that mounts it: the driver name,
// the volume attribute keys (StorageClass parameters, PersistentVolume
// volumeAttributes, inline volume attributes), their limits and their
// validation. The CSI driver (pkg/csi) parses with it; the job controller
// renders PersistentVolumes with its keys and validates a TrainingJob's
// datasets with the same Parse, so the two can never disagree.
//
// It knows nothing of gRPC, Kubernetes objects or mount processes.
package volattr

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// DriverName is the CSI driver's name (a CSIDriver object, a PV's
// spec.csi.driver, an inline volume's csi.driver).
const DriverName = "cachefs.epochfs.io"

// Volume attribute keys.
const (
	// Source is the dataset URL: a local or kernel-mounted path, s3://,
	// mirror:… (see docs/DESIGN.md). Required.
	Source = "source"
	// CacheSize is the node cache's size for the dataset ("50GiB", "512Mi").
	CacheSize = "cacheSize"
	// Manifest is a dataset manifest: an absolute path or a URL.
	Manifest = "manifest"
	// Policy is the cache policy: "nr" (the default) is the only one.
	Policy = "policy"
	// Prefetch ("true"/"false") fills the NR cache in the background once
	// the dataset is mounted.
	Prefetch = "prefetch"
	// ReadaheadFiles is the mount's --readahead-files: when an open of a
	// small file misses, the next N files of its directory are fetched into
	// the cache in the background. "auto" (the default, also when absent:
	// follow the backend's measured latency) or 0 (off) to
	// MaxReadaheadFiles.
	ReadaheadFiles = "readaheadFiles"
	// ReadaheadFilesAuto is the ReadaheadFiles value of the default.
	ReadaheadFilesAuto = "auto"
	// CacheScope is the mount's --cache-scope: CacheScopeNode (the
	// default, also when absent) or CacheScopeCluster (the dataset's cache
	// peers, the nodes that mount it in cluster scope, split its files;
	// pkg/peer). Part of the dataset key: node- and cluster-scope volumes
	// of one dataset get separate mounts and caches.
	CacheScope        = "cacheScope"
	CacheScopeNode    = "node"
	CacheScopeCluster = "cluster"

	// KubernetesPrefix marks keys added by Kubernetes (external-provisioner
	// --extra-create-metadata, podInfoOnMount); Parse ignores them.
	KubernetesPrefix = "csi.storage.k8s.io/"
	// ClaimNamespace is the namespace of a PersistentVolume's claim: in
	// CreateVolume's parameters (external-provisioner
	// --extra-create-metadata), and in the volume attributes of the PVs
	// that CreateVolume and the job controller make. PodNamespace is the
	// pod's namespace, which the kubelet writes into an inline volume's
	// NodePublish context (podInfoOnMount), over any value the pod's
	// attributes carry. The node charges per-namespace limits to them.
	ClaimNamespace = KubernetesPrefix + "pvc/namespace"
	PodNamespace   = KubernetesPrefix + "pod.namespace"
	// ClaimName and PVName are the claim's and the PersistentVolume's
	// names (external-provisioner --extra-create-metadata and csi-driver
	// --mode provisioner put them, with ClaimNamespace, into CreateVolume's
	// parameters, and CreateVolume copies them into the PV's attributes; the job controller
	// into its PVs' attributes; an admin adds them to a static PV's
	// volumeAttributes). PodName is the pod's name (podInfoOnMount). The
	// node plugin shows them in epochfs_volume_info (pkg/csi); Parse
	// ignores them, as every KubernetesPrefix key.
	ClaimName = KubernetesPrefix + "pvc/name"
	PVName    = KubernetesPrefix + "pv/name"
	PodName   = KubernetesPrefix + "pod.name"
)

// MaxReadaheadFiles bounds ReadaheadFiles: more fetches in flight per miss
// than this only queue up behind the backend.
const MaxReadaheadFiles = 256

// Keys lists every attribute key Parse accepts, in documentation order.
var Keys = []string{Source, CacheSize, Manifest, Policy, Prefetch, ReadaheadFiles, CacheScope}

// ErrInvalid is wrapped by every Parse error. The message names the
// attribute, and the value where it is not a secret (attributes never are).
var ErrInvalid = errors.New("invalid volume attributes")

// Params are a volume's validated attributes.
type Params struct {
	Source    string `json:"source"`
	CacheSize int64  `json:"cacheSize"` // bytes
	Manifest  string `json:"manifest,omitempty"`
	Policy    string `json:"policy"`
	// Prefetch fills the NR cache in the background once the dataset is
	// mounted (through the mount's control socket). Volumes that differ only
	// here share a mount.
	Prefetch bool `json:"prefetch,omitempty"`
	// ReadaheadFiles, when set, is passed to the mount (--readahead-files
	// N; 0: off); nil leaves the mount's default, auto.
	ReadaheadFiles *int `json:"readaheadFiles,omitempty"`
	// CacheScope is CacheScopeNode or CacheScopeCluster; "" (a volume
	// recorded before the parameter) means CacheScopeNode. Parse leaves
	// node scope as "" so that the params, and the dataset keys, of
	// node-scope volumes are what they were before the parameter.
	CacheScope string `json:"cacheScope,omitempty"`
}

// Cluster reports whether the volume asks for the cluster-wide cache.
func (p Params) Cluster() bool { return p.CacheScope == CacheScopeCluster }

// invalid returns an error wrapping ErrInvalid whose text is the formatted
// message alone (callers such as the CSI driver show it as is).
func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

// Parse validates volume attributes. A missing cacheSize is
// defaultCacheSize; a missing policy is NR. Keys under KubernetesPrefix are
// ignored; any other unknown key is an error naming it.
func Parse(in map[string]string, defaultCacheSize int64) (Params, error) {
	p := Params{Policy: source.PolicyNR, CacheSize: defaultCacheSize}
	var unknown []string
	for k, v := range in {
		switch k {
		case Source:
			src, err := source.Parse(v)
			if err != nil {
				return p, invalid("parameter %q: %v", Source, err)
			}
			p.Source = src.String()
		case CacheSize:
			n, err := units.ParseSize(v)
			if err != nil {
				return p, invalid("parameter %q: %v", CacheSize, err)
			}
			p.CacheSize = n
		case Manifest:
			if v != "" && !filepath.IsAbs(v) && !strings.Contains(v, "://") {
				return p, invalid("parameter %q: %q must be an absolute path or a URL", Manifest, v)
			}
			p.Manifest = v
		case Prefetch:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return p, invalid("parameter %q: %q is not true or false", Prefetch, v)
			}
			p.Prefetch = b
		case ReadaheadFiles:
			if v == ReadaheadFilesAuto {
				p.ReadaheadFiles = nil
				break
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > MaxReadaheadFiles {
				return p, invalid("parameter %q: %q is neither %q nor a number of files from 0 to %d", ReadaheadFiles, v, ReadaheadFilesAuto, MaxReadaheadFiles)
			}
			p.ReadaheadFiles = &n
		case CacheScope:
			switch v {
			case CacheScopeNode:
				p.CacheScope = ""
			case CacheScopeCluster:
				p.CacheScope = CacheScopeCluster
			default:
				return p, invalid("parameter %q: %q is neither %q nor %q", CacheScope, v, CacheScopeNode, CacheScopeCluster)
			}
		case Policy:
			if v != source.PolicyNR {
				return p, invalid("parameter %q: %q is not a cache policy of EpochFS (the only one is %q)", Policy, v, source.PolicyNR)
			}
			p.Policy = v
		default:
			if !strings.HasPrefix(k, KubernetesPrefix) {
				unknown = append(unknown, k)
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return p, invalid("unknown parameters %q (known: %s)", unknown, strings.Join(Keys, ", "))
	}
	if p.Source == "" {
		return p, invalid("parameter %q is required (the dataset URL, e.g. s3://bucket/prefix or /mnt/nfs/dataset)", Source)
	}
	return p, nil
}

// Attributes returns the parameters as volume attributes (a CSI volume
// context): Parse(p.Attributes(), x) == p.
func (p Params) Attributes() map[string]string {
	m := map[string]string{
		Source:    p.Source,
		CacheSize: strconv.FormatInt(p.CacheSize, 10),
		Policy:    p.Policy,
	}
	if p.Manifest != "" {
		m[Manifest] = p.Manifest
	}
	if p.Prefetch {
		m[Prefetch] = "true"
	}
	if p.ReadaheadFiles != nil {
		m[ReadaheadFiles] = strconv.Itoa(*p.ReadaheadFiles)
	}
	if p.CacheScope != "" {
		m[CacheScope] = p.CacheScope
	}
	return m
}
