package source_test

import (
	"errors"
	"net/url"
	"reflect"
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

// FuzzParse checks that Parse never panics, that every error wraps
// ErrInvalidURL, that String never prints a password, and that
// Parse(s.String()) round-trips every Source that Parse returns.
// Seeds live in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/data", "file:///data", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1",
		"cephfs://admin@mon:6789/x?fs=a", "nfs://nas/export", "nfs://nas:2049/export?uid=1000&gid=0&mountport=20048&conns=4&rsize=65536", "mirror:/a,/b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		src, err := source.Parse(raw)
		if err != nil {
			if !errors.Is(err, source.ErrInvalidURL) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalidURL", raw, err)
			}
			return
		}
		s := src.String()
		if src.Kind == source.KindS3 || src.Kind == source.KindNFS {
			if u, err := url.Parse(s); err != nil || u.User != nil {
				t.Fatalf("String() = %q: unparsable or contains userinfo (%v)", s, err)
			}
		}
		again, err := source.Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but Parse(String() = %q): %v", raw, s, err)
		}
		if !reflect.DeepEqual(again, src) {
			t.Fatalf("round trip of %q via %q:\n got %#v\nwant %#v", raw, s, again, src)
		}
		if again.String() != s {
			t.Fatalf("String() not stable: %q then %q", s, again.String())
		}
	})
}
