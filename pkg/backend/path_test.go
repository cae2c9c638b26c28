package backend_test

import (
	"errors"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
)

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      string // "" for success
	}{
		{"", "", ""},
		{".", "", ""},
		{"a", "a", ""},
		{"a/b c/日本", "a/b c/日本", ""},
		{"/abs", "", `backend: path "/abs": invalid path: absolute path`},
		{"a/", "", `backend: path "a/": invalid path: trailing slash`},
		{"a//b", "", `backend: path "a//b": invalid path: bad component ""`},
		{"../x", "", `backend: path "../x": invalid path: bad component ".."`},
		{"a/./b", "", `backend: path "a/./b": invalid path: bad component "."`},
		{"a\x00b", "", `backend: path "a\x00b": invalid path: bad component "a\x00b"`},
	} {
		got, err := backend.CleanPath(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, backend.ErrInvalidPath) || err.Error() != tc.err {
			t.Errorf("CleanPath(%q) error = %v, want %s (wrapping ErrInvalidPath)", tc.in, err, tc.err)
		}
	}
}
