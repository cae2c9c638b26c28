// Command manifestscale measures a dataset manifest at the seed's scale:
// 10M ImageNet-like files, built through the code
// `cachefs index` runs (manifest.Index over a backend.Backend), written with
// WriteFile, then loaded back as a mount does (manifest.ReadFile) and, as
// root, served by a real FUSE mount (pkg/mount, --manifest FILE).
//
// It reports: build time (the walk and Build), the file's size, the load
// time until lookups can be served, and the heap the loaded manifest holds
// per entry (runtime.MemStats.HeapAlloc after a GC, with and without it).
//
// No 10M files touch a disk: the listing comes from synthBackend, a fake
// in-memory backend that exists for this benchmark only (it answers List
// from a formula; its files have no bytes). Paths are
// train/nXXXXXXXX/nXXXXXXXX_N.JPEG over 1000 classes, sizes are
// internal/datagen's ImageNet-like log-normal (16 KB–5 MB, median 110 KB),
// versions S3 ETags (32 distinct hex digits) or posix
// "MTIMENANOS-SIZE-CTIMENANOS-INO" tokens (-versions).
//
//	go run ./bench/manifestscale -files 10000000 -dir /var/tmp/epochfs-manifest-scale
//	make bench-manifest-scale
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
)

// Version kinds of the synthetic files.
const (
	VersionsETag  = "etag"
	VersionsPosix = "posix"
)

// Config of one run.
type Config struct {
	Files    int    // number of files
	Classes  int    // class directories under train/ (1000 like ImageNet)
	Versions string // VersionsETag or VersionsPosix
	Dir      string // where the manifest file is written
	Mount    bool   // also time a real FUSE mount serving the manifest (root)
	Workers  int    // index listing workers
	Log      io.Writer
}

// Result of one run.
type Result struct {
	Files, Entries int
	Bytes          int64
	Build          time.Duration // manifest.Index: the walk of synthBackend and Build
	FileSize       int64         // bytes on disk
	Load           time.Duration // manifest.ReadFile: read, decompress, parse, validate
	HeapPerEntry   float64       // HeapAlloc with the loaded manifest − without, per entry (files + directories)
	HeapPerFile    float64       // the same per file
	HeapBytes      int64
	MountReady     time.Duration // pkg/mount Start (manifest loaded, FUSE mounted) + a stat of one file; 0 if not run
}

// synthBackend is a fake, in-memory backend.Backend for this benchmark
// only: it lists an ImageNet-like tree computed from a formula, and its
// files have no bytes (ReadAt fails). Good enough for manifest.Index, which
// only lists; never a backend for real use.
type synthBackend struct {
	files, classes int
	versions       string
	sizes          []int64 // by global file number
	classOf        map[string]int
}

func newSynthBackend(files, classes int, versions string) *synthBackend {
	b := &synthBackend{files: files, classes: classes, versions: versions,
		sizes: datagen.Spec{Files: files, Seed: 15}.Sizes(), classOf: make(map[string]int, classes)}
	for c := range classes {
		b.classOf[wnid(c)] = c
	}
	return b
}

// wnid is class c's synset-like directory name, nXXXXXXXX.
func wnid(c int) string { return fmt.Sprintf("n%08d", 1_440_764+c*97_931) }

// fileName is the name of the k-th file of class c: the class's wnid and an
// image number (not zero-padded and not contiguous, like ImageNet's).
func fileName(c, k int) string {
	return wnid(c) + "_" + strconv.Itoa(k*3+int(mix(uint64(c)<<32|uint64(k))%3)+1)
}

func mix(x uint64) uint64 {
	x ^= x >> 31
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>32
}

// classFiles is the number of files of class c; file k of class c is global
// file c + k·classes.
func (b *synthBackend) classFiles(c int) int {
	n := b.files / b.classes
	if c < b.files%b.classes {
		n++
	}
	return n
}

func (b *synthBackend) version(i int, size int64) string {
	if b.versions == VersionsPosix {
		mtime := int64(1_700_000_000_000_000_000) + int64(i)*1_000_003
		ctime := mtime + int64(mix(uint64(i))%5_000_000)
		return fmt.Sprintf("%d-%d-%d-%d", mtime, size, ctime, 12_345_678+i)
	}
	return fmt.Sprintf("%016x%016x", mix(uint64(i)), mix(uint64(i)^0xa5a5a5a5))
}

func (b *synthBackend) List(_ context.Context, p string) ([]backend.Entry, error) {
	switch {
	case p == "":
		return []backend.Entry{{Name: "train", IsDir: true}}, nil
	case p == "train":
		es := make([]backend.Entry, b.classes)
		for c := range es {
			es[c] = backend.Entry{Name: wnid(c), IsDir: true}
		}
		return es, nil
	}
	if dir, ok := strings.CutPrefix(p, "train/"); ok {
		if c, ok := b.classOf[dir]; ok {
			es := make([]backend.Entry, b.classFiles(c))
			for k := range es {
				i := c + k*b.classes
				es[k] = backend.Entry{Name: fileName(c, k), Size: b.sizes[i], Version: b.version(i, b.sizes[i])}
			}
			slices.SortFunc(es, func(x, y backend.Entry) int { return strings.Compare(x.Name, y.Name) })
			return es, nil
		}
	}
	return nil, fmt.Errorf("synth: list %q: %w", p, backend.ErrNotExist)
}

func (b *synthBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	if p == "" || p == "train" || (strings.HasPrefix(p, "train/") && !strings.Contains(p[len("train/"):], "/")) {
		return backend.Entry{Name: filepath.Base(p), IsDir: true}, nil
	}
	return backend.Entry{}, fmt.Errorf("synth: stat %q: %w", p, backend.ErrNotExist)
}

func (b *synthBackend) ReadAt(context.Context, string, string, []byte, int64) (int, error) {
	return 0, fmt.Errorf("synth: the benchmark's listing has no bytes: %w", backend.ErrNotExist)
}

func (b *synthBackend) ID() string   { return "synth://imagenet-like/" + strconv.Itoa(b.files) }
func (b *synthBackend) Close() error { return nil }

// heapAlloc returns the live heap after two GCs.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Run builds, writes and loads the manifest of cfg, and returns the
// manifest it loaded with the figures.
func Run(ctx context.Context, cfg Config) (*manifest.Manifest, Result, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	var r Result
	if cfg.Classes <= 0 {
		cfg.Classes = 1000
	}
	if cfg.Versions == "" {
		cfg.Versions = VersionsETag
	}
	if cfg.Versions != VersionsETag && cfg.Versions != VersionsPosix {
		return nil, r, fmt.Errorf("manifestscale: versions %q: want %s or %s", cfg.Versions, VersionsETag, VersionsPosix)
	}
	path := filepath.Join(cfg.Dir, "manifest")
	{
		b := newSynthBackend(cfg.Files, cfg.Classes, cfg.Versions)
		start := time.Now()
		m, st, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: cfg.Workers})
		if err != nil {
			return nil, r, err
		}
		r.Build = time.Since(start)
		r.Files, r.Entries, r.Bytes = m.Files(), m.Len(), m.TotalBytes()
		fmt.Fprintf(logw, "built %d files (%d dirs) in %s (%.0f files/s)\n", st.Files, st.Dirs,
			r.Build.Round(time.Millisecond), float64(st.Files)/r.Build.Seconds())
		if r.FileSize, err = m.WriteFile(path); err != nil {
			return nil, r, err
		}
		fmt.Fprintf(logw, "wrote %s: %d bytes (%.2f B/file)\n", path, r.FileSize, float64(r.FileSize)/float64(r.Files))
	}
	// The listing, the build's garbage and the built manifest are gone: load
	// from disk into a clean heap, as a mount does.
	before := heapAlloc()
	start := time.Now()
	m, err := manifest.ReadFile(path, benchMaxMemory)
	if err != nil {
		return nil, r, err
	}
	r.Load = time.Since(start)
	after := heapAlloc()
	r.HeapBytes = int64(after) - int64(before)
	r.HeapPerEntry = float64(r.HeapBytes) / float64(m.Len())
	r.HeapPerFile = float64(r.HeapBytes) / float64(m.Files())
	fmt.Fprintf(logw, "loaded in %s: heap %d bytes, %.1f B/entry, %.1f B/file\n", r.Load.Round(time.Millisecond),
		r.HeapBytes, r.HeapPerEntry, r.HeapPerFile)
	if m.Files() != r.Files || m.Len() != r.Entries || m.TotalBytes() != r.Bytes {
		return nil, r, fmt.Errorf("manifestscale: loaded %d files/%d entries/%d bytes, built %d/%d/%d",
			m.Files(), m.Len(), m.TotalBytes(), r.Files, r.Entries, r.Bytes)
	}
	if cfg.Mount {
		d, err := mountReady(ctx, cfg, path, m)
		if err != nil {
			return nil, r, err
		}
		r.MountReady = d
		fmt.Fprintf(logw, "mount ready (manifest loaded, FUSE mounted, one file stat'ed) in %s\n", d.Round(time.Millisecond))
	}
	runtime.KeepAlive(m)
	return m, r, nil
}

// benchMaxMemory lifts the manifest memory limit (--manifest-max-memory,
// 256 MiB by default) for manifests of up to 10M files and more.
const benchMaxMemory = 16 << 30

// mountReady times a real mount (pkg/mount in process) of an empty local
// directory serving the manifest at path: from Start until a stat of the
// last file through FUSE returns its size.
func mountReady(ctx context.Context, cfg Config, path string, m *manifest.Manifest) (time.Duration, error) {
	src, mnt, cacheDir := filepath.Join(cfg.Dir, "src"), filepath.Join(cfg.Dir, "mnt"), filepath.Join(cfg.Dir, "cache")
	for _, d := range []string{src, mnt, cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	defer os.RemoveAll(cacheDir)
	var last int
	var lastPath string
	m.Walk(func(i int, p string) bool { last, lastPath = i, p; return true })
	start := time.Now()
	mt, err := mount.New(mount.Config{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: 1 << 30,
		Manifest: path, ManifestMaxMemory: benchMaxMemory, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	if err := mt.Start(ctx); err != nil {
		return 0, fmt.Errorf("manifestscale: mount: %w (needs root)", err)
	}
	fi, err := os.Stat(filepath.Join(mnt, filepath.FromSlash(lastPath)))
	d := time.Since(start)
	if uerr := mt.Unmount(); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return 0, err
	}
	if fi.Size() != m.Size(last) {
		return 0, fmt.Errorf("manifestscale: %s through the mount is %d bytes, the manifest says %d", lastPath, fi.Size(), m.Size(last))
	}
	return d, nil
}
