package manifest

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/epochfs/epochfs/pkg/backend"
)

// File is one file given to Build.
type File struct {
	// Path is slash-separated, relative to the dataset root.
	Path string
	// Size in bytes.
	Size int64
	// Version is the backend's version token (see backend.Entry.Version).
	Version string
	// Sum is the file's sha256, or nil.
	Sum []byte
}

// BuildOptions configure Build.
type BuildOptions struct {
	// Info is the header to record. Info.Checksums requires a Sum for
	// every file (files without one are skipped).
	Info Info
	// Dirs are directories to include even when empty (their parents are
	// implied); directories holding files are implied by the files' paths.
	Dirs []string
	// Logger receives one warning per skipped path (up to 20, then a
	// count). Default: discard.
	Logger *slog.Logger
}

// maxWarnings bounds the per-path warnings of Build.
const maxWarnings = 20

// Build makes a manifest of files. Paths that would escape the mount or
// that the format cannot hold (absolute, "..", NUL or control characters,
// a component over 255 bytes, a path over MaxPathLen, a bad version token
// or checksum, a negative size), duplicates, and paths under a name that is
// also a file are skipped with a warning and counted in skipped; they never
// fail the build. The order of files does not matter.
func Build(files []File, opts BuildOptions) (m *Manifest, skipped int, err error) {
	sk := skipLog{log: opts.Logger}
	if sk.log == nil {
		sk.log = slog.New(slog.DiscardHandler)
	}
	if !ValidVersion(opts.Info.Source) || len(opts.Info.Source) > MaxSourceLen {
		return nil, 0, fmt.Errorf("manifest: build: source ID %q is not printable or too long", opts.Info.Source)
	}
	items := buildItems(files, opts, &sk)
	root, nFiles, nDirs := buildTree(items, &sk)
	sk.summary()
	if nFiles+nDirs > MaxEntries {
		return nil, sk.n, fmt.Errorf("manifest: build: %d entries exceed the limit of %d", nFiles+nDirs, MaxEntries)
	}
	body, total := writeTree(root, files, opts.Info.Checksums)
	h := header{format: FormatVersion, files: uint64(nFiles), dirs: uint64(nDirs), bytes: total,
		created: opts.Info.Created.UnixNano(), source: opts.Info.Source}
	if opts.Info.Checksums {
		h.flags |= flagChecksums
	}
	m, err = parseBody(body, h)
	if err != nil {
		return nil, sk.n, fmt.Errorf("manifest: build: %w (a bug)", err)
	}
	return m, sk.n, nil
}

// skipLog counts the paths Build skips and logs the first maxWarnings.
type skipLog struct {
	log *slog.Logger
	n   int
}

func (sk *skipLog) skip(p, why string) {
	sk.n++
	if sk.n <= maxWarnings {
		sk.log.Warn("manifest: skipping path", "path", strconv.Quote(p), "reason", why)
	}
}

// summary logs the count of skipped paths when some were not logged.
func (sk *skipLog) summary() {
	if sk.n > maxWarnings {
		sk.log.Warn("manifest: skipped paths", "count", sk.n, "logged", maxWarnings)
	}
}

// buildItem is a path given to Build.
type buildItem struct {
	path string
	file int // index in files, -1 for a directory
}

// buildItems returns the files and directories a manifest can hold, in
// path order; a file sorts before a directory of the same path, so that
// the file wins, like the s3 backend's listings.
func buildItems(files []File, opts BuildOptions, sk *skipLog) []buildItem {
	items := make([]buildItem, 0, len(files)+len(opts.Dirs))
	for i, f := range files {
		switch why := checkFile(f, opts.Info.Checksums); why {
		case "":
			items = append(items, buildItem{f.Path, i})
		default:
			sk.skip(f.Path, why)
		}
	}
	for _, d := range opts.Dirs {
		if d == "" {
			continue
		}
		if c, err := backend.CleanPath(d); err != nil || c != d || len(d) > MaxPathLen {
			sk.skip(d, "not a clean dataset path (absolute, \"..\", control characters, over-long name or path)")
			continue
		}
		items = append(items, buildItem{d, -1})
	}
	slices.SortStableFunc(items, func(a, b buildItem) int {
		if c := comparePaths(a.path, b.path); c != 0 {
			return c
		}
		return boolCmp(a.file < 0, b.file < 0)
	})
	return items
}

// buildNode is a file or directory of the tree Build makes.
type buildNode struct {
	name     string
	file     int // -1 for a directory
	children []*buildNode
}

// buildTree makes the directory tree of items (in path order), skipping
// duplicates and paths under a name that is a file, and counts its files
// and directories (the root included).
func buildTree(items []buildItem, sk *skipLog) (root *buildNode, nFiles, nDirs int) {
	root = &buildNode{file: -1}
	stack := []*buildNode{root} // the directory chain of the previous item
	nDirs = 1
	for _, it := range items {
		comps := strings.Split(it.path, "/")
		// Keep the part of the stack that is a prefix of this path.
		depth := 1
		for depth < len(stack) && depth-1 < len(comps)-1 && stack[depth].name == comps[depth-1] {
			depth++
		}
		stack = stack[:depth]
		last := len(comps) - 1
		if it.file < 0 {
			last = len(comps) // every component is a directory
		}
		var added int
		var ok bool
		stack, added, ok = descend(stack, comps[depth-1:last])
		nDirs += added
		if !ok {
			sk.skip(it.path, "a file has the name of one of its parent directories")
			continue
		}
		if it.file < 0 {
			continue
		}
		parent := stack[len(stack)-1]
		name := comps[len(comps)-1]
		if n := len(parent.children); n > 0 && parent.children[n-1].name == name {
			sk.skip(it.path, "duplicate path")
			continue
		}
		parent.children = append(parent.children, &buildNode{name: name, file: it.file})
		nFiles++
	}
	return root, nFiles, nDirs
}

// descend walks the directory chain stack down through the directories
// comps, adding those its last directory does not end with, and returns
// the longer chain and how many directories it added; ok is false when a
// file has one of comps' names.
func descend(stack []*buildNode, comps []string) (_ []*buildNode, added int, ok bool) {
	for _, c := range comps {
		parent := stack[len(stack)-1]
		if n := len(parent.children); n > 0 && parent.children[n-1].name == c {
			if parent.children[n-1].file >= 0 {
				return stack, added, false // a file has this name
			}
			stack = append(stack, parent.children[n-1])
			continue
		}
		d := &buildNode{name: c, file: -1}
		parent.children = append(parent.children, d)
		stack = append(stack, d)
		added++
	}
	return stack, added, true
}

// writeTree encodes the tree under root as a body, breadth first, and
// returns it with the bytes of its files.
func writeTree(root *buildNode, files []File, checksums bool) (body []byte, total uint64) {
	var w bodyWriter
	var ver []byte
	queue := []*buildNode{root}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		w.dir(len(d.children))
		for _, c := range d.children {
			if c.file < 0 {
				w.child([]byte(c.name), nil, 0, nil)
				queue = append(queue, c)
				continue
			}
			f := files[c.file]
			ver = appendVersion(ver[:0], f.Version, f.Size)
			var sum []byte
			if checksums {
				sum = f.Sum
			}
			w.child([]byte(c.name), ver, f.Size, sum)
			total += uint64(f.Size)
		}
	}
	return w.b, total
}

// checkFile says why f cannot be in a manifest, or "".
func checkFile(f File, needSum bool) string {
	switch c, err := backend.CleanPath(f.Path); {
	case err != nil || c != f.Path || f.Path == "":
		return "not a clean dataset path (absolute, \"..\", empty, control characters or a name over 255 bytes)"
	case len(f.Path) > MaxPathLen:
		return "path longer than " + strconv.Itoa(MaxPathLen) + " bytes"
	case f.Size < 0:
		return "negative size"
	case !ValidVersion(f.Version):
		return "version token is too long or has control characters"
	case f.Sum != nil && len(f.Sum) != SumSize:
		return "checksum is not a sha256"
	case needSum && f.Sum == nil:
		return "no checksum"
	}
	return ""
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
