package archtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The size rule: a hand-written, non-test Go file in pkg/ or cmd/ has at most maxFileLines lines and each of
// its functions at most maxFuncLines (from `func` to the closing brace), unless a comment line starting
// exactly with exemptPrefix says why: at the file's top (before `package`) for the file, in the function's
// doc comment for the function.
const (
	maxFileLines = 600
	maxFuncLines = 80
	exemptPrefix = "// long: "
)

// sizeRoots are the folders (relative to the repository root) the size rule covers.
var sizeRoots = []string{"pkg", "cmd"}

// generatedHeader is Go's convention for generated files (go help generate).
var generatedHeader = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

func TestSizeRule(t *testing.T) {
	root := repoRoot(t)
	var files []string
	for _, dir := range sizeRoots {
		files = append(files, goSources(t, filepath.Join(root, dir))...)
	}
	if len(files) == 0 {
		t.Fatalf("archtest: no Go files under %v of %s", sizeRoots, root)
	}
	var violations []string
	for _, path := range files {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("archtest: %v", err)
		}
		v, err := sizeViolations(filepath.ToSlash(rel), src)
		if err != nil {
			t.Fatal(err)
		}
		violations = append(violations, v...)
	}
	if len(violations) > 0 {
		sort.Strings(violations)
		t.Errorf("%d violations of the size rule (a file over %d lines, a function over %d; split by concern, or "+
			"say why on a line starting %q at the file's top or in the function's doc comment):\n%s",
			len(violations), maxFileLines, maxFuncLines, exemptPrefix, strings.Join(violations, "\n"))
	}
}

// goSources lists the non-test .go files under dir, skipping the directories the go tool skips and the
// generated files named zz_generated*.
func goSources(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && skipDir(name) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") && !strings.HasPrefix(name, "zz_generated") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("archtest: walk %s: %v", dir, err)
	}
	return out
}

// sizeViolations returns one line per violation of the size rule in the file rel with contents src, or none
// for a generated file.
func sizeViolations(rel string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("archtest: parse: %w", err)
	}
	header := src[:fset.Position(f.Package).Offset]
	if generatedHeader.Match(header) {
		return nil, nil
	}
	var out []string
	if n := lineCount(src); n > maxFileLines && !exempt(topComments(f)) {
		out = append(out, fmt.Sprintf("%s: %d lines", rel, n))
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		if n := end.Line - start.Line + 1; n > maxFuncLines && !exempt(fd.Doc) {
			out = append(out, fmt.Sprintf("%s:%d: func %s: %d lines", rel, start.Line, funcName(fd), n))
		}
	}
	return out, nil
}

// lineCount counts lines as wc -l does, plus a last line without a newline.
func lineCount(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// topComments returns the comment groups before the package clause, as one group.
func topComments(f *ast.File) *ast.CommentGroup {
	top := &ast.CommentGroup{}
	for _, g := range f.Comments {
		if g.End() < f.Package {
			top.List = append(top.List, g.List...)
		}
	}
	return top
}

// exempt reports whether g holds a line starting with exemptPrefix followed by a reason.
func exempt(g *ast.CommentGroup) bool {
	if g == nil {
		return false
	}
	for _, c := range g.List {
		if reason, ok := strings.CutPrefix(c.Text, exemptPrefix); ok && strings.TrimSpace(reason) != "" {
			return true
		}
	}
	return false
}

// funcName names a function as a reader finds it: Name, or (Recv).Name / (*Recv).Name for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestSizeViolations checks the checker on small sources: the limits, both exemptions and generated files.
func TestSizeViolations(t *testing.T) {
	body := strings.Repeat("\t_ = 0\n", maxFuncLines-2) // with `func … {` and `}`: exactly maxFuncLines lines
	long := "func Long() {\n" + body + "\t_ = 1\n}\n"
	pad := strings.Repeat("\n", maxFileLines)
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"function at the limit", "package p\n\nfunc F() {\n" + body + "}\n", nil},
		{"function over the limit", "package p\n\n" + long, []string{"p.go:3: func Long: 81 lines"}},
		{"method over the limit", "package p\n\ntype T[K any] struct{}\n\nfunc (t *T[K]) " + long[len("func "):],
			[]string{"p.go:5: func (*T).Long: 81 lines"}},
		{"function exempt", "package p\n\n// Long is long.\n// long: one table, read top to bottom.\n" + long, nil},
		{"exemption without a reason", "package p\n\n// long: \n" + long, []string{"p.go:4: func Long: 81 lines"}},
		{"file over the limit", "package p\n" + pad, []string{"p.go: 601 lines"}},
		{"file exempt", "//go:build linux\n\n// long: the generated table of errno names.\n\npackage p\n" + pad, nil},
		{"file exemption below package", "package p\n\n// long: too late.\n" + pad, []string{"p.go: 603 lines"}},
		{"generated", "// Code generated by controller-gen. DO NOT EDIT.\n\npackage p\n\n" + long + pad, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sizeViolations("p.go", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
