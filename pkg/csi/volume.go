package csi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Volume parameters: StorageClass parameters, PV volumeAttributes and inline
// volume attributes all use the keys of pkg/volattr, which also validates
// them (the job controller renders PVs with the same package).
const (
	// ephemeralKey marks an inline ephemeral volume in NodePublish.
	ephemeralKey = "csi.storage.k8s.io/ephemeral"
)

// Secret keys accepted in node-stage (and, for inline volumes, node-publish)
// secrets: those `cachefs mount --credentials-fd` reads, through which they
// reach the mount process (see startDetached).
var secretKeys = mountapi.CredentialKeys

// volumeParams are a volume's validated parameters.
type volumeParams = volattr.Params

// datasetKey names the mount process (and cache directory) serving these
// parameters with these credentials: volumes with equal parameters and
// equal credentials share one mount and one cache. creds is credentialsID
// of the volume's secrets: "" for none, which keeps the keys of volumes
// without secrets what they were before credentials were part of the key
// (so an upgraded driver re-adopts their mounts and caches).
func datasetKey(p volumeParams, creds string) string {
	h := sha256.New()
	for _, s := range []string{p.Source, strconv.FormatInt(p.CacheSize, 10), p.Policy, p.Manifest} {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	if p.ReadaheadFiles != nil {
		// Only when set, so that the keys of volumes without it (and their
		// cache directories) are what they were before the parameter. Since
		// auto became the default, "0" (off) is set too, and keyed apart.
		fmt.Fprintf(h, "readaheadFiles:%d\n", *p.ReadaheadFiles)
	}
	if p.CacheScope != "" {
		// Only for cluster scope (node scope is ""), so that node-scope
		// keys are what they were before the parameter.
		fmt.Fprintf(h, "cacheScope:%s\n", p.CacheScope)
	}
	if creds != "" {
		fmt.Fprintf(h, "credentials:%s\n", creds)
	}
	return "ds-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// credentialsID is an HMAC-SHA256, under the node's secret key, of a
// volume's checked secrets (sorted key=value pairs): "" when there are none.
// It tells credentials apart without storing or logging them, and without
// the node key it cannot be used to guess them.
func credentialsID(nodeKey []byte, secrets map[string]string) string {
	if len(secrets) == 0 {
		return ""
	}
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m := hmac.New(sha256.New, nodeKey)
	for _, k := range keys {
		fmt.Fprintf(m, "%d:%s=%d:%s\n", len(k), k, len(secrets[k]), secrets[k])
	}
	return hex.EncodeToString(m.Sum(nil))
}

// parseParams validates volume parameters. Errors are InvalidArgument and
// name the bad parameter.
func parseParams(in map[string]string, defaultCacheSize int64) (volumeParams, error) {
	p, err := volattr.Parse(in, defaultCacheSize)
	if err != nil {
		return p, status.Error(codes.InvalidArgument, err.Error())
	}
	return p, nil
}

// params parses and validates a volume's parameters with the node's
// defaults and limits: InvalidArgument for malformed input, OutOfRange for a
// cacheSize over MaxCacheSize.
func (d *Driver) params(in map[string]string) (volumeParams, error) {
	p, err := parseParams(in, d.cfg.DefaultCacheSize)
	if err != nil {
		return p, err
	}
	if p.CacheSize > d.cfg.MaxCacheSize {
		return p, status.Errorf(codes.OutOfRange, "parameter %q: %s is over this node's limit of %s (--max-cache-size)",
			volattr.CacheSize, units.FormatSize(p.CacheSize), units.FormatSize(d.cfg.MaxCacheSize))
	}
	return p, nil
}

// inlineParams is params for an inline ephemeral volume, whose author is a
// pod's: a missing cacheSize is the smaller of the node's default and
// MaxInlineCacheSize; a cacheSize over MaxCacheSize is OutOfRange as for
// any volume, one over MaxInlineCacheSize ResourceExhausted naming the
// limit.
func (d *Driver) inlineParams(in map[string]string) (volumeParams, error) {
	p, err := parseParams(in, min(d.cfg.DefaultCacheSize, d.cfg.MaxInlineCacheSize))
	if err != nil {
		return p, err
	}
	if p.CacheSize > d.cfg.MaxCacheSize {
		return p, status.Errorf(codes.OutOfRange, "parameter %q: %s is over this node's limit of %s (--max-cache-size)",
			volattr.CacheSize, units.FormatSize(p.CacheSize), units.FormatSize(d.cfg.MaxCacheSize))
	}
	if p.CacheSize > d.cfg.MaxInlineCacheSize {
		return p, status.Errorf(codes.ResourceExhausted, "parameter %q: %s is over this node's limit for inline volumes, %s (--max-inline-cache-size): use a smaller cacheSize or a PersistentVolume",
			volattr.CacheSize, units.FormatSize(p.CacheSize), units.FormatSize(d.cfg.MaxInlineCacheSize))
	}
	return p, nil
}

// checkInlineEnabled refuses inline ephemeral volumes unless the admin
// enabled them (AllowInlineVolumes); checked first.
func (d *Driver) checkInlineEnabled() error {
	if !d.cfg.AllowInlineVolumes {
		return status.Error(codes.PermissionDenied, "inline ephemeral volumes are disabled on this node (the admin enables them with --allow-inline-volumes, chart value node.inlineVolumes): use a PersistentVolume")
	}
	return nil
}

// checkSource applies the node's source policy (package sourcepolicy) to a
// volume about to be staged or published, before anything is created for
// it: secrets are the volume's checked secrets (see hasCredentials). Every
// attribute that names something to read goes through it: the source and
// the manifest (sourcepolicy.CheckVolume). The checked values replace the
// given ones and are what the mount is given: a local source or manifest
// by its symlink-resolved path (so that a symlink swapped after the check
// cannot redirect the mount), a manifest URL in canonical form, nfs uid/gid
// as a rule pins them. An inline volume must then also be a network source
// with the pod's own secrets (checkInlineEnabled comes first), and takes no
// local manifest. A refusal is PermissionDenied naming the rule (the
// interceptor logs it once); a malformed manifest is InvalidArgument.
func (d *Driver) checkSource(p *volumeParams, secrets map[string]string, inline bool) error {
	src, err := source.Parse(p.Source)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "parameter %q: %v", volattr.Source, err)
	}
	own := hasCredentials(src, secrets)
	checked, err := d.policy.CheckVolume(sourcepolicy.Volume{
		Source:      src,
		Manifest:    p.Manifest,
		Credentials: func(place source.Source) bool { return hasCredentials(place, secrets) },
		Tenant:      inline,
	})
	if err != nil {
		return policyError(err, func() bool { return d.missingUnderRoot(src) }, src)
	}
	if inline {
		if src.Kind == source.KindPosix || slices.ContainsFunc(src.Replicas, func(r source.Source) bool { return r.Kind == source.KindPosix }) {
			return status.Errorf(codes.PermissionDenied, "inline volume source %s: an inline volume takes only network sources (a local path needs a PersistentVolume the admin creates)", p.Source)
		}
		if !own {
			return status.Errorf(codes.PermissionDenied, "inline volume source %s: an inline volume needs its own credentials (nodePublishSecretRef); it never reads with the node's identity", p.Source)
		}
	}
	p.Source, p.Manifest = checked.Source.String(), checked.Manifest
	return nil
}

// policyError maps a refusal of the source policy to its gRPC status:
// InvalidArgument for a malformed manifest, NotFound for a local source
// missing inside an allowed root (missing reports that), else
// PermissionDenied naming the rule.
func policyError(err error, missing func() bool, src source.Source) error {
	switch {
	case errors.Is(err, sourcepolicy.ErrInvalidManifest):
		return status.Errorf(codes.InvalidArgument, "parameter %q: %v", volattr.Manifest, err)
	case !errors.Is(err, sourcepolicy.ErrForbidden):
		return status.Errorf(codes.Internal, "source policy: %v", err)
	case missing != nil && missing():
		return status.Errorf(codes.NotFound, "source %s: no such file or directory", src.Path)
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// missingUnderRoot reports whether a local source does not exist but its
// nearest existing ancestor is itself an allowed source: a dataset missing
// inside an allowed root is NotFound, as the mount would say, while a path
// anywhere else stays refused whether or not it exists.
func (d *Driver) missingUnderRoot(src source.Source) bool {
	if src.Kind != source.KindPosix || !filepath.IsAbs(src.Path) {
		return false
	}
	p := filepath.Clean(src.Path)
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	for p != "/" {
		p = filepath.Dir(p)
		if _, err := os.Lstat(p); err == nil {
			anc := src
			anc.Path = p
			_, err := d.policy.Check(anc, false)
			return err == nil
		}
	}
	return false
}

// checkSourceEarly is CreateVolume's check: it sees no secrets and may run
// where the source is not visible (sourcepolicy.Checker.CheckVolumeNames).
// The manifest is checked as on the node, so a StorageClass naming one
// outside its source fails at provisioning, not at the first pod.
func (d *Driver) checkSourceEarly(p volumeParams) error {
	src, err := source.Parse(p.Source)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "parameter %q: %v", volattr.Source, err)
	}
	err = d.policy.CheckVolumeNames(sourcepolicy.Volume{
		Source:      src,
		Manifest:    p.Manifest,
		Credentials: func(source.Source) bool { return true }, // not judged here: the node sees the secrets
	})
	if err != nil {
		return policyError(err, nil, src)
	}
	return nil
}

// checkSecrets keeps only the known secret keys and rejects others by name
// (never by value).
func checkSecrets(in map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var unknown []string
	for k, v := range in {
		if slices.Contains(secretKeys, k) {
			out[k] = v
		} else {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, status.Errorf(codes.InvalidArgument, "unknown secret keys %q (known: %s)", unknown, strings.Join(secretKeys, ", "))
	}
	if (out[mountapi.CredentialAccessKeyID] == "") != (out[mountapi.CredentialSecretAccessKey] == "") {
		return nil, status.Errorf(codes.InvalidArgument, "secrets must hold both %s and %s, or neither", mountapi.CredentialAccessKeyID, mountapi.CredentialSecretAccessKey)
	}
	if (out[mountapi.CredentialCephUserID] == "") != (out[mountapi.CredentialCephUserKey] == "") {
		return nil, status.Errorf(codes.InvalidArgument, "secrets must hold both %s and %s (a CephFS client name and its key), or neither", mountapi.CredentialCephUserID, mountapi.CredentialCephUserKey)
	}
	return out, nil
}

// hasCredentials reports whether checked secrets carry credentials for
// every network place of src: an S3 key pair for s3 (a session token alone
// is none), a CephFS userID/userKey pair for cephfs. nfs never has any:
// AUTH_UNIX uid/gid are claims any client can make, so an nfs source reads
// with the node's network identity and needs the admin's say-so (package
// sourcepolicy). Secrets of the wrong kind count as none, so that an s3
// source with only CephFS secrets never falls back to the node's AWS
// identity.
func hasCredentials(src source.Source, secrets map[string]string) bool {
	places := []source.Source{src}
	if src.Kind == source.KindMirror {
		places = src.Replicas
	}
	for _, p := range places {
		switch p.Kind {
		case source.KindPosix:
		case source.KindS3:
			if secrets[mountapi.CredentialAccessKeyID] == "" || secrets[mountapi.CredentialSecretAccessKey] == "" {
				return false
			}
		case source.KindCephFS:
			if secrets[mountapi.CredentialCephUserID] == "" || secrets[mountapi.CredentialCephUserKey] == "" {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// maxIDLen is the CSI size limit of string fields such as volume ids.
const maxIDLen = 128

// checkVolumeID accepts ids that are safe as file names: 1–128 bytes of
// letters, digits, '.', '_', '-', not starting with '.'.
func checkVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(id) > maxIDLen {
		return status.Errorf(codes.InvalidArgument, "volume id is %d bytes, over the %d-byte limit", len(id), maxIDLen)
	}
	if id[0] == '.' {
		return status.Errorf(codes.InvalidArgument, "volume id %q must not start with '.'", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return status.Errorf(codes.InvalidArgument, "volume id %q holds %q: only letters, digits, '.', '_' and '-' are allowed", id, c)
		}
	}
	return nil
}

// checkPath accepts an absolute, clean path without "..".
func checkPath(what, p string) error {
	if p == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", what)
	}
	if !filepath.IsAbs(p) {
		return status.Errorf(codes.InvalidArgument, "%s %q must be absolute", what, p)
	}
	if filepath.Clean(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
		return status.Errorf(codes.InvalidArgument, "%s %q must be a clean path without '..'", what, p)
	}
	if strings.ContainsRune(p, 0) {
		return status.Errorf(codes.InvalidArgument, "%s holds a NUL byte", what)
	}
	return nil
}

// Access modes. Every mount is read-only at the VFS level, whatever the
// mode. Multi-node writer modes are refused: a dataset volume shared by many
// nodes can never take writes. Single-node writer modes are accepted as
// read-only mounts by default, because kubelet asks for SINGLE_NODE_WRITER
// for inline ephemeral volumes and ReadWriteOnce claims, and csi-sanity uses
// it throughout; with StrictReadOnly they are accepted only in a publish
// that asks for readonly.
func (d *Driver) checkCapability(c *csipb.VolumeCapability, readonly, publish bool) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if c.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "block access is not supported: a dataset volume is a read-only file tree (use a mount capability)")
	}
	if c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume capability must have the mount access type")
	}
	if fs := c.GetMount().GetFsType(); fs != "" && fs != "fuse.cachefs" && fs != "cachefs" {
		return status.Errorf(codes.InvalidArgument, "fsType %q is not supported (leave it empty)", fs)
	}
	mode := c.GetAccessMode().GetMode()
	switch mode {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return nil
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		if !d.cfg.StrictReadOnly || (publish && readonly) || !publish {
			return nil
		}
		return status.Errorf(codes.InvalidArgument, "access mode %s needs a readOnly publish: EpochFS volumes are read-only datasets (set readOnly: true on the volume)", mode)
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return status.Errorf(codes.InvalidArgument, "access mode %s is a writer mode: EpochFS volumes are read-only datasets; use ReadOnlyMany (MULTI_NODE_READER_ONLY)", mode)
	}
	return status.Errorf(codes.InvalidArgument, "access mode %s is not supported; use ReadOnlyMany (MULTI_NODE_READER_ONLY)", mode)
}
