package sourcepolicy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

// s3Only is the credentials of a volume with an S3 key pair in its
// secrets: any s3 place has them, nothing else does.
func s3Only(p source.Source) bool { return p.Kind == source.KindS3 }

// hostileManifests are the manifest attributes that were once
// accepted with strict rules and the pod's own keys, and the rule each
// refusal names under the strict policy of TestManifestHostile.
var hostileManifests = []struct{ name, manifest, rule string }{
	{"proc root shadow", "/proc/1/root/etc/shadow", "overlaps /proc"},
	{"dev zero", "/dev/zero", "overlaps /dev"},
	{"internal filer", "nfs://internal-filer/x", "matches none of the node's network rules"},
	{"other team bucket", "s3://other-team-bucket/m", "matches none of the node's network rules"},
	// Not s3://b/…: "b" is no valid bucket name, which is
	// InvalidManifest before any policy (TestManifestMalformed).
	{"metadata endpoint", "s3://bkt/m?endpoint=http://169.254.169.254", "matches none of the node's network rules"},
	{"ceph admin", "cephfs://admin@mon/x", "has no credentials of its own"},
}

// TestManifestHostile: with strict rules and the volume's own S3 keys,
// every hostile manifest is refused, naming the rule, for an
// admin's volume and a tenant's alike; a manifest within the source passes
// and is handed on in canonical form.
func TestManifestHostile(t *testing.T) {
	base, _ := tree(t)
	c, err := New(Policy{
		AllowedLocalRoots: []string{filepath.Join(base, "datasets")},
		Network:           []string{"s3://bkt/ds?endpoint=http://minio.storage:9000", "nfs://filer/exports"},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := mustParse(t, "s3://bkt/ds?endpoint=http://minio.storage:9000")
	for _, h := range hostileManifests {
		for _, tenant := range []bool{false, true} {
			_, err := c.CheckVolume(Volume{Source: src, Manifest: h.manifest, Credentials: s3Only, Tenant: tenant})
			rule := h.rule
			if tenant && strings.HasPrefix(h.manifest, "/") {
				rule = "takes no local manifest"
			}
			if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), rule) || !strings.Contains(err.Error(), "manifest") {
				t.Errorf("%s (tenant %v): %v; want a refusal of the manifest naming %q", h.name, tenant, err, rule)
			}
			if err := c.CheckVolumeLexically(Volume{Source: src, Manifest: h.manifest, Credentials: func(source.Source) bool { return true }, Tenant: tenant}); !errors.Is(err, ErrForbidden) && h.name != "ceph admin" {
				t.Errorf("%s (tenant %v), lexically: %v; want a refusal", h.name, tenant, err)
			}
		}
	}
	got, err := c.CheckVolume(Volume{Source: src, Manifest: "s3://bkt/ds/.epochfs/manifest?endpoint=http://MINIO.storage:9000", Credentials: s3Only, Tenant: true})
	if err != nil || got.Manifest != "s3://bkt/ds/.epochfs/manifest?endpoint=http%3A%2F%2Fminio.storage%3A9000" || got.Source.String() != src.String() {
		t.Fatalf("manifest within the source: %+v, %v", got, err)
	}
	// Without the volume's own keys the manifest would read with the
	// node's identity: refused as a source would be.
	if _, err := c.CheckVolume(Volume{Source: src, Manifest: "s3://bkt/ds/m?endpoint=http://minio.storage:9000"}); !errors.Is(err, ErrForbidden) {
		t.Errorf("manifest without credentials: %v", err)
	}
}

// TestManifestWithinSource: with no network rules (any network source
// with its own credentials), a manifest must lie within the volume's
// source: same kind, endpoint, bucket, region and path style (or host,
// user and fs; or server and identity), under its prefix. A rule naming a
// location lets a manifest be there.
func TestManifestWithinSource(t *testing.T) {
	open, err := New(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	ruled, err := New(Policy{Network: []string{"s3://team-a?endpoint=http://127.0.0.1:9000", "s3://shared-manifests?endpoint=http://127.0.0.1:9000"}})
	if err != nil {
		t.Fatal(err)
	}
	all := func(source.Source) bool { return true }
	for _, tc := range []struct {
		name, source, manifest string
		c                      *Checker
		want                   string // the manifest handed on; "" when refused
		rule                   string
	}{
		{"default", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "", open, "", ""},
		{"under the prefix", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds/.epochfs/manifest?endpoint=http://127.0.0.1:9000", open,
			"s3://team-a/ds/.epochfs/manifest?endpoint=http%3A%2F%2F127.0.0.1%3A9000", ""},
		{"whole bucket", "s3://team-a?endpoint=http://127.0.0.1:9000", "s3://team-a/m?endpoint=http://127.0.0.1:9000", open,
			"s3://team-a/m?endpoint=http%3A%2F%2F127.0.0.1%3A9000", ""},
		{"prefix sibling", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds-other/m?endpoint=http://127.0.0.1:9000", open, "", "lies outside the volume's source"},
		{"the prefix itself", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", open, "", "lies outside"},
		{"other bucket", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-b/ds/m?endpoint=http://127.0.0.1:9000", open, "", "lies outside"},
		{"other endpoint", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds/m?endpoint=http://169.254.169.254", open, "", "lies outside"},
		{"aws instead of the endpoint", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds/m", open, "", "lies outside"},
		{"virtual-host style", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds/m?endpoint=http://127.0.0.1:9000&pathStyle=false", open, "", "lies outside"},
		{"other region", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-a/ds/m?endpoint=http://127.0.0.1:9000&region=eu-west-1", open, "", "lies outside"},
		{"other kind", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "cephfs://mon/ds/m", open, "", "lies outside"},
		{"cephfs within", "cephfs://reader@mon/ds", "cephfs://reader@mon/ds/m", open, "cephfs://reader@mon/ds/m", ""},
		{"cephfs as admin", "cephfs://reader@mon/ds", "cephfs://admin@mon/ds/m", open, "", "lies outside"},
		{"cephfs other fs", "cephfs://mon/ds", "cephfs://mon/ds/m?fs=other", open, "", "lies outside"},
		{"mirror replica", "mirror:s3://team-b/ds?endpoint=http://127.0.0.1:9000,s3://team-a/ds?endpoint=http://127.0.0.1:9000",
			"s3://team-a/ds/m?endpoint=http://127.0.0.1:9000", open, "s3://team-a/ds/m?endpoint=http%3A%2F%2F127.0.0.1%3A9000", ""},
		{"a rule names it", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://shared-manifests/team-a/m?endpoint=http://127.0.0.1:9000", ruled,
			"s3://shared-manifests/team-a/m?endpoint=http%3A%2F%2F127.0.0.1%3A9000", ""},
		{"no rule names it", "s3://team-a/ds?endpoint=http://127.0.0.1:9000", "s3://team-b/m?endpoint=http://127.0.0.1:9000", ruled, "", "matches none of the node's network rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.CheckVolume(Volume{Source: mustParse(t, tc.source), Manifest: tc.manifest, Credentials: all, Tenant: true})
			if tc.rule != "" {
				if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.rule) {
					t.Fatalf("CheckVolume = %+v, %v; want a refusal naming %q", got, err, tc.rule)
				}
				return
			}
			if err != nil || got.Manifest != tc.want {
				t.Fatalf("CheckVolume = %q, %v; want %q", got.Manifest, err, tc.want)
			}
		})
	}
}

// TestManifestMalformed: a manifest value the mount could not read as one
// object is InvalidManifest, not a refusal, and never reaches the mount.
func TestManifestMalformed(t *testing.T) {
	c, _ := New(Policy{})
	src := mustParse(t, "s3://team-a?endpoint=http://127.0.0.1:9000")
	for _, m := range []string{
		"s3://team-a?endpoint=http://127.0.0.1:9000",       // a bucket, no object
		"s3://team-a/a%20b?endpoint=http://127.0.0.1:9000", // a name the mount would read escaped
		"s3://team-a/a/..?endpoint=http://127.0.0.1:9000",
		"mirror:s3://team-a/a,s3://team-a/b",
		"ftp://x/y",
		"s3://b/m?endpoint=http://169.254.169.254", // bucket "b" is too short
	} {
		if _, err := c.CheckVolume(Volume{Source: src, Manifest: m, Credentials: s3Only}); !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("%s: %v, want ErrInvalidManifest", m, err)
		}
	}
}

// TestLocalManifest: a local manifest must be a regular file under an
// allowed root (resolved), only for an admin's volume; a path outside
// every root is refused by name, with the same words whether or not it
// exists (no oracle for the node's files).
func TestLocalManifest(t *testing.T) {
	base, c := tree(t)
	ds := filepath.Join(base, "datasets", "imagenet")
	m := filepath.Join(ds, "manifest.efm")
	if err := os.WriteFile(m, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(ds, "passwd")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(ds, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	src := mustParse(t, ds)
	realM, _ := filepath.EvalSymlinks(m)
	for _, tc := range []struct {
		name, manifest string
		tenant         bool
		want, rule     string
	}{
		{"file under the root", m, false, realM, ""},
		{"file URL under the root", "file://" + m, false, realM, ""},
		{"tenant", m, true, "", "takes no local manifest"},
		{"symlink out of the root", filepath.Join(ds, "passwd"), false, "", "not under an allowed local root"},
		{"fifo", fifo, false, "", "not a regular file"},
		{"directory", ds, false, "", "not a regular file"},
		{"etc passwd", "/etc/passwd", false, "", "not under an allowed local root"},
		{"kubelet dir", filepath.Join(base, "kubelet", "pods", "m"), false, "", "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.CheckVolume(Volume{Source: src, Manifest: tc.manifest, Tenant: tc.tenant})
			if tc.rule != "" {
				if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.rule) {
					t.Fatalf("CheckVolume = %+v, %v; want a refusal naming %q", got, err, tc.rule)
				}
				return
			}
			if err != nil || got.Manifest != tc.want {
				t.Fatalf("CheckVolume = %q, %v; want %q", got.Manifest, err, tc.want)
			}
		})
	}
	// The same refusal for a host file that exists and one that does not.
	msg := func(p string) string {
		_, err := c.CheckVolume(Volume{Source: src, Manifest: p})
		if err == nil {
			t.Fatalf("%s allowed", p)
		}
		return strings.ReplaceAll(err.Error(), p, "PATH")
	}
	if a, b := msg("/etc/passwd"), msg("/etc/no-such-file-epochfs"); a != b {
		t.Errorf("refusals differ by existence:\n %s\n %s", a, b)
	}
	if a, b := msg("/root/.bashrc"), msg("/root/no-such-file-epochfs"); a != b {
		t.Errorf("refusals differ by existence:\n %s\n %s", a, b)
	}
	// Sources too: a local source outside every root is refused by name.
	for _, p := range []string{"/etc", "/etc-no-such-dir-epochfs"} {
		if _, err := c.Check(mustParse(t, p), false); err == nil || strings.Contains(err.Error(), "cannot be resolved") || strings.Contains(err.Error(), "resolved:") {
			t.Errorf("source %s: %v, want a refusal by name", p, err)
		}
	}
	// CreateVolume's check resolves only what exists where it runs.
	if err := c.CheckVolumeNames(Volume{Source: src, Manifest: filepath.Join(ds, "not-yet")}); err != nil {
		t.Errorf("names: missing manifest under the root: %v", err)
	}
	if err := c.CheckVolumeNames(Volume{Source: src, Manifest: "/dev/zero"}); !errors.Is(err, ErrForbidden) {
		t.Errorf("names: /dev/zero: %v", err)
	}
}

// TestNFSPins: a rule with uid/gid pins them on every source under it (a
// source without them gets them; one with others is refused naming the
// pin); without a pin a tenant's nfs source may not read as uid or gid 0.
func TestNFSPins(t *testing.T) {
	c, err := New(Policy{Network: []string{"nfs://filer/exports/team-a?uid=1000&gid=1000", "nfs://filer/exports/shared", "nfs://filer/exports/root?uid=0&gid=0"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src string
		tenant    bool
		want      string // the source handed on; "" when refused
		rule      string
	}{
		{"gets the pin", "nfs://filer/exports/team-a/ds", false, "nfs://filer/exports/team-a/ds?gid=1000&uid=1000", ""},
		{"tenant gets the pin", "nfs://filer/exports/team-a/ds", true, "nfs://filer/exports/team-a/ds?gid=1000&uid=1000", ""},
		{"carries the pin", "nfs://filer/exports/team-a/ds?uid=1000&gid=1000", true, "nfs://filer/exports/team-a/ds?gid=1000&uid=1000", ""},
		{"another uid", "nfs://filer/exports/team-a/ds?uid=1001", false, "", "pins the identity"},
		{"another gid", "nfs://filer/exports/team-a/ds?gid=5", true, "", "use uid=1000 and gid=1000"},
		{"admin, no pin, default root", "nfs://filer/exports/shared/ds", false, "nfs://filer/exports/shared/ds", ""},
		{"tenant, no pin, default root", "nfs://filer/exports/shared/ds", true, "", "may not read as root"},
		{"tenant, no pin, uid only", "nfs://filer/exports/shared/ds?uid=1000", true, "", "may not read as root"},
		{"tenant, no pin, own ids", "nfs://filer/exports/shared/ds?uid=1000&gid=1000", true, "nfs://filer/exports/shared/ds?gid=1000&uid=1000", ""},
		{"tenant, root pinned by the admin", "nfs://filer/exports/root/ds", true, "nfs://filer/exports/root/ds", ""},
		{"mirror replica", "mirror:nfs://filer/exports/team-a/a,nfs://filer/exports/shared/a?uid=7&gid=7", true,
			"mirror:nfs://filer/exports/team-a/a?gid=1000&uid=1000,nfs://filer/exports/shared/a?gid=7&uid=7", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.CheckVolume(Volume{Source: mustParse(t, tc.src), Tenant: tc.tenant})
			if tc.rule != "" {
				if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.rule) {
					t.Fatalf("CheckVolume = %v, %v; want a refusal naming %q", got.Source, err, tc.rule)
				}
				return
			}
			if err != nil || got.Source.String() != tc.want {
				t.Fatalf("CheckVolume = %s, %v; want %s", got.Source, err, tc.want)
			}
		})
	}
	// The job controller's check (credentials not judged) applies the
	// tenant rule too, with no rules at all.
	open, _ := New(Policy{})
	if err := open.CheckVolumeLexically(Volume{Source: mustParse(t, "nfs://filer/exports/x"), Credentials: func(source.Source) bool { return true }, Tenant: true}); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "may not read as root") {
		t.Errorf("lexical, tenant, uid 0: %v", err)
	}
	if err := open.CheckVolumeLexically(Volume{Source: mustParse(t, "nfs://filer/exports/x?uid=1000&gid=1000"), Credentials: func(source.Source) bool { return true }, Tenant: true}); err != nil {
		t.Errorf("lexical, tenant, own ids: %v", err)
	}
	// A manifest on a pinned export gets the pin too, and so lies within
	// a source that got it.
	got, err := c.CheckVolume(Volume{Source: mustParse(t, "nfs://filer/exports/team-a/ds"), Manifest: "nfs://filer/exports/team-a/ds/m"})
	if err != nil || got.Manifest != "nfs://filer/exports/team-a/ds/m?gid=1000&uid=1000" {
		t.Errorf("nfs manifest: %+v, %v", got, err)
	}
}

// FuzzManifest: whatever the manifest attribute, an accepted URL manifest
// of an s3 volume (no network rules) lies under the source's prefix on the
// source's endpoint and bucket, and the mount's way of reading the value
// handed on (directory URL + name, manifest.Discover) names that object.
func FuzzManifest(f *testing.F) {
	for _, s := range []string{"s3://team-a/ds/m", "s3://team-a/ds/../x/m", "s3://team-a/ds/a%2Fb/m", "s3://team-a/ds/m?endpoint=http://127.0.0.1:9000",
		"s3://team-a/ds%2F../m", "s3://team-a/dsx/m", "s3://team-a/ds/m?pathStyle=false", "s3://team-a/ds/%2e%2e/m", "nfs://h/e/m", "/etc/passwd", "file:///tmp/x"} {
		f.Add(s)
	}
	c, err := New(Policy{})
	if err != nil {
		f.Fatal(err)
	}
	src := source.Source{Kind: source.KindS3, Bucket: "team-a", Prefix: "ds", Endpoint: "http://127.0.0.1:9000", PathStyle: true}
	f.Fuzz(func(t *testing.T, m string) {
		got, err := c.CheckVolume(Volume{Source: src, Manifest: m, Credentials: s3Only, Tenant: true})
		if err != nil {
			if !errors.Is(err, ErrForbidden) && !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("CheckVolume(%q): %v wraps neither ErrForbidden nor ErrInvalidManifest", m, err)
			}
			return
		}
		if got.Manifest == "" {
			if m != "" {
				t.Fatalf("CheckVolume(%q) handed on no manifest", m)
			}
			return
		}
		p, query, _ := strings.Cut(got.Manifest, "?")
		i := strings.LastIndexByte(p, '/')
		dir := p[:i]
		if query != "" {
			dir += "?" + query
		}
		d, err := source.Parse(dir)
		if err != nil {
			t.Fatalf("CheckVolume(%q) handed on %q, whose directory does not parse: %v", m, got.Manifest, err)
		}
		key := strings.TrimPrefix(d.Prefix+"/"+p[i+1:], "/")
		if d.Kind != source.KindS3 || d.Bucket != src.Bucket || d.Endpoint != src.Endpoint || d.PathStyle != src.PathStyle ||
			!strings.HasPrefix(key, src.Prefix+"/") || slices.Contains(strings.Split(key, "/"), "..") {
			t.Fatalf("CheckVolume(%q) handed on %q: the mount reads %s key %q, outside the source %s", m, got.Manifest, d, key, src)
		}
	})
}
