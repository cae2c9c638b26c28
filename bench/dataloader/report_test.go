package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{3}, 3},
		{"odd unsorted", []float64{9, 1, 5}, 5},
		{"even", []float64{4, 1, 3, 2}, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.in...)
			if got := median(in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("median reordered its input: %v", in)
				}
			}
		})
	}
}

// sample is a report of two rounds at 2 workers whose goal ratios are
// known: warm/local = 0.9, 1.0 (median 0.95, met); cold far/boto3 far = 3,
// 5 (median 4, met); cold far/rclone cold far = 1, 1.5 (median 1.25, not met).
func sample() *Report {
	r := NewReport()
	r.Images, r.Bytes, r.Rounds, r.Workers, r.Latency = 2000, 1<<30, 2, []int{2}, "20ms"
	add := func(c Cell, v ...float64) {
		for _, x := range v {
			r.Add(c, x)
		}
	}
	add(Cell{Source: srcLocal, Workers: 2}, 1000, 1200)
	add(Cell{Source: srcEpochFS, Warm: true, Workers: 2}, 900, 1200)
	add(Cell{Source: srcEpochFS, Far: true, Workers: 2}, 300, 500)
	add(Cell{Source: srcBoto3, Far: true, Workers: 2}, 100, 100)
	add(Cell{Source: srcRclone, Far: true, Workers: 2}, 300, 1000.0/3)
	r.PrefetchSeconds[true] = []float64{4, 6, 5}
	return r
}

func TestRatios(t *testing.T) {
	got := map[string]Ratio{}
	for _, q := range sample().Ratios() {
		got[q.Name] = q
	}
	for _, tc := range []struct {
		name     string
		median   float64
		min, max float64
		met      bool
	}{
		{"warm mount / local disk, 2 workers", 0.95, 0.9, 1.0, true},
		{"cold far mount / boto3 far, 2 workers", 4, 3, 5, true},
		{"cold far mount / rclone cold far, 2 workers", 1.25, 1, 1.5, false},
	} {
		q, ok := got[tc.name]
		switch {
		case !ok:
			t.Errorf("no ratio %q in %v", tc.name, got)
		case math.Abs(q.Median-tc.median) > 1e-9 || math.Abs(q.Min-tc.min) > 1e-9 || math.Abs(q.Max-tc.max) > 1e-9:
			t.Errorf("%s = median %v (%v–%v), want %v (%v–%v)", tc.name, q.Median, q.Min, q.Max, tc.median, tc.min, tc.max)
		case q.Met() != tc.met:
			t.Errorf("%s met = %v, want %v", tc.name, q.Met(), tc.met)
		}
	}
	if q := got["cold far mount / boto3 far, 2 workers"]; q.Goal != 4 {
		t.Errorf("goal at 2 workers = %v, want 4", q.Goal)
	}
	if _, ok := got["cold near mount / boto3 near, 2 workers"]; ok {
		t.Errorf("a ratio without measurements and without a goal is listed")
	}
}

func TestRatioGoalAt8Workers(t *testing.T) {
	r := NewReport()
	r.Workers = []int{8}
	r.Add(Cell{Source: srcEpochFS, Far: true, Workers: 8}, 250)
	r.Add(Cell{Source: srcBoto3, Far: true, Workers: 8}, 100)
	for _, q := range r.Ratios() {
		if q.Name == "cold far mount / boto3 far, 8 workers" {
			if q.Goal != 2 || !q.Met() || q.Median != 2.5 {
				t.Errorf("got goal %v median %v met %v, want 2, 2.5, met", q.Goal, q.Median, q.Met())
			}
			return
		}
	}
	t.Fatal("no 8-worker boto3 ratio")
}

func TestMissingGoalIsNotMet(t *testing.T) {
	for _, q := range NewReportWith(2).Ratios() {
		if q.Goal > 0 && (q.Met() || !q.Missing) {
			t.Errorf("%s: unmeasured goal counted as met=%v missing=%v", q.Name, q.Met(), q.Missing)
		}
	}
}

// NewReportWith is an empty report of these worker counts.
func NewReportWith(workers ...int) *Report {
	r := NewReport()
	r.Workers = workers
	return r
}

func TestPrefetchPerGiB(t *testing.T) {
	r := sample() // 1 GiB, prefetch far 4, 6, 5 s
	if got := r.PrefetchPerGiB(true); got != 5 {
		t.Errorf("far = %v s/GiB, want 5", got)
	}
	if got := r.PrefetchPerGiB(false); got != 0 {
		t.Errorf("near (not measured) = %v, want 0", got)
	}
}

func TestMarkdown(t *testing.T) {
	md := sample().Markdown("HEADER\n")
	for _, want := range []string{
		"HEADER\n",
		"| local disk | **1100** | 1000, 1200 |",
		"| EpochFS warm, near | **1050** | 900, 1200 |",
		"| EpochFS cold, far | **400** | 300, 500 |",
		"| cold far mount / boto3 far, 2 workers | ≥ 4× | **4.00×** | 3.00–5.00 | met |",
		"| cold far mount / rclone cold far, 2 workers | ≥ 1.5× | **1.25×** | 1.00–1.50 | **not met** |",
		"**5.0 s per GiB**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// Local disk first, near before far.
	if i, j := strings.Index(md, "| local disk |"), strings.Index(md, "| EpochFS cold, far |"); i < 0 || j < i {
		t.Errorf("rows out of order:\n%s", md)
	}
}

func TestCellName(t *testing.T) {
	for _, tc := range []struct {
		c    Cell
		want string
	}{
		{Cell{Source: srcLocal, Far: true, Warm: true}, "local disk"},
		{Cell{Source: srcEpochFS}, "EpochFS cold, near"},
		{Cell{Source: srcRclone, Far: true, Warm: true}, "rclone warm, far"},
		{Cell{Source: srcPrefetch, Far: true}, "EpochFS after prefetch, far"},
	} {
		if got := tc.c.Name(); got != tc.want {
			t.Errorf("%+v.Name() = %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestWritePNG(t *testing.T) {
	p := t.TempDir() + "/plot.png"
	if err := sample().WritePNG(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG (%v): %.8q", err, b)
	}
}
