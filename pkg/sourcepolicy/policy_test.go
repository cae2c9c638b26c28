package sourcepolicy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

// tree makes an allowed root with a dataset, a state dir and a cache root
// beside it, and symlinks inside the root pointing in and out.
func tree(t *testing.T) (base string, c *Checker) {
	t.Helper()
	base = t.TempDir()
	for _, d := range []string{"datasets/imagenet/train", "state/node/secrets", "cache", "kubelet/pods", "other"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"datasets/up":      "../state",
		"datasets/etc":     "/etc",
		"datasets/inside":  "imagenet/train",
		"datasets/rootlnk": "/",
	}
	for l, to := range links {
		if err := os.Symlink(to, filepath.Join(base, l)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Policy{
		AllowedLocalRoots: []string{filepath.Join(base, "datasets")},
		Forbidden:         []string{filepath.Join(base, "state"), filepath.Join(base, "cache"), filepath.Join(base, "kubelet")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return base, c
}

func mustParse(t *testing.T, s string) source.Source {
	t.Helper()
	src, err := source.Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return src
}

func TestLocalSources(t *testing.T) {
	base, c := tree(t)
	real := func(p string) string { r, _ := filepath.EvalSymlinks(p); return r }
	tests := []struct {
		name, src string
		want      string // resolved path when allowed
		err       string // substring of the refusal
	}{
		{name: "allowed", src: base + "/datasets/imagenet", want: real(base + "/datasets/imagenet")},
		{name: "root itself", src: base + "/datasets", want: real(base + "/datasets")},
		{name: "symlink inside", src: base + "/datasets/inside", want: real(base + "/datasets/imagenet/train")},
		{name: "file URL", src: "file://" + base + "/datasets/imagenet", want: real(base + "/datasets/imagenet")},
		{name: "slash", src: "/", err: "whole file system"},
		{name: "etc", src: "/etc", err: "not under an allowed local root"},
		{name: "proc 1 root", src: "/proc/1/root", err: "overlaps /proc"},
		{name: "proc self root etc", src: "/proc/self/root/etc", err: "overlaps /proc"},
		{name: "sys", src: "/sys/kernel", err: "overlaps /sys"},
		{name: "state dir", src: base + "/state", err: "overlaps"},
		{name: "secrets", src: base + "/state/node/secrets", err: "overlaps"},
		{name: "cache root", src: base + "/cache", err: "overlaps"},
		{name: "kubelet", src: base + "/kubelet/pods", err: "overlaps"},
		{name: "parent of state", src: base, err: "overlaps"},
		{name: "dotdot", src: base + "/datasets/../state", err: "overlaps"},
		{name: "dotdot out", src: base + "/datasets/../other", err: "not under an allowed local root"},
		{name: "symlink to state", src: base + "/datasets/up", err: "overlaps"},
		{name: "symlink to etc", src: base + "/datasets/etc", err: "not under an allowed local root"},
		{name: "symlink to slash", src: base + "/datasets/rootlnk", err: "whole file system"},
		{name: "symlink to slash child", src: base + "/datasets/rootlnk/etc", err: "not under an allowed local root"},
		{name: "missing", src: base + "/datasets/nope", err: "cannot be resolved"},
		// Outside every root: refused by name, whether or not it exists.
		{name: "prefix sibling", src: base + "/datasets-evil", err: "not under an allowed local root"},
		{name: "repeated slashes", src: base + "//datasets///imagenet", want: real(base + "/datasets/imagenet")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Check(mustParse(t, tt.src), true)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Check(%s) = %v, %v; want a refusal containing %q", tt.src, got, err, tt.err)
				}
				return
			}
			if err != nil || got.Path != tt.want {
				t.Fatalf("Check(%s) = %q, %v; want %q", tt.src, got.Path, err, tt.want)
			}
		})
	}
}

func TestDefaultRefusesLocal(t *testing.T) {
	c, err := New(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := c.Check(mustParse(t, dir), true); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "--allowed-local-roots") {
		t.Fatalf("default policy, local source: %v; want a refusal naming --allowed-local-roots", err)
	}
	if _, err := New(Policy{AllowedLocalRoots: []string{"/"}}); err == nil {
		t.Fatal(`AllowedLocalRoots "/" accepted`)
	}
	if _, err := New(Policy{AllowedLocalRoots: []string{"data"}}); err == nil {
		t.Fatal("relative root accepted")
	}
	// Even an allowed root cannot make /proc or /etc's parent allowed.
	c, err = New(Policy{AllowedLocalRoots: []string{"/proc"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(mustParse(t, "/proc/1/root"), true); !errors.Is(err, ErrForbidden) {
		t.Fatalf("/proc allowed by a root: %v", err)
	}
}

// TestNFSNeedsARule: an nfs source reads with the node's address whatever
// secrets the volume brings, so only a rule naming its export (or the
// node's identity lent outright) allows it.
func TestNFSNeedsARule(t *testing.T) {
	src := mustParse(t, "nfs://filer.lab:2049/exports/datasets/imagenet")
	open, _ := New(Policy{})
	if _, err := open.Check(src, false); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "--network-rules nfs://") {
		t.Errorf("no rules: %v, want a refusal naming --network-rules", err)
	}
	ruled, err := New(Policy{Network: []string{"nfs://filer.lab:2049/exports/datasets", "s3://public-data"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ruled.Check(src, false); err != nil {
		t.Errorf("export under a rule: %v", err)
	}
	for _, other := range []string{"nfs://filer.lab:2049/exports/home", "nfs://other.lab:2049/exports/datasets/x", "nfs://filer.lab:2049/exports/datasets-private"} {
		if _, err := ruled.Check(mustParse(t, other), false); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s outside the rule allowed: %v", other, err)
		}
	}
	lend, _ := New(Policy{AllowNodeCredentials: true})
	if _, err := lend.Check(src, false); err != nil {
		t.Errorf("node identity lent: %v", err)
	}
}

func TestNetworkSources(t *testing.T) {
	open, err := New(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	src := mustParse(t, "s3://team-a-data/imagenet?endpoint=http://127.0.0.1:9000")
	if _, err := open.Check(src, false); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "--allow-node-credentials") {
		t.Fatalf("no credentials, node identity not allowed: %v", err)
	}
	if _, err := open.Check(src, true); err != nil {
		t.Fatalf("with credentials, no rules: %v", err)
	}
	lend, _ := New(Policy{AllowNodeCredentials: true})
	if _, err := lend.Check(src, false); err != nil {
		t.Fatalf("no credentials, node identity allowed: %v", err)
	}

	c, err := New(Policy{Network: []string{
		"s3://team-a-data/imagenet?endpoint=http://127.0.0.1:9000",
		"s3://public-data",
		"nfs://filer:2049/exports/ml",
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		src string
		ok  bool
	}{
		{"s3://team-a-data/imagenet?endpoint=http://127.0.0.1:9000", true},
		{"s3://team-a-data/imagenet/train?endpoint=http://127.0.0.1:9000", true},
		{"s3://team-a-data/imagenet-2?endpoint=http://127.0.0.1:9000", false},
		{"s3://team-a-data?endpoint=http://127.0.0.1:9000", false},
		{"s3://team-a-data/imagenet?endpoint=http://evil.example:9000", false},
		{"s3://team-a-data/imagenet", false}, // AWS, not the rule's endpoint
		{"s3://public-data/anything/at/all", true},
		{"s3://public-data/x?endpoint=http://127.0.0.1:9000", false},
		{"nfs://filer:2049/exports/ml/imagenet", true},
		{"nfs://filer:2049/exports/mlx", false},
		{"nfs://filer/exports/ml", false},
		{"cephfs://mon/exports/ml", false},
		{"mirror:s3://public-data/a,nfs://filer:2049/exports/ml/a", true},
		{"mirror:s3://public-data/a,s3://other-bucket/a", false},
	}
	for _, tt := range tests {
		_, err := c.Check(mustParse(t, tt.src), true)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("Check(%s) = %v; want allowed=%v", tt.src, err, tt.ok)
		}
	}
	if _, err := New(Policy{Network: []string{"/data"}}); err == nil {
		t.Fatal("a local path as a network rule accepted")
	}
}

// FuzzCheck: whatever the path, an allowed local source resolves under the
// allowed root and never overlaps a forbidden path.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"/", "/etc", "/proc/1/root", "//x//y", "/a/../..", "/d\x00x", "/データ", strings.Repeat("/a", 300), "file:///x%00"} {
		f.Add(s)
	}
	base := f.TempDir()
	root := filepath.Join(base, "datasets")
	state := filepath.Join(base, "state")
	for _, d := range []string{root + "/a/b", state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	_ = os.Symlink("../state", filepath.Join(root, "up"))
	c, err := New(Policy{AllowedLocalRoots: []string{root}, Forbidden: []string{state}})
	if err != nil {
		f.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	f.Fuzz(func(t *testing.T, s string) {
		for _, in := range []string{s, root + "/" + s} {
			src, err := source.Parse(in)
			if err != nil || src.Kind != source.KindPosix {
				continue
			}
			got, err := c.Check(src, false)
			if err != nil {
				if !errors.Is(err, ErrForbidden) {
					t.Fatalf("Check(%q): %v does not wrap ErrForbidden", in, err)
				}
				continue
			}
			if !within(got.Path, realRoot) || within(got.Path, state) {
				t.Fatalf("Check(%q) allowed %q, outside %s or inside %s", in, got.Path, realRoot, state)
			}
		}
	})
}

func TestCheckNames(t *testing.T) {
	base, c := tree(t)
	for _, tc := range []struct {
		name, src string
		ok        bool
	}{
		{"missing path under the root", filepath.Join(base, "datasets/not-yet"), true},
		{"existing dataset", filepath.Join(base, "datasets/imagenet"), true},
		{"missing path outside", filepath.Join(base, "other/nope"), false},
		{"dotdot out of the root", filepath.Join(base, "datasets") + "/../state/x", false},
		{"symlink out", filepath.Join(base, "datasets/up"), false},
		{"root", "/", false},
		{"etc", "/etc", false},
		{"network without credentials is not judged here", "s3://bkt/p?endpoint=http://127.0.0.1:9000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.CheckNames(mustParse(t, tc.src))
			if tc.ok != (err == nil) {
				t.Fatalf("CheckNames(%s) = %v, want ok=%v", tc.src, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrForbidden) {
				t.Fatalf("%v does not wrap ErrForbidden", err)
			}
		})
	}
}
