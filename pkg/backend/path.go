package backend

import (
	"context"
	"fmt"
	"strings"

	"github.com/epochfs/epochfs/pkg/source"
)

// CleanPath validates a dataset path and returns it in canonical form. The
// root is "" (and "." is accepted as the root). Any other path must be
// slash-separated components that each satisfy source.ValidName: no leading or
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
		if !source.ValidName(comp) {
			return "", fmt.Errorf("backend: path %q: %w: bad component %q", p, ErrInvalidPath, comp)
		}
	}
	return p, nil
}

// JoinPath joins a directory path and a child name ("" is the root).
func JoinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// CheckRead validates what every ReadAt is given, in the order the backends
// answer it: the path (returned cleaned; its error as CleanPath's), a
// context not yet done, a non-negative offset. Errors name kind and path.
func CheckRead(ctx context.Context, kind source.Kind, p string, off int64) (string, error) {
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
