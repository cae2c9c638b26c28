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
//   - an nfs rule may pin the AUTH_UNIX identity (nfs://host/export?uid=N&gid=N):
//     a source under it must carry that uid/gid or gets it; a tenant's nfs
//     source (an inline volume, a TrainingJob) without a pin may not read as
//     uid or gid 0, which is also the default;
//   - a mirror is checked replica by replica;
//   - a volume's manifest attribute is a second place the mount reads, and
//     is checked as a source (CheckVolume, volume.go): same rules, same
//     credential rule, and it must lie within the source unless a network
//     rule names its location; a local manifest only under an allowed root
//     and never for a tenant's volume.
//
// Every refusal wraps ErrForbidden and names the rule; it never quotes a
// credential (a Source cannot hold one). The package knows nothing of gRPC
// or Kubernetes.
package sourcepolicy

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/epochfs/epochfs/pkg/source"
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

// Checker is a validated Policy with its paths resolved once. It is
// immutable, and safe for concurrent use.
type Checker struct {
	roots     []string // resolved through symlinks
	given     []string // as configured, cleaned: a path given through them is lexically under a root
	forbidden []string
	network   []rule
	nodeCreds bool
}

// rule is one Network rule. An nfs rule may pin the uid and gid of the
// sources under it (nfs://host/export?uid=N&gid=N): pinUID and pinGID say
// whether the rule's URL set them, since a uid of 0 may be pinned too.
type rule struct {
	src            source.Source
	pinUID, pinGID bool
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
		given := filepath.Clean(r)
		r = resolve(r)
		if r == "/" || given == "/" {
			return nil, fmt.Errorf("sourcepolicy: allowed local root %q is the whole file system", r)
		}
		c.roots = append(c.roots, r)
		c.given = append(c.given, given)
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
		src, err := source.Parse(n)
		if err != nil {
			return nil, fmt.Errorf("sourcepolicy: network rule: %w", err)
		}
		switch src.Kind {
		case source.KindS3, source.KindCephFS, source.KindNFS:
			r := rule{src: src}
			if src.Kind == source.KindNFS {
				// source.Source cannot tell uid=0 from no uid: read the query.
				if u, err := url.Parse(n); err == nil {
					q := u.Query()
					r.pinUID, r.pinGID = q.Has("uid"), q.Has("gid")
				}
			}
			c.network = append(c.network, r)
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
// so that a symlink swapped after the check cannot redirect the mount. For
// an nfs source under a rule that pins uid/gid it returns the source with
// them. CheckVolume is the whole check of a volume (its manifest too).
func (c *Checker) Check(src source.Source, hasCredentials bool) (source.Source, error) {
	return c.check(src, constCreds(hasCredentials), modeResolve, false, nounSource)
}

// CheckNames is the early check of a caller that may not see the source
// (a controller on another machine) and sees no credentials: the network
// rules apply but not the credential rule, and a local source is checked
// as written (cleaned), and through its symlinks only when it exists here.
// It never replaces Check on the node, which is the enforcement.
func (c *Checker) CheckNames(src source.Source) error {
	_, err := c.check(src, constCreds(true), modeNames, false, nounSource)
	return err
}

// mode says how much of the node a check sees.
type mode int

const (
	modeResolve mode = iota // the node: resolve local paths through symlinks
	modeNames               // CreateVolume: resolve what exists here, else by name
	modeLexical             // the job controller: by name only
)

// Nouns of messages: what is being checked.
const (
	nounSource   = "source"
	nounManifest = "manifest"
)

func constCreds(b bool) func(source.Source) bool { return func(source.Source) bool { return b } }

// check applies the policy to one place a volume reads (its source, or its
// manifest's location, as noun says). creds reports whether the volume
// brings credentials of its own for a network place; tenant is set for
// attributes a tenant wrote (inline volumes, TrainingJobs).
func (c *Checker) check(src source.Source, creds func(source.Source) bool, m mode, tenant bool, noun string) (source.Source, error) {
	switch src.Kind {
	case source.KindPosix:
		switch m {
		case modeNames:
			if _, err := os.Lstat(filepath.Clean(src.Path)); err != nil {
				return src, c.checkLocalLexically(src, noun)
			}
		case modeLexical:
			return src, c.checkLocalLexically(src, noun)
		}
		return c.checkLocal(src, noun)
	case source.KindS3, source.KindCephFS, source.KindNFS:
		return c.checkNetwork(src, creds(src), tenant, noun)
	case source.KindMirror:
		out := src
		out.Replicas = make([]source.Source, len(src.Replicas))
		for i, r := range src.Replicas {
			rr, err := c.check(r, creds, m, tenant, noun)
			if err != nil {
				return src, fmt.Errorf("mirror replica %d: %w", i+1, err)
			}
			out.Replicas[i] = rr
		}
		return out, nil
	}
	return src, fmt.Errorf("%w: unknown %s kind %q", ErrForbidden, noun, src.Kind)
}

func (c *Checker) checkLocal(src source.Source, noun string) (source.Source, error) {
	p := src.Path
	// Both the path as given and as resolved must pass: the given one so
	// that /proc/1/root/… is refused by name, the resolved one so that a
	// symlink cannot lead out of an allowed root. The given one is judged
	// before the file system is touched, so that a refusal of a path
	// outside every root says the same whether or not it exists (no
	// oracle for the node's files).
	clean, err := c.cleanLocal(p, noun)
	if err != nil {
		return src, err
	}
	if err := c.underRoot(p, clean, false, noun); err != nil {
		return src, err
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return src, fmt.Errorf("%w: local %s %q cannot be resolved (it must exist and be reachable by the driver): %v", ErrForbidden, noun, p, err)
	}
	if err := c.overlaps(p, real, noun); err != nil {
		return src, err
	}
	if err := c.underRoot(p, real, true, noun); err != nil {
		return src, err
	}
	out := src
	out.Path = real
	return out, nil
}

// cleanLocal returns the cleaned local path p, refusing a relative path or
// NUL, and a path that overlaps a forbidden one by name.
func (c *Checker) cleanLocal(p, noun string) (string, error) {
	if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: local %s %q must be an absolute path", ErrForbidden, noun, p)
	}
	clean := filepath.Clean(p)
	return clean, c.overlaps(p, clean, noun)
}

// underRoot refuses q (the given local path p, cleaned, or resolved when
// resolved) unless it lies under an allowed root: a resolved path under a
// resolved root, a cleaned one under a root as configured or resolved. The
// resolving check is the node's own, and its messages say so.
func (c *Checker) underRoot(p, q string, resolved bool, noun string) error {
	if len(c.roots) == 0 {
		where := ""
		if resolved {
			where = " on this node"
		}
		return fmt.Errorf("%w: local %s %q: local %ss are disabled%s (the admin allows them with --allowed-local-roots)", ErrForbidden, noun, p, noun, where)
	}
	roots := c.roots
	if !resolved {
		roots = append(append([]string(nil), c.roots...), c.given...)
	}
	for _, r := range roots {
		if within(q, r) {
			return nil
		}
	}
	shown := ""
	if resolved {
		shown = " (resolved: " + q + ")"
	}
	return fmt.Errorf("%w: local %s %q%s is not under an allowed local root (%s)", ErrForbidden, noun, p, shown, strings.Join(c.roots, ", "))
}

// overlaps refuses q (the given path p, cleaned or resolved) when it is
// "/" or lies under or around a forbidden path.
func (c *Checker) overlaps(p, q, noun string) error {
	if q == "/" {
		return fmt.Errorf("%w: local %s %q is the node's whole file system", ErrForbidden, noun, p)
	}
	for _, f := range c.forbidden {
		if within(q, f) || within(f, q) {
			return fmt.Errorf("%w: local %s %q overlaps %s, which no volume may expose", ErrForbidden, noun, p, f)
		}
	}
	return nil
}

// checkNetwork applies the network rules and the credential rule to a
// network place, and returns it with the uid/gid an nfs rule pins.
func (c *Checker) checkNetwork(src source.Source, hasCredentials, tenant bool, noun string) (source.Source, error) {
	r, err := c.match(src, noun)
	if err != nil {
		return src, err
	}
	if src.Kind == source.KindNFS && r == nil && !hasCredentials && !c.nodeCreds {
		// NFS has no per-volume credentials (AUTH_UNIX uid/gid are claims any
		// client makes): the server trusts the node's address. Only a rule
		// the admin wrote for this export lends that identity. (The CSI node
		// plugin never says an nfs source has credentials; the job
		// controller, which sees no secrets, says true so as not to judge.)
		why := "no network rule names it"
		if len(c.network) > 0 {
			why = "it matches none of the node's network rules"
		}
		return src, fmt.Errorf("%w: nfs %s %s: %s, and an nfs %s reads with the node's network identity (NFS has no per-volume credentials); the admin allows an export with a network rule naming it (--network-rules nfs://host/export) or with --allow-node-credentials", ErrForbidden, noun, src, why, noun)
	}
	if src.Kind != source.KindNFS && !hasCredentials && !c.nodeCreds {
		return src, fmt.Errorf("%w: %s %s %s has no credentials of its own, and this node does not lend its own identity (the admin allows that with --allow-node-credentials); give the volume a node-stage (or, inline, node-publish) secret", ErrForbidden, src.Kind, noun, src)
	}
	if len(c.network) > 0 && r == nil {
		return src, fmt.Errorf("%w: %s %s %s matches none of the node's network rules", ErrForbidden, src.Kind, noun, src)
	}
	if src.Kind != source.KindNFS {
		return src, nil
	}
	return pinNFS(src, r, tenant, noun)
}

// match returns the first network rule src lies within, nil when none
// does. An nfs rule that pins a uid or gid src sets otherwise does not
// match; when only such rules name src's export, the error names the pin.
func (c *Checker) match(src source.Source, noun string) (*rule, error) {
	var pinned *rule
	for i := range c.network {
		r := &c.network[i]
		if !matches(r.src, src) {
			continue
		}
		if src.Kind == source.KindNFS &&
			(r.pinUID && src.UID != 0 && src.UID != r.src.UID || r.pinGID && src.GID != 0 && src.GID != r.src.GID) {
			if pinned == nil {
				pinned = r
			}
			continue
		}
		return r, nil
	}
	if pinned != nil {
		var ids []string
		if pinned.pinUID {
			ids = append(ids, fmt.Sprintf("uid=%d", pinned.src.UID))
		}
		if pinned.pinGID {
			ids = append(ids, fmt.Sprintf("gid=%d", pinned.src.GID))
		}
		return nil, fmt.Errorf("%w: nfs %s %s: the network rule %s pins the identity its exports are read with; use %s, or leave them out", ErrForbidden, noun, src, pinned.src, strings.Join(ids, " and "))
	}
	return nil, nil
}

// pinNFS gives src the uid/gid its rule r pins, and refuses a tenant's
// source that would read as uid or gid 0 (root, also the default) without
// a pin: a TrainingJob's or inline volume's author may not claim root on
// the admin's filer.
func pinNFS(src source.Source, r *rule, tenant bool, noun string) (source.Source, error) {
	out := src
	var pinUID, pinGID bool
	if r != nil {
		pinUID, pinGID = r.pinUID, r.pinGID
		if pinUID {
			out.UID = r.src.UID
		}
		if pinGID {
			out.GID = r.src.GID
		}
	}
	if tenant && (!pinUID && out.UID == 0 || !pinGID && out.GID == 0) {
		return src, fmt.Errorf("%w: nfs %s %s would read as uid %d, gid %d: a TrainingJob's or inline volume's nfs %s may not read as root (0, also the default); set uid=N&gid=N (N > 0) in its URL, or the admin pins them with a network rule (--network-rules nfs://host/export?uid=N&gid=N)", ErrForbidden, noun, src, out.UID, out.GID, noun)
	}
	return out, nil
}

// matches reports whether src lies within rule.
func matches(rule, src source.Source) bool {
	if rule.Kind != src.Kind {
		return false
	}
	switch src.Kind {
	case source.KindS3:
		return rule.Endpoint == src.Endpoint && rule.Bucket == src.Bucket &&
			(rule.Prefix == "" || src.Prefix == rule.Prefix || strings.HasPrefix(src.Prefix, rule.Prefix+"/"))
	case source.KindCephFS:
		return rule.Host == src.Host && rule.FS == src.FS && within(src.Path, rule.Path)
	case source.KindNFS:
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
