package manifest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest/manifesttest"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc:
// every allocation counts, freed or not, so it bounds the peak heap f
// adds). The package's tests do not run in parallel.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// bombs are manifests whose header or zstd frame lies about the body.
func bombs(t testing.TB) []struct {
	name, want string
	data       []byte
} {
	valid := mustEncode(t, mustBuild(t, sampleFiles(), BuildOptions{}))
	h, hlen, err := parseHeader(valid[:len(valid)-trailerLen])
	if err != nil {
		t.Fatal(err)
	}
	comp := valid[hlen : len(valid)-trailerLen]
	re := func(bodyLen uint64, comp []byte) []byte {
		return manifesttest.Envelope(manifesttest.Header{Format: h.format, Files: h.files, Dirs: h.dirs, Bytes: h.bytes, BodyLen: bodyLen}, comp)
	}
	// 200 MiB of one random-looking MiB over and over: a real frame that
	// declares 200 MiB, 1 MiB compressed, whose body is no manifest.
	garbage, err := manifesttest.GarbageFrame(200, 1)
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name, want string
		data       []byte
	}{
		// A hostile manifest: 512 MiB announced, a 2.1 MB file.
		{"skippable padding, 512 MiB announced", "over the limit", manifesttest.SkippableBomb(512 << 20)},
		{"skippable padding, 200 MiB announced", "does not declare its size", manifesttest.SkippableBomb(200 << 20)},
		{"skippable frame before the body", "skippable", re(h.bodyLen, append(manifesttest.Skippable(64), comp...))},
		{"skippable frame after the body", "after the zstd frame", re(h.bodyLen, append(comp[:len(comp):len(comp)], manifesttest.Skippable(64)...))},
		{"a second frame", "after the zstd frame", re(h.bodyLen, append(comp[:len(comp):len(comp)], comp...))},
		{"body announced 100 times its frame's", "declares", re(100*h.bodyLen, append(comp[:len(comp):len(comp)], make([]byte, 100*h.bodyLen/256)...))},
		{"a 200 MiB frame of garbage", "directory 0", manifesttest.Envelope(manifesttest.Header{Files: 1, Dirs: 1, BodyLen: 200 << 20}, garbage)},
	}
}

// TestManifestBomb: a manifest whose header or frame lies about its body
// is refused, by Load and by ReadInfo, with a clear error and an
// allocation far below what it announces (< 64 MiB for 200–512 MiB
// announced). Before: Load allocated the announced body up front
// (DecodeAll into make(0, bodyLen): 512 MiB for the 2.1 MB file), loaded
// a body behind a skippable frame, and ReadInfo did not exist (the node
// plugin loaded the manifest).
func TestManifestBomb(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range bombs(t) {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = Load(tc.data) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error saying %q", err, tc.want)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
				t.Errorf("Load: %v wraps neither ErrCorrupt nor ErrTooLarge", err)
			}
			if n > 64<<20 {
				t.Errorf("Load allocated %d MiB before refusing a %d-byte file", n>>20, len(tc.data))
			}
			t.Logf("%d-byte file: Load allocated %.1f MiB: %v", len(tc.data), float64(n)/(1<<20), err)

			// ReadInfo streams the file through a 1 MiB buffer and never
			// decompresses: it refuses only what the header refuses.
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			n = allocated(func() { _, _, err = ReadInfo(context.Background(), nil, path, backend.Options{}, 0) })
			if n > 4<<20 {
				t.Errorf("ReadInfo allocated %d MiB", n>>20)
			}
			if strings.Contains(tc.name, "512 MiB") && !errors.Is(err, ErrTooLarge) {
				t.Errorf("ReadInfo: %v, want ErrTooLarge", err)
			}
		})
	}
}

// TestLongVersionsMemoryCap: a manifest of 200,000 files
// with 1 KiB versions, 2.3 MB on disk — is refused under a limit below
// what it takes (ErrTooLarge naming the figures, before anything is
// decompressed), and loads within its estimate under the default limit.
// Before: no limit; it left 589 MiB live after Load (the whole
// decompressed body and the records both held).
func TestLongVersionsMemoryCap(t *testing.T) {
	data, err := manifesttest.LongVersions(200_000)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, err := ReadInfo(context.Background(), nil, path, backend.Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Files != 200_000 || s.Dirs != 1 || s.TotalBytes != 200_000 || s.FileSize != int64(len(data)) {
		t.Fatalf("ReadInfo: %+v", s)
	}
	t.Logf("%d-byte file, %d files: estimated %.1f MiB in memory", len(data), s.Files, float64(s.MemoryBytes)/(1<<20))

	var n uint64
	n = allocated(func() { _, err = ReadFile(path, 128<<20) })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "over the limit of 128MiB") {
		t.Fatalf("ReadFile under 128 MiB: %v, want ErrTooLarge naming the limit", err)
	}
	if n > 1<<20 {
		t.Errorf("refusing it allocated %d KiB", n>>10)
	}
	t.Logf("refused: %v", err)

	var m *Manifest
	n = allocated(func() { m, err = ReadFile(path, 0) })
	if err != nil {
		t.Fatal(err)
	}
	if m.Files() != 200_000 || m.MemoryBytes() > s.MemoryBytes {
		t.Errorf("loaded %d files holding %d bytes, estimate %d", m.Files(), m.MemoryBytes(), s.MemoryBytes)
	}
	// The file, the records (within the estimate) and their first
	// capacity (16 times the file, copied once when the body proves
	// larger), the zstd window.
	if limit := uint64(s.MemoryBytes) + 17*uint64(len(data)) + 32<<20; n > limit {
		t.Errorf("loading allocated %d MiB, want at most %d MiB", n>>20, limit>>20)
	}
	t.Logf("loaded under the default limit: allocated %.1f MiB, holds %.1f MiB", float64(n)/(1<<20), float64(m.MemoryBytes())/(1<<20))
	if v := m.Version(1); len(v) != 1024 {
		t.Errorf("version of %d bytes", len(v))
	}
}

// TestReadInfo: ReadInfo's summary is the loaded manifest's, for a local
// file, a dataset's own manifest and none; a flipped byte anywhere is a
// checksum mismatch, found without decompressing; a truncated or extended
// file is refused.
func TestReadInfo(t *testing.T) {
	ctx := context.Background()
	fs := append([]File(nil), sampleFiles()...)
	for i := range fs {
		fs[i].Sum = make([]byte, SumSize)
	}
	man := mustBuild(t, fs, BuildOptions{Info: Info{Checksums: true, Source: "test", Created: created}})
	data := mustEncode(t, man)
	dir := t.TempDir()
	path := filepath.Join(dir, "m")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, where, err := ReadInfo(ctx, nil, path, backend.Options{}, 0)
	if err != nil || where != path {
		t.Fatal(where, err)
	}
	want := Summary{Info: man.Info(), Files: int64(man.Files()), Dirs: int64(man.Dirs()), TotalBytes: man.TotalBytes(),
		FileSize: int64(len(data)), MemoryBytes: s.MemoryBytes}
	if !s.Created.Equal(want.Created) || s.Source != want.Source || s.Checksums != want.Checksums ||
		s.Files != want.Files || s.Dirs != want.Dirs || s.TotalBytes != want.TotalBytes || s.FileSize != want.FileSize {
		t.Errorf("ReadInfo = %+v, want %+v", *s, want)
	}
	if s.MemoryBytes < man.MemoryBytes() {
		t.Errorf("estimate %d below what the manifest holds, %d", s.MemoryBytes, man.MemoryBytes())
	}
	for i := range data {
		b := append([]byte(nil), data...)
		b[i] ^= 0x04
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if s, _, err := ReadInfo(ctx, nil, path, backend.Options{}, 0); err == nil {
			t.Fatalf("flip at %d: %+v", i, s)
		}
	}
	for _, b := range [][]byte{data[:len(data)-1], append(append([]byte(nil), data...), 0)} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadInfo(ctx, nil, path, backend.Options{}, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d of %d bytes: %v, want ErrCorrupt", len(b), len(data), err)
		}
	}
	// Inside a dataset, and missing there.
	b := backendtest.Open(t, dir)
	if s, _, err := ReadInfo(ctx, b, LocAuto, backend.Options{}, 0); err != nil || s != nil {
		t.Errorf("no manifest: %v, %v", s, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".epochfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DefaultPath), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, _, err := ReadInfo(ctx, b, LocAuto, backend.Options{}, 0); err != nil || s == nil || s.TotalBytes != man.TotalBytes() {
		t.Errorf("dataset's manifest: %v, %v", s, err)
	}
	if s, _, err := ReadInfo(ctx, b, LocNone, backend.Options{}, 0); err != nil || s != nil {
		t.Errorf("none: %v, %v", s, err)
	}
}
