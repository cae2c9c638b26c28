package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// statsTimeout bounds asking the live mount for its counters.
const statsTimeout = 5 * time.Second

// statsReport is what `cachefs stats` shows of one cache directory: what
// its files hold, and, while a mount serves it, that mount's dataset,
// counters and memory. JSON and YAML keys are the snake_case tags.
type statsReport struct {
	CacheDir      string `json:"cache_dir"`
	Policy        string `json:"policy"`
	Entries       int64  `json:"entries"`
	UsedBytes     int64  `json:"used_bytes"`
	CapacityBytes int64  `json:"capacity_bytes"`
	TempFiles     int64  `json:"temp_files"`
	// Live: a mount serves the directory and answered; Mount is then set.
	// MountError says why not when a mount's socket is there but did not
	// answer.
	Live       bool         `json:"live"`
	MountError string       `json:"mount_error,omitempty"`
	Mount      *mountReport `json:"mount,omitempty"`
	Peer       *peer.Share  `json:"peer,omitempty"` // cluster scope: this cache's share of the dataset
}

// mountReport is the live mount's part of statsReport. The ratios are nil
// (JSON null) before any lookup.
type mountReport struct {
	Source       string `json:"source"`     // credentials redacted
	DatasetID    string `json:"dataset_id"` // as the node plugin's dataset_id label
	Manifest     bool   `json:"manifest"`
	DatasetBytes int64  `json:"dataset_bytes,omitempty"` // from the manifest
	DatasetFiles int64  `json:"dataset_files,omitempty"`

	Hits               int64 `json:"hits"`
	Misses             int64 `json:"misses"`
	HitBytes           int64 `json:"hit_bytes"`
	MissBytes          int64 `json:"miss_bytes"`
	PrefetchFillBytes  int64 `json:"prefetch_fill_bytes"` // admitted by prefetch and readahead
	PrefetchedHitBytes int64 `json:"prefetched_hit_bytes"`
	// ByteHitRatio is hit / (hit + miss) bytes since the mount started;
	// NRHitRatio leaves out the first reads of prefetched entries: (hit −
	// prefetched hit) / (hit + miss), README's epoch formula.
	ByteHitRatio *float64 `json:"byte_hit_ratio"`
	NRHitRatio   *float64 `json:"nr_hit_ratio"`
	// Epoch is the current epoch (from 1; 0 without a manifest: the
	// dataset's size, an epoch's length, is unknown) and its ratios.
	Epoch             int64    `json:"epoch"`
	EpochHitBytes     int64    `json:"epoch_hit_bytes"`
	EpochMissBytes    int64    `json:"epoch_miss_bytes"`
	EpochByteHitRatio *float64 `json:"epoch_byte_hit_ratio"`
	EpochNRHitRatio   *float64 `json:"epoch_nr_hit_ratio"`

	// The mount process's memory (its Go and process collectors).
	ResidentMemoryBytes int64 `json:"resident_memory_bytes"`
	HeapAllocBytes      int64 `json:"heap_alloc_bytes"`
	HeapInuseBytes      int64 `json:"heap_inuse_bytes"`
	SysBytes            int64 `json:"sys_bytes"`
}

func newStatsCmd() *cobra.Command {
	var (
		dir    string
		format string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stats --cache-dir DIR",
		Short: "Show a cache directory and, while a mount serves it, its dataset, hit ratios and memory",
		Long: `Shows what a cache directory holds and, when a mount serves it (through its control
socket), what that mount serves: its source (credentials redacted), hits, misses, prefetched
bytes, the byte hit ratio since the mount started and of the current epoch (an epoch is the
dataset's size in lookups, known from its manifest), the NR ratio that leaves out first reads of
prefetched files, and the mount process's memory. Without a live mount it says so and shows the
directory only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				format = cliprint.JSON
			}
			if format == "table" { // the default's name, as -o table in help and completion
				format = cliprint.Table
			}
			if err := cliprint.Check(format); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), statsTimeout)
			defer cancel()
			r, err := collectStats(ctx, dir)
			if err != nil {
				return err
			}
			return printStats(cmd.OutOrStdout(), format, r)
		},
	}
	cmd.Flags().StringVar(&dir, "cache-dir", "", "cache directory to inspect (required)")
	cliprint.AddFlag(cmd, &format, "a table")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.Flags().MarkDeprecated("json", "use -o json")
	_ = cmd.MarkFlagRequired("cache-dir")
	return cmd
}

// collectStats reads dir's files and asks the mount serving it, if any.
func collectStats(ctx context.Context, dir string) (statsReport, error) {
	info, err := cache.ReadInfo(dir)
	if err != nil {
		return statsReport{}, err
	}
	r := statsReport{CacheDir: info.Dir, Policy: info.Policy, Entries: info.Entries, UsedBytes: info.UsedBytes,
		CapacityBytes: info.CapacityBytes, TempFiles: info.TempFiles}
	share, cluster, err := peer.ReadShare(dir)
	if err != nil {
		return statsReport{}, err
	}
	if cluster {
		r.Peer = &share
	}
	m, err := liveMount(ctx, dir)
	switch {
	case errors.Is(err, mountapi.ErrNoControl):
	case err != nil:
		r.MountError = err.Error()
	default:
		r.Live, r.Mount = true, m
	}
	return r, nil
}

// liveMount asks the mount serving dir for its dataset and metrics.
func liveMount(ctx context.Context, dir string) (*mountReport, error) {
	ds, err := mountapi.RemoteDataset(ctx, dir)
	if err != nil {
		return nil, err
	}
	text, err := mountapi.RemoteMetrics(ctx, dir)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("stats: the mount's metrics: %w", err)
	}
	v := func(name string) int64 { return int64(sampleSum(mfs[name])) }
	src := source.Redact(ds.Source)
	if s, err := source.Parse(ds.Source); err == nil {
		src = s.String() // canonical: a Source holds no credentials
	}
	id, _ := cachelabel.DatasetID(ds.Source)
	m := &mountReport{Source: src, DatasetID: id, Manifest: ds.Manifest, DatasetBytes: ds.Bytes, DatasetFiles: ds.Files,
		Hits: v("cachefs_cache_hits_total"), Misses: v("cachefs_cache_misses_total"),
		HitBytes: v("cachefs_cache_hit_bytes_total"), MissBytes: v("cachefs_cache_miss_bytes_total"),
		PrefetchFillBytes: v("cachefs_cache_prefetch_fill_bytes_total"), PrefetchedHitBytes: v("cachefs_cache_prefetched_hit_bytes_total"),
		Epoch: ds.Epoch, EpochHitBytes: ds.EpochHitBytes, EpochMissBytes: ds.EpochMissBytes,
		ResidentMemoryBytes: v("process_resident_memory_bytes"), HeapAllocBytes: v("go_memstats_alloc_bytes"),
		HeapInuseBytes: v("go_memstats_heap_inuse_bytes"), SysBytes: v("go_memstats_sys_bytes"),
	}
	m.ByteHitRatio, m.NRHitRatio = ratios(m.HitBytes, m.MissBytes, m.PrefetchedHitBytes)
	if ds.Epoch > 0 {
		m.EpochByteHitRatio, m.EpochNRHitRatio = ratios(ds.EpochHitBytes, ds.EpochMissBytes, ds.EpochPrefetchedHitBytes)
	}
	return m, nil
}

// ratios returns the byte hit ratio and the NR ratio of an interval, nil
// when nothing was looked up.
func ratios(hit, miss, prefetchedHit int64) (byteRatio, nr *float64) {
	if hit+miss <= 0 {
		return nil, nil
	}
	b, n := float64(hit)/float64(hit+miss), float64(hit-prefetchedHit)/float64(hit+miss)
	return &b, &n
}

// sampleSum sums a family's counter, gauge and untyped samples.
func sampleSum(mf *dto.MetricFamily) float64 {
	total := 0.0
	for _, m := range mf.GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return total
}

// printStats writes r in format (internal/cliprint's -o dialect; -o name
// prints the cache directory).
func printStats(w io.Writer, format string, r statsReport) error {
	return cliprint.Print(w, format, cliprint.Output{
		Value: r,
		Table: func(w io.Writer, wide bool) error { return statsTable(w, wide, r) },
		Names: func() []string { return []string{r.CacheDir} },
	})
}

// statsTable writes r as the key/value table (-o wide: more rows).
func statsTable(w io.Writer, wide bool, r statsReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	pct := 0.0
	if r.CapacityBytes > 0 {
		pct = 100 * float64(r.UsedBytes) / float64(r.CapacityBytes)
	}
	row("cache dir", "%s", r.CacheDir)
	row("policy", "%s", r.Policy)
	row("entries", "%d", r.Entries)
	row("used", "%s (%d bytes, %.1f%% of capacity)", units.FormatSize(r.UsedBytes), r.UsedBytes, pct)
	row("capacity", "%s (%d bytes)", units.FormatSize(r.CapacityBytes), r.CapacityBytes)
	if wide {
		row("temp files", "%d", r.TempFiles)
	}
	if p := r.Peer; p != nil {
		row("cache scope", "cluster (peer %s of %d: %s)", p.Self, len(p.Peers), strings.Join(p.Peers, ", "))
		if p.Files > 0 {
			row("owner share", "%.1f%% of the bytes, %d of %d files", 100*p.OwnedShare, p.OwnedFiles, p.Files)
		} else {
			row("owner share", "%.1f%% (expected; no manifest)", 100*p.OwnedShare)
		}
	}
	m := r.Mount
	switch {
	case m == nil && r.MountError != "":
		row("mount", "not answering: %s (on-disk information only)", r.MountError)
	case m == nil:
		row("mount", "none live (on-disk information only)")
	default:
		row("mount", "live")
		row("source", "%s", m.Source)
		if wide {
			row("dataset id", "%s", m.DatasetID)
			if m.Manifest {
				row("dataset", "%s in %d files (manifest)", units.FormatSize(m.DatasetBytes), m.DatasetFiles)
			} else {
				row("dataset", "no manifest: size unknown")
			}
		}
		row("hits", "%d (%s)", m.Hits, units.FormatSize(m.HitBytes))
		row("misses", "%d (%s)", m.Misses, units.FormatSize(m.MissBytes))
		row("prefetched", "%s filled, %s of it read", units.FormatSize(m.PrefetchFillBytes), units.FormatSize(m.PrefetchedHitBytes))
		row("byte hit ratio", "%s since mount (NR %s)", ratioText(m.ByteHitRatio), ratioText(m.NRHitRatio))
		if m.Epoch > 0 {
			row("epoch", "%d: byte hit ratio %s (NR %s) of %s read", m.Epoch, ratioText(m.EpochByteHitRatio),
				ratioText(m.EpochNRHitRatio), units.FormatSize(m.EpochHitBytes+m.EpochMissBytes))
		} else {
			row("epoch", "unknown (no manifest: the dataset's size is not known)")
		}
		row("memory", "%s resident, %s heap", units.FormatSize(m.ResidentMemoryBytes), units.FormatSize(m.HeapAllocBytes))
		if wide {
			row("heap in use", "%s", units.FormatSize(m.HeapInuseBytes))
			row("runtime sys", "%s", units.FormatSize(m.SysBytes))
		}
	}
	return tw.Flush()
}

// ratioText prints a ratio with three decimals, "-" before any lookup.
func ratioText(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *r)
}
