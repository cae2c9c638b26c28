package sourcepolicy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/epochfs/epochfs/pkg/source"
)

// ErrInvalidManifest is wrapped by a manifest attribute that names no
// manifest object the mount could read (a malformed value, not a refusal).
var ErrInvalidManifest = errors.New("invalid manifest location")

// Volume is everything one volume names to read: its source and its
// manifest attribute, and who wrote them.
type Volume struct {
	Source source.Source
	// Manifest is the volume's manifest attribute (pkg/volattr): "" (the
	// default, SOURCE/.epochfs/manifest, read through the source), an
	// absolute path, or a URL of the manifest object
	// (s3://bucket/prefix/manifest?endpoint=…), read as pkg/manifest's
	// Discover reads it.
	Manifest string
	// Credentials reports whether the volume brings credentials of its own
	// for a network place (its source, a replica, its manifest's
	// location); nil means none anywhere.
	Credentials func(source.Source) bool
	// Tenant marks attributes a tenant wrote (an inline volume, a
	// TrainingJob), not an admin (a PersistentVolume, a StorageClass): no
	// local manifest, and no nfs uid/gid 0 unless a rule pins it.
	Tenant bool
}

// Checked is what the mount is given for a volume that passed: the source
// (local paths resolved, nfs pins applied) and the manifest attribute
// ("" stays "", a local path resolved, a URL in canonical form with the
// pins of its location applied).
type Checked struct {
	Source   source.Source
	Manifest string
}

// CheckVolume is the node's check of a volume (Check for every place it
// reads). The manifest's location is checked as a source: the network
// rules, the credential rule and the nfs pins apply to it as to the
// source. It must also lie within the source (same kind; same endpoint,
// bucket, region and path style, or monitor, user and fs, or server,
// MOUNT port, uid and gid; under the source's prefix or path) unless the
// admin's network rules name its location, in which case it may lie
// anywhere they allow, as a source there could. A local manifest must be
// a regular file under an allowed local root (resolved like a local
// source, whatever the source is), and a tenant's volume takes none.
// Refusals wrap ErrForbidden and name the rule; a malformed manifest
// wraps ErrInvalidManifest. A refused local path outside every allowed
// root is refused by name, before the file system is looked at.
func (c *Checker) CheckVolume(v Volume) (Checked, error) {
	return c.checkVolume(v, modeResolve)
}

// CheckVolumeNames is CheckVolume for CreateVolume, which may not see the
// node's file system: local paths are resolved only where they exist here
// (as CheckNames).
func (c *Checker) CheckVolumeNames(v Volume) error {
	_, err := c.checkVolume(v, modeNames)
	return err
}

// CheckVolumeLexically is CheckVolume for the job controller, which sees
// neither the nodes' file systems nor the volume's secrets: local paths
// by name only (as CheckLexically).
func (c *Checker) CheckVolumeLexically(v Volume) error {
	_, err := c.checkVolume(v, modeLexical)
	return err
}

func (c *Checker) checkVolume(v Volume, m mode) (Checked, error) {
	creds := v.Credentials
	if creds == nil {
		creds = constCreds(false)
	}
	src, err := c.check(v.Source, creds, m, v.Tenant, nounSource)
	if err != nil {
		return Checked{}, err
	}
	out := Checked{Source: src}
	if v.Manifest == "" {
		return out, nil // SOURCE/.epochfs/manifest, through the source
	}
	out.Manifest, err = c.checkManifest(v.Manifest, src, creds, m, v.Tenant)
	return out, err
}

// checkManifest checks the manifest attribute loc of a volume whose
// checked source is src, and returns what the mount is to be given.
func (c *Checker) checkManifest(loc string, src source.Source, creds func(source.Source) bool, m mode, tenant bool) (string, error) {
	// The mount (manifest.Discover) reads a value holding "://" as a URL,
	// anything else as a local file. Parsed whole as a source URL, either
	// names the manifest object itself: a posix path, or a network place
	// whose prefix or path ends in the object's name.
	obj, err := source.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("%w: manifest: %v", ErrInvalidManifest, strings.TrimPrefix(err.Error(), "backend: "))
	}
	switch obj.Kind {
	case source.KindPosix:
		if tenant {
			return "", fmt.Errorf("%w: local manifest %q: an inline volume or a TrainingJob takes no local manifest (only a PersistentVolume the admin creates does); use the default, SOURCE/.epochfs/manifest, or a URL within the source", ErrForbidden, obj.Path)
		}
		return c.checkLocalManifest(obj, m)
	case source.KindMirror:
		return "", fmt.Errorf("%w: manifest %q: a manifest is one object, not a mirror", ErrInvalidManifest, loc)
	}
	checked, err := c.checkNetwork(obj, creds(obj), tenant, nounManifest)
	if err != nil {
		return "", err
	}
	if len(c.network) == 0 && !withinSource(checked, src) {
		// With network rules, checkNetwork found one naming the location:
		// the admin allows reads there. Without any, only the source is
		// the volume's to read.
		return "", fmt.Errorf("%w: manifest %s lies outside the volume's source %s (a manifest must lie within its source: same endpoint or host, bucket or export, under its prefix), and no network rule names it (the admin allows a manifest elsewhere with --network-rules naming its location)", ErrForbidden, checked, src)
	}
	canon := checked.String()
	if err := checkObjectURL(canon, checked); err != nil {
		return "", err
	}
	return canon, nil
}

// checkLocalManifest checks a local manifest file as a local source is
// checked (by name first, then resolved), and also requires a regular file:
// a device or FIFO under a root must not stall or feed the mount.
func (c *Checker) checkLocalManifest(obj source.Source, m mode) (string, error) {
	checked, err := c.check(obj, nil, m, true, nounManifest)
	if err != nil {
		return "", err
	}
	if m == modeResolve || m == modeNames {
		if fi, err := os.Stat(checked.Path); err == nil && !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%w: local manifest %q is not a regular file", ErrForbidden, obj.Path)
		} else if err != nil && m == modeResolve {
			return "", fmt.Errorf("%w: local manifest %q cannot be read: %v", ErrForbidden, obj.Path, err)
		}
	}
	return checked.Path, nil
}

// withinSource reports whether the manifest object obj lies within src or,
// for a mirror, one of its replicas.
func withinSource(obj, src source.Source) bool {
	if src.Kind == source.KindMirror {
		for _, r := range src.Replicas {
			if withinSource(obj, r) {
				return true
			}
		}
		return false
	}
	if obj.Kind != src.Kind {
		return false
	}
	switch obj.Kind {
	case source.KindS3:
		return obj.Endpoint == src.Endpoint && obj.Bucket == src.Bucket && obj.Region == src.Region &&
			obj.PathStyle == src.PathStyle && (src.Prefix == "" || strings.HasPrefix(obj.Prefix, src.Prefix+"/"))
	case source.KindCephFS:
		return obj.Host == src.Host && obj.User == src.User && obj.FS == src.FS &&
			obj.Path != src.Path && within(obj.Path, src.Path)
	case source.KindNFS:
		return obj.Host == src.Host && obj.MountPort == src.MountPort && obj.UID == src.UID && obj.GID == src.GID &&
			obj.Path != src.Path && within(obj.Path, src.Path)
	}
	return false
}

// checkObjectURL makes sure that the mount, which splits a manifest URL
// into the source URL of its directory and the object's name (as
// manifest.Discover does: the last '/' before the query), reads exactly
// the object obj that was checked. The name must be made of letters,
// digits, '.', '_', '~' and '-' (so that it reads the same escaped or
// not), and not "." or "..".
func checkObjectURL(u string, obj source.Source) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: manifest %s: %s", ErrInvalidManifest, u, why)
	}
	p, query, _ := strings.Cut(u, "?")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || i == len(p)-1 || strings.HasSuffix(p[:i], ":/") {
		return bad("want a URL ending in the manifest object's name, inside a directory of the source (e.g. s3://bucket/prefix/manifest)")
	}
	name := p[i+1:]
	if name == "." || name == ".." || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '~' || r == '-')
	}) >= 0 {
		return bad(fmt.Sprintf("the object's name %q must be letters, digits, '.', '_', '~' and '-'", name))
	}
	dir := p[:i]
	if query != "" {
		dir += "?" + query
	}
	d, err := source.Parse(dir)
	if err != nil {
		return bad("its directory is no source URL: " + strings.TrimPrefix(err.Error(), "backend: "))
	}
	switch d.Kind {
	case source.KindS3:
		d.Prefix = strings.TrimPrefix(d.Prefix+"/"+name, "/")
	case source.KindCephFS, source.KindNFS:
		d.Path = path.Join(d.Path, name)
	default:
		return bad("its directory is not a network source")
	}
	if d.String() != obj.String() {
		return bad("its directory and name do not make the object that was checked")
	}
	return nil
}
