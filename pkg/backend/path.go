package backend

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name component, in bytes, that a dataset may
// expose (NAME_MAX on Linux).
const MaxNameLen = 255

// ValidName reports whether name can be one component of a dataset path: not
// empty, not "." or "..", no "/", no NUL or other control character, valid
// UTF-8, at most MaxNameLen bytes. Backends skip (and count) children whose
// names fail this check, so that nothing listed can escape the mount or
// confuse the kernel. Spaces and any printable Unicode are valid.
func ValidName(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > MaxNameLen {
		return false
	}
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == '/' || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// CleanPath validates a dataset path and returns it in canonical form. The
// root is "" (and "." is accepted as the root). Any other path must be
// slash-separated components that each satisfy ValidName: no leading or
// trailing slash, no empty component ("a//b"), no "." or "..". A bad path
// returns an error wrapping ErrInvalidPath; paths are never silently
// rewritten into a different path, so a caller cannot be tricked into
// reading something other than what it named.
func CleanPath(p string) (string, error) {
	if p == "" || p == "." {
		return "", nil
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("backend: path %q: %w: absolute path", p, ErrInvalidPath)
	}
	rest := p
	for rest != "" {
		comp := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i+1:]
			if rest == "" {
				return "", fmt.Errorf("backend: path %q: %w: trailing slash", p, ErrInvalidPath)
			}
		} else {
			rest = ""
		}
		if !ValidName(comp) {
			return "", fmt.Errorf("backend: path %q: %w: bad component %q", p, ErrInvalidPath, comp)
		}
	}
	return p, nil
}

// joinPath joins a directory path and a child name ("" is the root).
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// checkRead validates what every ReadAt is given, in the order the backends
// answer it: the path (returned cleaned; its error as CleanPath's), a
// context not yet done, a non-negative offset. Errors name kind and path.
func checkRead(ctx context.Context, kind Kind, p string, off int64) (string, error) {
	p, err := CleanPath(p)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%s: read %q: %w", kind, p, err)
	}
	if off < 0 {
		return "", fmt.Errorf("%s: read %q: negative offset %d", kind, p, off)
	}
	return p, nil
}
