// Package sourcepolicy decides which dataset sources a volume may name. The
// CSI node plugin applies it on every stage and publish (the one place a pod
// author cannot bypass); CreateVolume and the job controller apply the same
// check early, so a user sees a refusal when submitting rather than when a
// pod starts.
//
// The rules, safest first:
//   - a local source (/path, file://) is refused unless it lies under one of
//     the admin's AllowedLocalRoots, compared after cleaning and resolving
//     symlinks; "/", /proc, /sys, /dev and every Forbidden path (the driver's
//     state dir, the cache root, kubelet's directory) are refused whatever
//     the roots say, as is any source that contains one of them;
//   - a network source (s3://, cephfs://, nfs://) must match one of the
//     Network rules when there are any;
//   - a network source without credentials of its own is refused unless the
//     admin allows the node's own identity (AllowNodeCredentials), since it
//     would otherwise read, and sign requests to a user-chosen endpoint, with
//     the node's credentials;
//   - an nfs source never has credentials of its own (the server trusts the
//     node's address; AUTH_UNIX uid/gid are claims), so it needs a Network
//     rule naming its export, or AllowNodeCredentials;
//   - a mirror is checked replica by replica.
//
// Every refusal wraps ErrForbidden and names the rule; it never quotes a
// credential (a Source cannot hold one). The package knows nothing of gRPC
// or Kubernetes.
package sourcepolicy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/epochfs/epochfs/pkg/backend"
)

// ErrForbidden is wrapped by every refusal of Check.
var ErrForbidden = errors.New("source not allowed")

// AlwaysForbidden are never allowed as (or inside, or around) a local
// source, whatever the configuration says.
var AlwaysForbidden = []string{"/proc", "/sys", "/dev"}

// Policy is the node's source policy. The zero Policy refuses every local
// source, allows any network source that brings its own credentials, and
// refuses network sources without credentials.
type Policy struct {
	// AllowedLocalRoots are directories under which local sources are
	// allowed (a root itself is allowed too). Empty: no local source.
	AllowedLocalRoots []string
	// Forbidden are paths that no local source may be, lie under, or
	// contain: the driver's state dir, the cache root, kubelet's directory.
	// "/" and AlwaysForbidden are added by Check.
	Forbidden []string
	// Network restricts network sources to these rules, each a source URL
	// (s3://bucket[/prefix][?endpoint=URL], cephfs://host/path,
	// nfs://host/export): a source matches a rule of its kind with the same
	// endpoint or host and bucket whose path or prefix contains its own (on
	// a '/' boundary). Empty: any network source.
	Network []string
	// AllowNodeCredentials lets a network source without credentials of
	// its own read with the node's identity (environment, shared files, an
	// instance role). Off by default.
	AllowNodeCredentials bool
}

// Checker is a validated Policy with its paths resolved once.
type Checker struct {
	roots     []string
	forbidden []string
	network   []backend.Source
	nodeCreds bool
}

// New validates p: every root and forbidden path must be absolute, every
// network rule a network source URL. Roots and forbidden paths that exist
// are resolved through symlinks (a root that does not exist yet is kept as
// cleaned, and matches nothing until it exists).
func New(p Policy) (*Checker, error) {
	c := &Checker{nodeCreds: p.AllowNodeCredentials}
	for _, r := range p.AllowedLocalRoots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("sourcepolicy: allowed local root %q must be an absolute path", r)
		}
		r = resolve(r)
		if r == "/" {
			return nil, fmt.Errorf("sourcepolicy: allowed local root %q is the whole file system", r)
		}
		c.roots = append(c.roots, r)
	}
	for _, f := range append(append([]string{}, AlwaysForbidden...), p.Forbidden...) {
		if f == "" {
			continue
		}
		if !filepath.IsAbs(f) {
			return nil, fmt.Errorf("sourcepolicy: forbidden path %q must be absolute", f)
		}
		c.forbidden = append(c.forbidden, filepath.Clean(f))
		if r := resolve(f); r != filepath.Clean(f) {
			c.forbidden = append(c.forbidden, r)
		}
	}
	for _, n := range p.Network {
		src, err := backend.Parse(n)
		if err != nil {
			return nil, fmt.Errorf("sourcepolicy: network rule: %w", err)
		}
		switch src.Kind {
		case backend.KindS3, backend.KindCephFS, backend.KindNFS:
			c.network = append(c.network, src)
		default:
			return nil, fmt.Errorf("sourcepolicy: network rule %q is a %s source, want s3://, cephfs:// or nfs://", n, src.Kind)
		}
	}
	return c, nil
}

// resolve cleans p and resolves symlinks when it exists.
func resolve(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// Check reports whether a volume may mount src. hasCredentials says whether
// the volume brings credentials of its own (node-stage or node-publish
// secrets). For a local source it returns the path to mount: src's path with
// symlinks resolved, which the caller should mount instead of the given one
// so that a symlink swapped after the check cannot redirect the mount.
func (c *Checker) Check(src backend.Source, hasCredentials bool) (backend.Source, error) {
	switch src.Kind {
	case backend.KindPosix:
		return c.checkLocal(src)
	case backend.KindS3, backend.KindCephFS, backend.KindNFS:
		return src, c.checkNetwork(src, hasCredentials)
	case backend.KindMirror:
		out := src
		out.Replicas = make([]backend.Source, len(src.Replicas))
		for i, r := range src.Replicas {
			rr, err := c.Check(r, hasCredentials)
			if err != nil {
				return src, fmt.Errorf("mirror replica %d: %w", i+1, err)
			}
			out.Replicas[i] = rr
		}
		return out, nil
	}
	return src, fmt.Errorf("%w: unknown source kind %q", ErrForbidden, src.Kind)
}

// CheckNames is the early check of a caller that may not see the source
// (a controller on another machine) and sees no credentials: the network
// rules apply but not the credential rule, and a local source is checked
// as written (cleaned), and through its symlinks only when it exists here.
// It never replaces Check on the node, which is the enforcement.
func (c *Checker) CheckNames(src backend.Source) error {
	switch src.Kind {
	case backend.KindPosix:
		if _, err := os.Lstat(filepath.Clean(src.Path)); err == nil {
			_, err := c.checkLocal(src)
			return err
		}
	case backend.KindMirror:
		for i, r := range src.Replicas {
			if err := c.CheckNames(r); err != nil {
				return fmt.Errorf("mirror replica %d: %w", i+1, err)
			}
		}
		return nil
	}
	return c.CheckLexically(src, true)
}

func (c *Checker) checkLocal(src backend.Source) (backend.Source, error) {
	p := src.Path
	// Both the path as given and as resolved must pass: the given one so
	// that /proc/1/root/… is refused by name, the resolved one so that a
	// symlink cannot lead out of an allowed root.
	clean, err := c.cleanLocal(p)
	if err != nil {
		return src, err
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return src, fmt.Errorf("%w: local source %q cannot be resolved (it must exist and be reachable by the driver): %v", ErrForbidden, p, err)
	}
	if err := c.overlaps(p, real); err != nil {
		return src, err
	}
	if err := c.underRoot(p, real, true); err != nil {
		return src, err
	}
	out := src
	out.Path = real
	return out, nil
}

// cleanLocal returns the cleaned local source path p, refusing a relative
// path or NUL, and a path that overlaps a forbidden one by name.
func (c *Checker) cleanLocal(p string) (string, error) {
	if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: local source %q must be an absolute path", ErrForbidden, p)
	}
	clean := filepath.Clean(p)
	return clean, c.overlaps(p, clean)
}

// underRoot refuses q (the given local source p, cleaned, or resolved when
// resolved) unless it lies under an allowed root. The resolving check is the
// node's own, and its messages say so.
func (c *Checker) underRoot(p, q string, resolved bool) error {
	if len(c.roots) == 0 {
		where := ""
		if resolved {
			where = " on this node"
		}
		return fmt.Errorf("%w: local source %q: local sources are disabled%s (the admin allows them with --allowed-local-roots)", ErrForbidden, p, where)
	}
	for _, r := range c.roots {
		if within(q, r) {
			return nil
		}
	}
	shown := ""
	if resolved {
		shown = " (resolved: " + q + ")"
	}
	return fmt.Errorf("%w: local source %q%s is not under an allowed local root (%s)", ErrForbidden, p, shown, strings.Join(c.roots, ", "))
}

// overlaps refuses q (the given source p, cleaned or resolved) when it is
// "/" or lies under or around a forbidden path.
func (c *Checker) overlaps(p, q string) error {
	if q == "/" {
		return fmt.Errorf("%w: local source %q is the node's whole file system", ErrForbidden, p)
	}
	for _, f := range c.forbidden {
		if within(q, f) || within(f, q) {
			return fmt.Errorf("%w: local source %q overlaps %s, which no volume may expose", ErrForbidden, p, f)
		}
	}
	return nil
}

func (c *Checker) checkNetwork(src backend.Source, hasCredentials bool) error {
	if src.Kind == backend.KindNFS && !hasCredentials && !c.nodeCreds {
		// NFS has no per-volume credentials (AUTH_UNIX uid/gid are claims any
		// client makes): the server trusts the node's address. Only a rule
		// the admin wrote for this export lends that identity. (The CSI node
		// plugin never says an nfs source has credentials; the job
		// controller, which sees no secrets, says true so as not to judge.)
		for _, rule := range c.network {
			if matches(rule, src) {
				return nil
			}
		}
		why := "no network rule names it"
		if len(c.network) > 0 {
			why = "it matches none of the node's network rules"
		}
		return fmt.Errorf("%w: nfs source %s: %s, and an nfs source reads with the node's network identity (NFS has no per-volume credentials); the admin allows an export with a network rule naming it (--network-rules nfs://host/export) or with --allow-node-credentials", ErrForbidden, src, why)
	}
	if !hasCredentials && !c.nodeCreds {
		return fmt.Errorf("%w: %s source %s has no credentials of its own, and this node does not lend its own identity (the admin allows that with --allow-node-credentials); give the volume a node-stage (or, inline, node-publish) secret", ErrForbidden, src.Kind, src)
	}
	if len(c.network) == 0 {
		return nil
	}
	for _, rule := range c.network {
		if matches(rule, src) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s source %s matches none of the node's network rules", ErrForbidden, src.Kind, src)
}

// matches reports whether src lies within rule.
func matches(rule, src backend.Source) bool {
	if rule.Kind != src.Kind {
		return false
	}
	switch src.Kind {
	case backend.KindS3:
		return rule.Endpoint == src.Endpoint && rule.Bucket == src.Bucket &&
			(rule.Prefix == "" || src.Prefix == rule.Prefix || strings.HasPrefix(src.Prefix, rule.Prefix+"/"))
	case backend.KindCephFS:
		return rule.Host == src.Host && rule.FS == src.FS && within(src.Path, rule.Path)
	case backend.KindNFS:
		return rule.Host == src.Host && within(src.Path, rule.Path)
	}
	return false
}

// within reports whether clean absolute path p is dir or lies under it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Roots reports the resolved allowed local roots (for logs and docs).
func (c *Checker) Roots() []string { return append([]string(nil), c.roots...) }
