package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest/manifesttest"
)

// FuzzLoad feeds arbitrary bytes to Load three ways: as a file, as a file
// whose checksum is recomputed (so mutations reach the header and the zstd
// layer), and as a raw body behind a valid header (so they reach the body
// parser). Load must never panic, must return a manifest xor an error
// wrapping ErrCorrupt/ErrUnsupported, and a manifest it accepts must be
// internally consistent and survive Encode/Load unchanged.
//
// Seed corpus: testdata/fuzz/FuzzLoad (regenerate with
// EPOCHFS_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus).
func FuzzLoad(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLoad(t, data)
		checkLoad(t, reseal(data))
		if len(data) >= 3 {
			h := header{format: FormatVersion, files: uint64(data[0]), dirs: uint64(data[1]%8) + 1, flags: uint16(data[2] & 1), bytes: 0, source: "s"}
			body := data[3:]
			h.bodyLen = uint64(len(body))
			if h.validate() == nil {
				m, err := parseBody(body, h)
				checkResult(t, m, err)
			}
		}
	})
}

func checkLoad(t *testing.T, data []byte) {
	m, err := Load(data)
	checkResult(t, m, err)
}

func checkResult(t *testing.T, m *Manifest, err error) {
	t.Helper()
	if err != nil {
		if m != nil {
			t.Fatal("manifest and error")
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnsupported", err)
		}
		return
	}
	files := 0
	m.Walk(func(i int, p string) bool {
		files++
		if c, err := backend.CleanPath(p); err != nil || c != p || len(p) > MaxPathLen {
			t.Fatalf("accepted path %q: %v", p, err)
		}
		if j, ok := m.Find(p); !ok || j != i || m.Path(i) != p {
			t.Fatalf("Find/Path disagree on %q", p)
		}
		if !ValidVersion(m.Version(i)) || m.Size(i) < 0 {
			t.Fatalf("%q: version %q size %d", p, m.Version(i), m.Size(i))
		}
		return true
	})
	if files != m.Files() {
		t.Fatalf("walked %d files, Files() %d", files, m.Files())
	}
	enc, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Load(enc)
	if err != nil {
		t.Fatalf("re-encoded manifest does not load: %v", err)
	}
	if enc2, _ := m2.Encode(); !bytes.Equal(enc, enc2) {
		t.Fatal("Encode is not stable")
	}
}

func seeds(t testing.TB) [][]byte {
	files := sampleFiles()
	plain := mustEncode(t, mustBuild(t, files, BuildOptions{Dirs: []string{"empty"}}))
	withSums := func() []byte {
		fs := append([]File(nil), files...)
		for i := range fs {
			fs[i].Sum = bytes.Repeat([]byte{byte(i)}, SumSize)
		}
		return mustEncode(t, mustBuild(t, fs, BuildOptions{Info: Info{Checksums: true}}))
	}()
	empty := mustEncode(t, mustBuild(t, nil, BuildOptions{}))
	body := rawBody([]rec{{name: "a", ver: rawV, size: 3}, {name: "d"}}, []rec{{name: "x", ver: []byte{tagPosix, 2}, size: 1}})
	// Bombs: a header announcing a large body over a frame
	// padded by a skippable frame, and a body behind a skippable frame.
	ph, hlen, err := parseHeader(plain[:len(plain)-trailerLen])
	if err != nil {
		t.Fatal(err)
	}
	comp := plain[hlen : len(plain)-trailerLen]
	m := mustBuild(t, files, BuildOptions{Dirs: []string{"empty"}})
	skipFirst := manifesttest.Envelope(manifesttest.Header{Format: ph.format, Files: uint64(m.Files()), Dirs: uint64(m.Dirs()), Bytes: uint64(m.TotalBytes()),
		BodyLen: uint64(len(m.body()))}, append(manifesttest.Skippable(16), comp...))
	return [][]byte{
		manifesttest.SkippableBomb(64 << 10),
		skipFirst,
		plain,
		withSums,
		empty,
		plain[:len(plain)/2],
		append([]byte{1, 1, 0}, body...),
		append([]byte{2, 2, 0}, body...),
		[]byte(Magic),
	}
}

// TestWriteSeedCorpus regenerates testdata/fuzz/FuzzLoad when
// EPOCHFS_WRITE_CORPUS=1.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("EPOCHFS_WRITE_CORPUS") != "1" {
		t.Skip("set EPOCHFS_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLoad")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range seeds(t) {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
