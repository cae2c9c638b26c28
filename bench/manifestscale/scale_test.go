package main

import (
	"context"
	"testing"
)

// TestScale100k is the benchmark at 100k files (20k under -race), for correctness only (no
// timing is asserted): the manifest built by manifest.Index over the
// synthetic listing, written and read back, holds every file of the listing
// with its size and version, and nothing else.
func TestScale100k(t *testing.T) {
	for _, v := range []string{VersionsETag, VersionsPosix} {
		t.Run(v, func(t *testing.T) {
			const files, classes = testFiles, 1000
			m, r, err := Run(context.Background(), Config{Files: files, Classes: classes, Versions: v, Dir: t.TempDir(), Workers: 4})
			if err != nil {
				t.Fatal(err)
			}
			if r.Files != files || m.Files() != files || m.Dirs() != classes+2 || r.Entries != files+classes+2 {
				t.Fatalf("%d files (%d loaded), %d dirs, %d entries; want %d files, %d dirs", r.Files, m.Files(), m.Dirs(), r.Entries, files, classes+2)
			}
			if r.FileSize <= 0 || r.HeapBytes <= 0 {
				t.Errorf("file size %d, heap %d", r.FileSize, r.HeapBytes)
			}
			b := newSynthBackend(files, classes, v)
			var total int64
			for c := range classes {
				for k := range b.classFiles(c) {
					i := c + k*classes
					p := "train/" + wnid(c) + "/" + fileName(c, k)
					j, ok := m.Find(p)
					switch {
					case !ok:
						t.Fatalf("%s missing", p)
					case m.IsDir(j) || m.Size(j) != b.sizes[i] || m.Version(j) != b.version(i, b.sizes[i]) || m.Path(j) != p:
						t.Fatalf("%s: dir %v size %d version %q path %q; want size %d version %q", p, m.IsDir(j), m.Size(j),
							m.Version(j), m.Path(j), b.sizes[i], b.version(i, b.sizes[i]))
					}
					total += b.sizes[i]
				}
			}
			if m.TotalBytes() != total {
				t.Errorf("TotalBytes %d, want %d", m.TotalBytes(), total)
			}
			n := 0
			m.Walk(func(int, string) bool { n++; return true })
			if n != files {
				t.Errorf("walked %d files, want %d", n, files)
			}
		})
	}
}
