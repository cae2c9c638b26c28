// Command hitratio measures the byte hit ratio of every policy through real
// mounts under shuffled epochs: the seed's NR
// experiment scaled down. It generates a deterministic image-like dataset D
// (internal/datagen), then for every cache size C (fractions of D) and every
// policy mounts the dataset through a fresh cache with pkg/mount — the real
// FUSE mount and the real cache, in process — reads shuffled epochs with
// parallel readers (internal/epoch, every file's sha256 checked) and records
// each epoch's byte hit ratio from the mount's counters:
// Δhit_bytes / (Δhit_bytes + Δmiss_bytes).
//
// It writes a markdown table and a PNG plot (mean hit ratio of epochs ≥ 2
// against C/D, one line per policy, with the C/D line NR should sit on).
//
//	go run ./bench/hitratio -dir /var/tmp/epochfs-hitratio -md bench/hitratio.md -png bench/hitratio.png
//	go run ./bench/hitratio -tiny            # a few hundred files, 2 epochs, nr and lru: seconds
//
// Needs root (FUSE). As root it drops the page cache before each epoch (the
// counters count opens, so the ratios do not depend on it; the files/s do).
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/epochfs/epochfs/bench/policies"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/units"
)

// Config of one benchmark run. Zero fields take the defaults of the full run.
type Config struct {
	Dir       string // work directory: dataset in data/, caches and mount points beside it
	Spec      datagen.Spec
	Fractions []float64 // cache sizes as fractions of the dataset's bytes
	Policies  []string
	Epochs    int
	Workers   int
	Drop      bool      // drop the page cache before each epoch (root only)
	Log       io.Writer // progress lines; nil discards
}

// FullConfig is the default run: 2,400 files (≈ 370 MB), five cache sizes,
// five policies, five epochs.
func FullConfig() Config {
	return Config{
		Spec:      datagen.Spec{Files: 2400, Classes: 24, Seed: 5},
		Fractions: []float64{1.0 / 16, 5.0 / 16, 10.0 / 16, 1, 1.25},
		Policies:  policies.Names(),
		Epochs:    5,
		Workers:   8,
		Drop:      true,
	}
}

// TinyConfig runs in seconds (CI): a few hundred small files, two cache
// sizes, two policies, two epochs.
func TinyConfig() Config {
	return Config{
		Spec:      datagen.Spec{Files: 300, Classes: 6, Seed: 5, MedianSize: 8_000, MinSize: 1_000, MaxSize: 64_000},
		Fractions: []float64{5.0 / 16, 1},
		Policies:  []string{cache.PolicyNR, policies.LRU},
		Epochs:    2,
		Workers:   8,
	}
}

// Run is one (policy, cache size) series.
type Run struct {
	Policy   string
	Fraction float64   // C/D asked for
	Capacity int64     // bytes
	Ratios   []float64 // byte hit ratio per epoch
	FilesPS  []float64 // files/s per epoch (noisy; not the point here)
	Used     int64     // cache bytes used after the last epoch
}

// Mean returns the mean hit ratio of epochs ≥ 2 (epoch 1 when there is
// only one).
func (r Run) Mean() float64 {
	rs := r.Ratios
	if len(rs) > 1 {
		rs = rs[1:]
	}
	var s float64
	for _, v := range rs {
		s += v
	}
	return s / float64(len(rs))
}

// Report is a whole benchmark run.
type Report struct {
	Files     int
	Bytes     int64
	Epochs    int
	Workers   int
	Runs      []Run // by fraction, then policy
	Fractions []float64
	Policies  []string
}

// Bench runs cfg.
func Bench(ctx context.Context, cfg Config) (*Report, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("hitratio: Dir is required")
	}
	data := filepath.Join(cfg.Dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return nil, err
	}
	genStart := time.Now()
	// Parallel writes and sums: a million tiny files (the scale run) are
	// bound by create/close round trips, not bytes.
	files, err := datagen.WriteParallel(data, cfg.Spec, 8)
	if err != nil {
		return nil, err
	}
	total := datagen.TotalSize(files)
	paths, want := datagen.Paths(files), datagen.SumsParallel(files, runtime.NumCPU())
	fmt.Fprintf(logw, "dataset: %d files, %s (written and summed in %s)\n", len(files), units.FormatSize(total),
		time.Since(genStart).Round(time.Second))
	rep := &Report{Files: len(files), Bytes: total, Epochs: cfg.Epochs, Workers: cfg.Workers, Fractions: cfg.Fractions, Policies: cfg.Policies}
	for _, frac := range cfg.Fractions {
		for _, pol := range cfg.Policies {
			r, err := series(ctx, cfg, data, paths, want, total, pol, frac)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(logw, "C/D %.4f %-8s hit ratio per epoch %s, files/s %s\n", frac, pol, fmtRatios(r.Ratios), fmtRates(r.FilesPS))
			rep.Runs = append(rep.Runs, r)
		}
	}
	return rep, nil
}

// series mounts the dataset through a fresh cache and reads cfg.Epochs
// epochs.
func series(ctx context.Context, cfg Config, data string, paths []string, want map[string][sha256.Size]byte,
	total int64, policy string, frac float64) (r Run, err error) {
	tag := fmt.Sprintf("%s-%.4f", policy, frac)
	cacheDir, mnt := filepath.Join(cfg.Dir, "cache-"+tag), filepath.Join(cfg.Dir, "mnt-"+tag)
	for _, d := range []string{cacheDir, mnt} {
		if err := os.RemoveAll(d); err != nil {
			return r, err
		}
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return r, err
	}
	defer os.RemoveAll(cacheDir)
	defer os.Remove(mnt)
	capacity := int64(frac * float64(total))
	pol, err := policies.New(policy, capacity, 0)
	if err != nil {
		return r, err
	}
	m, err := mount.New(mount.Config{
		Source: data, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: capacity, Policy: pol,
		Manifest: mountapi.ManifestNone, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return r, err
	}
	if err := m.Start(ctx); err != nil {
		return r, fmt.Errorf("hitratio: %w (needs root)", err)
	}
	defer func() {
		if uerr := m.Unmount(); uerr != nil && err == nil {
			err = uerr
		}
	}()
	r = Run{Policy: policy, Fraction: frac, Capacity: capacity}
	for e := 1; e <= cfg.Epochs; e++ {
		if cfg.Drop {
			_ = epoch.DropPageCache() // best effort: the ratios do not depend on it
		}
		before := m.Stats()
		res, err := epoch.Run(ctx, epoch.Options{Root: mnt, Paths: paths, Workers: cfg.Workers, Seed: uint64(e), Want: want})
		if err != nil {
			return r, err
		}
		if len(res.Mismatches) > 0 || res.Files != len(paths) {
			return r, fmt.Errorf("hitratio: %s epoch %d: read %d of %d files, %d sha256 mismatches (%v)",
				tag, e, res.Files, len(paths), len(res.Mismatches), res.Mismatches[:min(3, len(res.Mismatches))])
		}
		after := m.Stats()
		hit, miss := after.HitBytes-before.HitBytes, after.MissBytes-before.MissBytes
		if hit+miss != total {
			return r, fmt.Errorf("hitratio: %s epoch %d: the counters saw %d bytes, the dataset has %d", tag, e, hit+miss, total)
		}
		r.Ratios = append(r.Ratios, float64(hit)/float64(hit+miss))
		r.FilesPS = append(r.FilesPS, res.FilesPerSec())
	}
	r.Used = m.Stats().UsedBytes
	return r, nil
}

func fmtRates(rs []float64) string {
	s := make([]string, len(rs))
	for i, v := range rs {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(s, " ")
}

func fmtRatios(rs []float64) string {
	s := make([]string, len(rs))
	for i, v := range rs {
		s[i] = fmt.Sprintf("%.3f", v)
	}
	return strings.Join(s, " ")
}

// Markdown renders the report as a table: one row per (cache size, policy),
// one column per epoch, then the mean of epochs ≥ 2 and what NR should hit.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| C/D | policy |")
	for e := 1; e <= rep.Epochs; e++ {
		fmt.Fprintf(&b, " epoch %d |", e)
	}
	fmt.Fprintf(&b, " mean epochs ≥ 2 | optimum min(C/D, 1) |\n|---|---|")
	for range rep.Epochs {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(&b, "| %s | %s |", fracName(r.Fraction), r.Policy)
		for _, v := range r.Ratios {
			fmt.Fprintf(&b, " %.3f |", v)
		}
		fmt.Fprintf(&b, " %.3f | %.3f |\n", r.Mean(), min(r.Fraction, 1))
	}
	// Files/s: noisy on a shared machine, and not the point of the
	// benchmark, but what a reader of the ratios asks next.
	fmt.Fprintf(&b, "\nFiles/s per epoch (%d readers):\n\n| C/D | policy |", rep.Workers)
	for e := 1; e <= rep.Epochs; e++ {
		fmt.Fprintf(&b, " epoch %d |", e)
	}
	b.WriteString("\n|---|---|")
	for range rep.Epochs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(&b, "| %s | %s |", fracName(r.Fraction), r.Policy)
		for _, v := range r.FilesPS {
			fmt.Fprintf(&b, " %.0f |", v)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fracName writes 5/16 as "5/16 (0.3125)".
func fracName(f float64) string {
	for _, d := range []float64{2, 4, 16} {
		n := f * d
		if n == float64(int(n)) && n != d {
			return fmt.Sprintf("%d/%d (%.4g)", int(n), int(d), f)
		}
	}
	return fmt.Sprintf("%.4g", f)
}
