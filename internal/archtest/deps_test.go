package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/epochfs/epochfs"

// Package roots a binary or a test must not link, by what they are.
var (
	fuse    = "github.com/hanwen/go-fuse"
	s3      = "github.com/minio/minio-go"
	ceph    = "github.com/ceph/go-ceph"
	nfs     = "github.com/willscott/go-nfs-client"
	kube    = "k8s.io"
	cachePk = module + "/pkg/cache"
)

// TestDependencies: each binary links what it uses. The node plugin never
// serves a byte, so it links no FUSE library and no backend client; the job
// controller reads no dataset, so it links no backend client and not the
// cache; the cache's and the FUSE layer's unit tests start no Kubernetes
// server, so their test binaries link no k8s.io package. The graph is
// `go list -deps` with the ceph build tag (the image's build, a superset of
// the default one); a failure prints the import chain that pulls the
// package in.
func TestDependencies(t *testing.T) {
	for _, tc := range []struct {
		pkg    string
		test   bool // the package's test binary
		forbid []string
	}{
		{"cmd/csi-driver", false, []string{fuse, s3, ceph}},
		{"cmd/job-controller", false, []string{s3, nfs, ceph, cachePk}},
		{"pkg/cache", true, []string{kube}},
		{"pkg/fusefs", true, []string{kube}},
		// The node plugin holds FUSE connections through pkg/handover's
		// protocol; the request loop that needs go-fuse is fuseconn.
		{"pkg/handover", false, []string{fuse, s3, ceph, kube}},
	} {
		name := tc.pkg
		if tc.test {
			name += " tests"
		}
		t.Run(name, func(t *testing.T) {
			g := depGraph(t, module+"/"+tc.pkg, tc.test)
			for _, f := range tc.forbid {
				if chain := g.path(f); chain != nil {
					t.Errorf("%s links %s:\n\t%s", name, f, strings.Join(chain, "\n\t→ "))
				}
			}
		})
	}
}

// graph is an import graph: each package's imports, and the roots it was
// listed from.
type graph struct {
	imports map[string][]string
	roots   []string
}

// depGraph lists the dependencies of pkg (of its test binary when test).
func depGraph(t *testing.T, pkg string, test bool) *graph {
	t.Helper()
	args := []string{"list", "-e", "-deps", "-tags=ceph", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}
	if test {
		args = append(args, "-test")
	}
	cmd := exec.Command(goTool(), append(args, pkg)...)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	g := &graph{imports: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		// "path [variant] imp1 imp2 …": a test variant's path holds a space.
		line := sc.Text()
		path, rest, _ := strings.Cut(line, " ")
		if strings.HasPrefix(rest, "[") {
			variant, more, _ := strings.Cut(rest, "] ")
			path, rest = path+" "+variant+"]", more
		}
		g.imports[path] = splitImports(rest)
		if base := plain(path); base == pkg || base == pkg+".test" || base == pkg+"_test" {
			g.roots = append(g.roots, path)
		}
	}
	if len(g.roots) == 0 {
		t.Fatalf("go list found no package %s", pkg)
	}
	return g
}

// splitImports splits a list of import paths, test variants ("p [q.test]")
// kept whole.
func splitImports(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "[") && len(out) > 0 {
			out[len(out)-1] += " " + f
			continue
		}
		out = append(out, f)
	}
	return out
}

// plain strips a test variant's " [x.test]".
func plain(p string) string {
	base, _, _ := strings.Cut(p, " ")
	return base
}

// under reports whether package p is root or inside it.
func under(p, root string) bool {
	p = plain(p)
	return p == root || strings.HasPrefix(p, root+"/")
}

// path returns the shortest import chain from a root to a package under
// forbidden, or nil when there is none.
func (g *graph) path(forbidden string) []string {
	prev := map[string]string{}
	queue := append([]string(nil), g.roots...)
	for _, r := range g.roots {
		prev[r] = ""
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if under(p, forbidden) {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, imp := range g.imports[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// goTool is the go command on PATH (make puts the toolchain's there).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}
