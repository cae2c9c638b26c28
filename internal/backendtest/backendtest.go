// Package backendtest is the conformance suite that every backend.Backend
// passes: the same stats, listings, ranged reads, versions, invalid paths
// and cancellation, checked against a real server or directory built from
// one map of files. Backend packages call Run from their tests.
//
// It knows the Backend contract only, nothing of any implementation.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Maker builds a fresh dataset holding exactly files (path → content; the
// directories are implied by the paths) and returns a Backend serving it.
// It registers any cleanup with t.Cleanup; Run closes the Backend.
type Maker func(t *testing.T, files map[string][]byte) backend.Backend

// Modifier rewrites the file at path of the dataset that b (returned by the
// Maker) serves, so that its version changes.
type Modifier func(t *testing.T, b backend.Backend, path string, data []byte)

// Option enables an optional part of the suite.
type Option func(*config)

type config struct {
	modify Modifier
}

// WithModify enables the subtests that change a file under the backend
// (version change, ErrChanged). Without it they are skipped.
func WithModify(m Modifier) Option {
	return func(c *config) { c.modify = m }
}

// Dataset is the content every Maker is asked to build by Run (a copy is
// passed to it). Exposed so backend tests can reuse it.
func Dataset() map[string][]byte {
	return map[string][]byte{
		"a.txt":               pattern(100, 1),
		"empty":               {},
		"big.bin":             pattern(300_000, 7),
		"dir/b.bin":           pattern(5000, 2),
		"dir/sub/c.bin":       pattern(10, 3),
		"dir/sub/deeper/d":    []byte("d"),
		"with space.txt":      []byte("hello, spaces"),
		"ünïcödé/日本語 データ.txt": []byte("こんにちは"),
	}
}

// pattern returns n deterministic bytes that differ at every offset mod 251.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ seed
	}
	return b
}

func clone(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// Run runs the conformance suite. mk is called once for the shared
// read-only dataset and once more for each subtest that modifies files.
func Run(t *testing.T, mk Maker, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	files := Dataset()
	b := mk(t, clone(files))
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx := context.Background()

	t.Run("ID", func(t *testing.T) {
		if b.ID() == "" {
			t.Fatal("ID() is empty")
		}
	})

	t.Run("StatRoot", func(t *testing.T) {
		e, err := b.Stat(ctx, "")
		if err != nil {
			t.Fatalf("Stat(\"\"): %v", err)
		}
		if !e.IsDir || e.Name != "" {
			t.Fatalf("Stat(\"\") = %+v, want a directory named \"\"", e)
		}
	})

	t.Run("StatFile", func(t *testing.T) {
		for _, p := range []string{"a.txt", "empty", "big.bin", "dir/b.bin", "dir/sub/deeper/d"} {
			e, err := b.Stat(ctx, p)
			if err != nil {
				t.Fatalf("Stat(%q): %v", p, err)
			}
			want := int64(len(files[p]))
			if e.IsDir || e.Size != want || e.Name != base(p) || e.Version == "" {
				t.Errorf("Stat(%q) = %+v, want a file named %q of %d bytes with a version", p, e, base(p), want)
			}
		}
	})

	t.Run("StatDir", func(t *testing.T) {
		for _, p := range []string{"dir", "dir/sub", "dir/sub/deeper", "ünïcödé"} {
			e, err := b.Stat(ctx, p)
			if err != nil {
				t.Fatalf("Stat(%q): %v", p, err)
			}
			if !e.IsDir || e.Size != 0 || e.Name != base(p) || e.Version != "" {
				t.Errorf("Stat(%q) = %+v, want a directory named %q, size 0, no version", p, e, base(p))
			}
		}
	})

	t.Run("StatMissing", func(t *testing.T) {
		for _, p := range []string{"nope", "dir/nope", "dir/sub/c", "a.txt/x", "di"} {
			if e, err := b.Stat(ctx, p); !errors.Is(err, backend.ErrNotExist) {
				t.Errorf("Stat(%q) = %+v, %v; want ErrNotExist", p, e, err)
			}
		}
	})

	t.Run("List", func(t *testing.T) {
		for _, tc := range []struct {
			dir  string
			want []string // name, with a trailing "/" for directories
		}{
			{"", []string{"a.txt", "big.bin", "dir/", "empty", "with space.txt", "ünïcödé/"}},
			{"dir", []string{"b.bin", "sub/"}},
			{"dir/sub", []string{"c.bin", "deeper/"}},
			{"dir/sub/deeper", []string{"d"}},
			{"ünïcödé", []string{"日本語 データ.txt"}},
		} {
			es, err := b.List(ctx, tc.dir)
			if err != nil {
				t.Fatalf("List(%q): %v", tc.dir, err)
			}
			var got []string
			for _, e := range es {
				name := e.Name
				if e.IsDir {
					name += "/"
				}
				got = append(got, name)
				p := join(tc.dir, e.Name)
				if e.IsDir {
					if e.Size != 0 || e.Version != "" {
						t.Errorf("List(%q): directory %+v has a size or version", tc.dir, e)
					}
					continue
				}
				if e.Size != int64(len(files[p])) || e.Version == "" {
					t.Errorf("List(%q): %+v, want %d bytes and a version", tc.dir, e, len(files[p]))
				}
				se, err := b.Stat(ctx, p)
				if err != nil || se.Version != e.Version || se.Size != e.Size {
					t.Errorf("Stat(%q) = %+v, %v; disagrees with List entry %+v", p, se, err, e)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.dir, got, tc.want)
			}
		}
	})

	t.Run("ListErrors", func(t *testing.T) {
		for _, tc := range []struct {
			dir  string
			want error
		}{
			{"a.txt", backend.ErrNotDir},
			{"dir/b.bin", backend.ErrNotDir},
			{"nope", backend.ErrNotExist},
			{"dir/nope", backend.ErrNotExist},
			{"di", backend.ErrNotExist},
		} {
			if es, err := b.List(ctx, tc.dir); !errors.Is(err, tc.want) {
				t.Errorf("List(%q) = %v, %v; want %v", tc.dir, es, err, tc.want)
			}
		}
	})

	t.Run("ReadAt", func(t *testing.T) {
		big := files["big.bin"]
		size := int64(len(big))
		for _, tc := range []struct {
			name    string
			path    string
			off     int64
			n       int
			wantN   int
			wantEOF bool // io.EOF required; when false, nil required unless wantN == n at the very end
		}{
			{"start", "big.bin", 0, 4096, 4096, false},
			{"middle", "big.bin", 123_457, 10_000, 10_000, false},
			{"exact end", "big.bin", size - 1000, 1000, 1000, false},
			{"across end", "big.bin", size - 10, 100, 10, true},
			{"at EOF", "big.bin", size, 10, 0, true},
			{"past EOF", "big.bin", size + 1000, 10, 0, true},
			{"whole small", "a.txt", 0, 100, 100, false},
			{"one byte", "dir/sub/deeper/d", 0, 1, 1, false},
			{"empty file", "empty", 0, 10, 0, true},
			{"unicode", "ünïcödé/日本語 データ.txt", 3, 6, 6, false},
			{"space", "with space.txt", 7, 100, 6, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				buf := make([]byte, tc.n)
				n, err := b.ReadAt(ctx, tc.path, "", buf, tc.off)
				if n != tc.wantN {
					t.Fatalf("ReadAt(%q, off %d, len %d) n = %d (err %v), want %d", tc.path, tc.off, tc.n, n, err, tc.wantN)
				}
				switch {
				case tc.wantEOF && err != io.EOF:
					t.Fatalf("ReadAt(%q, off %d, len %d) err = %v, want io.EOF", tc.path, tc.off, tc.n, err)
				case !tc.wantEOF && err != nil && !(err == io.EOF && tc.off+int64(n) == int64(len(files[tc.path]))):
					t.Fatalf("ReadAt(%q, off %d, len %d) err = %v, want nil", tc.path, tc.off, tc.n, err)
				}
				want := files[tc.path][min(tc.off, int64(len(files[tc.path]))):]
				want = want[:min(len(want), tc.n)]
				if !bytes.Equal(buf[:n], want) {
					t.Fatalf("ReadAt(%q, off %d, len %d): wrong bytes", tc.path, tc.off, tc.n)
				}
			})
		}
	})

	t.Run("ReadAtErrors", func(t *testing.T) {
		buf := make([]byte, 10)
		for _, tc := range []struct {
			path    string
			version string
			want    error
		}{
			{"", "", backend.ErrIsDir},
			{"dir", "", backend.ErrIsDir},
			{"dir/sub", "", backend.ErrIsDir},
			{"nope", "", backend.ErrNotExist},
			{"dir/nope", "", backend.ErrNotExist},
			{"a.txt", "not-the-version", backend.ErrChanged},
		} {
			if n, err := b.ReadAt(ctx, tc.path, tc.version, buf, 0); n != 0 || !errors.Is(err, tc.want) {
				t.Errorf("ReadAt(%q, version %q) = %d, %v; want 0, %v", tc.path, tc.version, n, err, tc.want)
			}
		}
		if _, err := b.ReadAt(ctx, "a.txt", "", buf, -1); err == nil {
			t.Errorf("ReadAt at a negative offset: no error")
		}
	})

	t.Run("Versions", func(t *testing.T) {
		e1, err := b.Stat(ctx, "big.bin")
		if err != nil {
			t.Fatal(err)
		}
		e2, err := b.Stat(ctx, "big.bin")
		if err != nil {
			t.Fatal(err)
		}
		if e1.Version != e2.Version {
			t.Fatalf("version not stable: %q then %q", e1.Version, e2.Version)
		}
		other, err := b.Stat(ctx, "dir/b.bin")
		if err != nil {
			t.Fatal(err)
		}
		if other.Version == e1.Version {
			t.Errorf("two different files share version %q", e1.Version)
		}
		buf := make([]byte, 1000)
		if n, err := b.ReadAt(ctx, "big.bin", e1.Version, buf, 5000); err != nil || n != 1000 ||
			!bytes.Equal(buf, files["big.bin"][5000:6000]) {
			t.Fatalf("ReadAt with the current version = %d, %v (or wrong bytes)", n, err)
		}
		// At or past the end, a wrong version is still reported.
		if _, err := b.ReadAt(ctx, "big.bin", "not-the-version", buf, int64(len(files["big.bin"]))); !errors.Is(err, backend.ErrChanged) {
			t.Errorf("ReadAt at EOF with a wrong version = %v, want ErrChanged", err)
		}
	})

	t.Run("InvalidPaths", func(t *testing.T) {
		buf := make([]byte, 1)
		for _, p := range []string{
			"../x", "..", "/abs", "/", "a//b", "dir/", "dir/../a.txt", "./a.txt",
			"a\x00b", "a\nb", "dir/\x7f", strings.Repeat("x", 256),
		} {
			if _, err := b.Stat(ctx, p); !errors.Is(err, backend.ErrInvalidPath) {
				t.Errorf("Stat(%q) = %v, want ErrInvalidPath", p, err)
			}
			if _, err := b.List(ctx, p); !errors.Is(err, backend.ErrInvalidPath) {
				t.Errorf("List(%q) = %v, want ErrInvalidPath", p, err)
			}
			if _, err := b.ReadAt(ctx, p, "", buf, 0); !errors.Is(err, backend.ErrInvalidPath) {
				t.Errorf("ReadAt(%q) = %v, want ErrInvalidPath", p, err)
			}
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		buf := make([]byte, 100)
		start := time.Now()
		if _, err := b.Stat(cctx, "a.txt"); !errors.Is(err, context.Canceled) {
			t.Errorf("Stat with a canceled ctx = %v, want context.Canceled", err)
		}
		if _, err := b.List(cctx, "dir"); !errors.Is(err, context.Canceled) {
			t.Errorf("List with a canceled ctx = %v, want context.Canceled", err)
		}
		if _, err := b.ReadAt(cctx, "big.bin", "", buf, 0); !errors.Is(err, context.Canceled) {
			t.Errorf("ReadAt with a canceled ctx = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("canceled calls took %v", d)
		}
		dctx, cancel2 := context.WithTimeout(ctx, time.Nanosecond)
		defer cancel2()
		<-dctx.Done()
		if _, err := b.ReadAt(dctx, "big.bin", "", buf, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ReadAt past its deadline = %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		big := files["big.bin"]
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 8 {
			wg.Go(func() {
				buf := make([]byte, 7919)
				for i := range 5 {
					off := int64((g*5 + i) * 6007)
					n, err := b.ReadAt(ctx, "big.bin", "", buf, off)
					if err != nil && err != io.EOF {
						errs <- err
						return
					}
					if !bytes.Equal(buf[:n], big[off:off+int64(n)]) {
						errs <- fmt.Errorf("wrong bytes at %d", off)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("Modified", func(t *testing.T) {
		if cfg.modify == nil {
			t.Skip("backend maker cannot modify files (no WithModify)")
		}
		b2 := mk(t, map[string][]byte{"f": []byte("version one"), "g": []byte("other")})
		t.Cleanup(func() { b2.Close() })
		e1, err := b2.Stat(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		next := []byte("version two, longer")
		cfg.modify(t, b2, "f", next)
		e2, err := b2.Stat(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		if e2.Version == e1.Version {
			t.Fatalf("version %q did not change after a modification", e1.Version)
		}
		buf := make([]byte, 64)
		if n, err := b2.ReadAt(ctx, "f", e1.Version, buf, 0); !errors.Is(err, backend.ErrChanged) || n != 0 {
			t.Fatalf("ReadAt with the old version = %d, %v; want 0, ErrChanged", n, err)
		}
		n, err := b2.ReadAt(ctx, "f", e2.Version, buf, 0)
		if err != io.EOF || !bytes.Equal(buf[:n], next) {
			t.Fatalf("ReadAt with the new version = %q, %v; want %q, io.EOF", buf[:n], err, next)
		}
		es, err := b2.List(ctx, "")
		if err != nil || len(es) != 2 || es[0].Version != e2.Version {
			t.Fatalf("List after modification = %+v, %v; want f with version %q", es, err, e2.Version)
		}
	})
}

func base(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Modifiers maps each backend a test made to the function that rewrites a
// file in it (e.g. in every replica of a mirror); its Modify is what
// WithModify takes. Safe for concurrent use.
type Modifiers struct{ m sync.Map } // backend.Backend → func(t, path, data)

// Add registers fn as the rewrite of files in b.
func (r *Modifiers) Add(b backend.Backend, fn func(t *testing.T, p string, data []byte)) {
	r.m.Store(b, fn)
}

// Modify rewrites p in b with data through b's registered function.
func (r *Modifiers) Modify(t *testing.T, b backend.Backend, p string, data []byte) {
	fn, ok := r.m.Load(b)
	if !ok {
		t.Fatal("backendtest: no modifier registered for this backend")
	}
	fn.(func(*testing.T, string, []byte))(t, p, data)
}
