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
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !ValidVersion(opts.Info.Source) || len(opts.Info.Source) > MaxSourceLen {
		return nil, 0, fmt.Errorf("manifest: build: source ID %q is not printable or too long", opts.Info.Source)
	}
	skip := func(p, why string) {
		skipped++
		if skipped <= maxWarnings {
			log.Warn("manifest: skipping path", "path", strconv.Quote(p), "reason", why)
		}
	}
	type item struct {
		path string
		file int // index in files, -1 for a directory
	}
	items := make([]item, 0, len(files)+len(opts.Dirs))
	for i, f := range files {
		switch why := checkFile(f, opts.Info.Checksums); why {
		case "":
			items = append(items, item{f.Path, i})
		default:
			skip(f.Path, why)
		}
	}
	for _, d := range opts.Dirs {
		if d == "" {
			continue
		}
		if c, err := backend.CleanPath(d); err != nil || c != d || len(d) > MaxPathLen {
			skip(d, "not a clean dataset path (absolute, \"..\", control characters, over-long name or path)")
			continue
		}
		items = append(items, item{d, -1})
	}
	// Path order; a file sorts before a directory of the same path, so that
	// the file wins, like the s3 backend's listings.
	slices.SortStableFunc(items, func(a, b item) int {
		if c := comparePaths(a.path, b.path); c != 0 {
			return c
		}
		return boolCmp(a.file < 0, b.file < 0)
	})

	type node struct {
		name     string
		file     int // -1 for a directory
		children []*node
	}
	root := &node{file: -1}
	stack := []*node{root} // the directory chain of the previous item
	nFiles, nDirs := 0, 1
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
		ok := true
		for _, c := range comps[depth-1 : last] {
			parent := stack[len(stack)-1]
			if n := len(parent.children); n > 0 && parent.children[n-1].name == c {
				if parent.children[n-1].file >= 0 {
					ok = false // a file has this name
					break
				}
				stack = append(stack, parent.children[n-1])
				continue
			}
			d := &node{name: c, file: -1}
			parent.children = append(parent.children, d)
			stack = append(stack, d)
			nDirs++
		}
		if !ok {
			skip(it.path, "a file has the name of one of its parent directories")
			continue
		}
		if it.file < 0 {
			continue
		}
		parent := stack[len(stack)-1]
		name := comps[len(comps)-1]
		if n := len(parent.children); n > 0 && parent.children[n-1].name == name {
			skip(it.path, "duplicate path")
			continue
		}
		parent.children = append(parent.children, &node{name: name, file: it.file})
		nFiles++
	}
	if skipped > maxWarnings {
		log.Warn("manifest: skipped paths", "count", skipped, "logged", maxWarnings)
	}
	if nFiles+nDirs > MaxEntries {
		return nil, skipped, fmt.Errorf("manifest: build: %d entries exceed the limit of %d", nFiles+nDirs, MaxEntries)
	}

	// Breadth-first records.
	var w bodyWriter
	var total uint64
	var ver []byte
	queue := []*node{root}
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
			if opts.Info.Checksums {
				sum = f.Sum
			}
			w.child([]byte(c.name), ver, f.Size, sum)
			total += uint64(f.Size)
		}
	}
	h := header{format: FormatVersion, files: uint64(nFiles), dirs: uint64(nDirs), bytes: total,
		created: opts.Info.Created.UnixNano(), source: opts.Info.Source}
	if opts.Info.Checksums {
		h.flags |= flagChecksums
	}
	m, err = parseBody(w.b, h)
	if err != nil {
		return nil, skipped, fmt.Errorf("manifest: build: %w (a bug)", err)
	}
	return m, skipped, nil
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
