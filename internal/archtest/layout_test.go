package archtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// designDoc is the file whose layout block must name every package and top-level folder.
const designDoc = "docs/DESIGN.md"

// layoutRoots are the folders whose Go package directories each need a line of their own.
var layoutRoots = []string{"pkg", "cmd", "internal"}

// TestDesignLayout checks that docs/DESIGN.md's layout block (the fenced code block under "## Layout") has one
// line for every Go package directory under pkg/, cmd/ and internal/ and for every tracked top-level folder,
// and no line for a directory that does not exist.
func TestDesignLayout(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, designDoc))
	if err != nil {
		t.Fatalf("archtest: %v", err)
	}
	entries, err := layoutEntries(string(doc))
	if err != nil {
		t.Fatalf("archtest: %s: %v", designDoc, err)
	}
	want := map[string]bool{}
	for _, dir := range layoutRoots {
		for _, pkg := range goPackageDirs(t, root, dir) {
			want[pkg] = true
		}
	}
	for _, dir := range trackedTopDirs(t, root) {
		want[dir] = true
	}
	var missing, stale, dup []string
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e] {
			dup = append(dup, e+"/")
		}
		seen[e] = true
		if info, err := os.Stat(filepath.Join(root, filepath.FromSlash(e))); err != nil || !info.IsDir() {
			stale = append(stale, e+"/")
		}
	}
	for dir := range want {
		if !seen[dir] {
			missing = append(missing, dir+"/")
		}
	}
	if msg := layoutReport(missing, stale, dup); msg != "" {
		t.Errorf("%s's layout block (the code block under \"## Layout\") is out of date with the tree:\n%s", designDoc, msg)
	}
}

// layoutReport says which lines to add and remove, or "" when none.
func layoutReport(missing, stale, dup []string) string {
	var b strings.Builder
	for _, part := range []struct {
		what  string
		lines []string
	}{
		{"add a line (path, then what it is for) for", missing},
		{"remove the line of (no such directory)", stale},
		{"keep one line only for", dup},
	} {
		if len(part.lines) == 0 {
			continue
		}
		sort.Strings(part.lines)
		fmt.Fprintf(&b, "%s:\n\t%s\n", part.what, strings.Join(part.lines, "\n\t"))
	}
	return b.String()
}

// layoutEntries returns the paths (without the trailing "/") that start lines of the first fenced code block
// after the "## Layout" heading; lines that start with a space continue the line above.
func layoutEntries(doc string) ([]string, error) {
	sc := bufio.NewScanner(strings.NewReader(doc))
	var inSection, inBlock bool
	var entries []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !inSection:
			inSection = strings.TrimSpace(line) == "## Layout"
		case !inBlock && strings.HasPrefix(line, "#"):
			return nil, fmt.Errorf("no code block under \"## Layout\"")
		case !inBlock:
			inBlock = strings.HasPrefix(line, "```")
		case strings.HasPrefix(line, "```"):
			return entries, nil
		case line == "" || line[0] == ' ' || line[0] == '\t':
		default:
			path := strings.Fields(line)[0]
			if !strings.HasSuffix(path, "/") {
				return nil, fmt.Errorf("layout line %q: the path must end with \"/\"", line)
			}
			entries = append(entries, strings.TrimSuffix(path, "/"))
		}
	}
	if !inSection {
		return nil, fmt.Errorf("no \"## Layout\" heading")
	}
	return nil, fmt.Errorf("the code block under \"## Layout\" is not closed")
}

// goPackageDirs lists, relative to root and with "/" separators, the directories under root/dir that hold
// .go files, skipping the directories the go tool skips.
func goPackageDirs(t *testing.T, root, dir string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("archtest: walk %s: %v", dir, err)
	}
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	return out
}

// trackedTopDirs lists the top-level folders that hold files tracked by git (so not bin/ or .tools/).
func trackedTopDirs(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("archtest: top-level folders come from git ls-files, which failed (not a git checkout?): %v", err)
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(string(out), "\x00") {
		if top, _, ok := strings.Cut(f, "/"); ok {
			seen[top] = true
		}
	}
	var dirs []string
	for d := range seen {
		dirs = append(dirs, d)
	}
	return dirs
}

// TestLayoutEntries checks the parser of the layout block on small documents.
func TestLayoutEntries(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
		err       string
	}{
		{"entries and continuations", "# D\n\n## Layout\n\ntext\n\n```\na/      x\n        more\nb/c/    y\n\n```\n\n## Next\n```\nz/\n```\n",
			[]string{"a", "b/c"}, ""},
		{"no heading", "# D\n```\na/ x\n```\n", nil, "no \"## Layout\" heading"},
		{"no block", "## Layout\n\ntext\n\n## Next\n```\na/ x\n```\n", nil, "no code block"},
		{"not closed", "## Layout\n```\na/ x\n", nil, "not closed"},
		{"not a path", "## Layout\n```\na x\n```\n", nil, "must end with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := layoutEntries(tc.doc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	want := "add a line (path, then what it is for) for:\n\ta/\n\tb/\nremove the line of (no such directory):\n\tc/\n"
	if got := layoutReport([]string{"b/", "a/"}, []string{"c/"}, nil); got != want {
		t.Errorf("layoutReport = %q, want %q", got, want)
	}
}
