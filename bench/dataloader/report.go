package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Sources of an epoch.
const (
	srcLocal    = "local disk"
	srcEpochFS  = "EpochFS"
	srcBoto3    = "boto3"
	srcRclone   = "rclone"
	srcPrefetch = "EpochFS after prefetch"
	// srcPrefetchLive: prefetch through the running mount's control socket.
	srcPrefetchLive = "EpochFS after prefetch via mount"
)

// Cell is one column of the runs: a source, near (MinIO as is) or far
// (behind the latency proxy), cold or warm, and the DataLoader's workers.
// Local disk is neither near nor far and always "cold" (page cache dropped).
type Cell struct {
	Source  string
	Far     bool
	Warm    bool
	Workers int
}

// Name is the cell's row label, without the workers.
func (c Cell) Name() string {
	if c.Source == srcLocal {
		return srcLocal
	}
	s := c.Source
	switch {
	case c.Source == srcPrefetch || c.Source == srcPrefetchLive || c.Source == srcBoto3:
	case c.Warm:
		s += " warm"
	default:
		s += " cold"
	}
	if c.Far {
		return s + ", far"
	}
	return s + ", near"
}

// Report holds every measurement of a run.
type Report struct {
	Images   int
	Bytes    int64
	Rounds   int
	Workers  []int
	Latency  string // the far store's added latency per request, e.g. "20ms"
	Checksum string // local disk's, which every run matched
	Torch    string
	// Runs are images/s per round, per cell.
	Runs map[Cell][]float64
	// PrefetchSeconds are the `cachefs prefetch` times, one per round and
	// worker count, near (false) and far (true).
	PrefetchSeconds map[bool][]float64
	// PrefetchLiveSeconds: the same through a running mount.
	PrefetchLiveSeconds map[bool][]float64
	Notes               []string
}

// NewReport is an empty report.
func NewReport() *Report {
	return &Report{Runs: map[Cell][]float64{}, PrefetchSeconds: map[bool][]float64{}, PrefetchLiveSeconds: map[bool][]float64{}}
}

// Add records one run.
func (r *Report) Add(c Cell, imagesPerS float64) { r.Runs[c] = append(r.Runs[c], imagesPerS) }

// Ratio is a comparison of two cells: the median of the per-round ratios
// (the rounds are interleaved, so round i of both ran side by side), and
// its min and max.
type Ratio struct {
	Name     string
	Num, Den Cell
	Median   float64
	Min, Max float64
	Goal     float64 // ≥ this is met; 0: no goal
	Rounds   int
	Missing  bool
}

// Met reports whether a goal ratio is met.
func (q Ratio) Met() bool { return !q.Missing && q.Median >= q.Goal }

// ratio compares num to den round by round.
func (r *Report) ratio(name string, num, den Cell, goal float64) Ratio {
	q := Ratio{Name: name, Num: num, Den: den, Goal: goal}
	a, b := r.Runs[num], r.Runs[den]
	n := min(len(a), len(b))
	if n == 0 {
		q.Missing = true
		return q
	}
	v := make([]float64, n)
	for i := range n {
		v[i] = a[i] / b[i]
	}
	q.Median, q.Min, q.Max, q.Rounds = median(v), slices.Min(v), slices.Max(v), n
	return q
}

// Ratios are the comparisons of issue 24 item 5 (with their goals) and the
// informative ones beside them.
func (r *Report) Ratios() []Ratio {
	var out []Ratio
	for _, w := range r.Workers {
		local := Cell{Source: srcLocal, Workers: w}
		warm := Cell{Source: srcEpochFS, Warm: true, Workers: w}
		out = append(out, r.ratio(fmt.Sprintf("warm mount / local disk, %d workers", w), warm, local, 0.95))
		warmFar := warm
		warmFar.Far = true
		out = append(out, r.ratio(fmt.Sprintf("warm mount (far) / local disk, %d workers", w), warmFar, local, 0))
		coldFar := Cell{Source: srcEpochFS, Far: true, Workers: w}
		boto := Cell{Source: srcBoto3, Far: true, Workers: w}
		goal := 2.0
		if w <= 2 {
			goal = 4
		}
		out = append(out, r.ratio(fmt.Sprintf("cold far mount / boto3 far, %d workers", w), coldFar, boto, goal))
		out = append(out, r.ratio(fmt.Sprintf("cold far mount / rclone cold far, %d workers", w), coldFar, Cell{Source: srcRclone, Far: true, Workers: w}, 1.5))
		out = append(out, r.ratio(fmt.Sprintf("cold near mount / boto3 near, %d workers", w), Cell{Source: srcEpochFS, Workers: w}, Cell{Source: srcBoto3, Workers: w}, 0))
		out = append(out, r.ratio(fmt.Sprintf("rclone warm / local disk, %d workers", w), Cell{Source: srcRclone, Warm: true, Workers: w}, local, 0))
		for _, far := range []bool{false, true} {
			pf := Cell{Source: srcPrefetch, Far: far, Workers: w}
			out = append(out, r.ratio(fmt.Sprintf("epoch after prefetch / warm mount (%s), %d workers", place(far), w), pf, warm, 0))
			pf.Source = srcPrefetchLive
			out = append(out, r.ratio(fmt.Sprintf("epoch after prefetch via mount / warm mount (%s), %d workers", place(far), w), pf, warm, 0))
		}
	}
	var kept []Ratio
	for _, q := range out {
		if !q.Missing || q.Goal > 0 {
			kept = append(kept, q)
		}
	}
	return kept
}

func place(far bool) string {
	if far {
		return "far"
	}
	return "near"
}

// PrefetchPerGiB is the median seconds `cachefs prefetch` took per GiB of
// the dataset, near or far; 0 when not measured.
func (r *Report) PrefetchPerGiB(far bool) float64 {
	s := r.PrefetchSeconds[far]
	if len(s) == 0 || r.Bytes == 0 {
		return 0
	}
	return median(s) / (float64(r.Bytes) / (1 << 30))
}

// cells are the rows of the table in a fixed order.
func (r *Report) cells() []Cell {
	var out []Cell
	seen := map[Cell]bool{}
	for c := range r.Runs {
		c.Workers = 0
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	order := map[string]int{srcLocal: 0, srcEpochFS: 1, srcPrefetch: 2, srcPrefetchLive: 3, srcRclone: 4, srcBoto3: 5}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Far != b.Far {
			return !a.Far
		}
		if a.Source != b.Source {
			return order[a.Source] < order[b.Source]
		}
		return !a.Warm && b.Warm
	})
	return out
}

// Markdown is the report after header (command, machine, date).
func (r *Report) Markdown(header string) string {
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, "\nImages/s of one epoch (%d JPEGs, %.1f MB; batch 64, shuffled, ImageFolder-style Resize((64,64)) + ToTensor; "+
		"torch %s), median of %d interleaved rounds, then every round. \"far\": MinIO behind a proxy adding %s to every request; "+
		"\"near\": MinIO on 127.0.0.1 as is. Every run's checksum of the decoded tensors equals local disk's (%s).\n\n",
		r.Images, float64(r.Bytes)/1e6, r.Torch, r.Rounds, r.Latency, r.Checksum)
	b.WriteString("| source |")
	for _, w := range r.Workers {
		fmt.Fprintf(&b, " %d workers: median | rounds |", w)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|---|", len(r.Workers)) + "\n")
	for _, c := range r.cells() {
		fmt.Fprintf(&b, "| %s |", c.Name())
		for _, w := range r.Workers {
			c.Workers = w
			v := r.Runs[c]
			if len(v) == 0 {
				b.WriteString(" – | – |")
				continue
			}
			fmt.Fprintf(&b, " **%.0f** | %s |", median(v), joinf(v, "%.0f"))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| ratio | goal | median | min–max | met |\n|---|---|---|---|---|\n")
	for _, q := range r.Ratios() {
		goal, met := "–", "–"
		if q.Goal > 0 {
			goal = fmt.Sprintf("≥ %.2g×", q.Goal)
			met = map[bool]string{true: "met", false: "**not met**"}[q.Met()]
		}
		if q.Missing {
			fmt.Fprintf(&b, "| %s | %s | not measured | | %s |\n", q.Name, goal, met)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | **%.2f×** | %.2f–%.2f | %s |\n", q.Name, goal, q.Median, q.Min, q.Max, met)
	}
	for _, pf := range []struct {
		what string
		secs map[bool][]float64
	}{{"into an empty cache", r.PrefetchSeconds}, {"through a fresh mount (its control socket)", r.PrefetchLiveSeconds}} {
		for _, far := range []bool{false, true} {
			if s := pf.secs[far]; len(s) > 0 {
				m := median(s)
				fmt.Fprintf(&b, "\n`cachefs prefetch` (default flags) %s, %s: %s s (one run before each such epoch; median %.2f s): **%.1f s per GiB** (%.0f MB/s, %.0f files/s)\n",
					pf.what, place(far), joinf(s, "%.2f"), m, m/(float64(r.Bytes)/(1<<30)), float64(r.Bytes)/1e6/m, float64(r.Images)/m)
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

func joinf(v []float64, format string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, ", ")
}

// median of v (0 when empty); v is not modified.
func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 1:
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
