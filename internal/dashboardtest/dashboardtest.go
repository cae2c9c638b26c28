// Package dashboardtest evaluates the Grafana dashboard's queries
// (deploy/grafana/epochfs-dashboard.json) for real: Prometheus's own PromQL
// engine over a TSDB loaded from scrapes of the node plugin's /metrics. Tests
// use it to check that a panel shows what it says (the hit ratio of a claim
// by its namespace/pvc) rather than that its text parses.
//
// Test-only: it links Prometheus's engine and TSDB, which no binary may.
package dashboardtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
)

// Scrape is one scrape of a target: its text exposition and the target
// labels Prometheus adds (job, node, …).
type Scrape struct {
	Text   string
	Target map[string]string
}

// Interval is the time the scrapes are placed apart: scrape i at i ×
// Interval. Only deltas matter to the dashboard's ratios.
const Interval = time.Minute

// Sample is one series of a query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// dashboard is the part of the dashboard JSON Query reads.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string   `json:"title"`
	Panels  []panel  `json:"panels"`
	Targets []target `json:"targets"`
}

type target struct {
	RefID  string `json:"refId"`
	Expr   string `json:"expr"`
	Legend string `json:"legendFormat"`
}

// Query returns the expression and legend of query refID of the panel
// titled title in the dashboard at path, with its variables as a user sees
// them by default: every template variable "All" (.*), and $__rate_interval
// and $__range a window that holds every one of n scrapes (n−1 intervals
// and a millisecond: a range is open on the left).
func Query(path, title, refID string, n int) (expr, legend string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return "", "", fmt.Errorf("dashboardtest: %s: %w", path, err)
	}
	var find func([]panel) *target
	find = func(ps []panel) *target {
		for i := range ps {
			if ps[i].Title == title {
				for j := range ps[i].Targets {
					if ps[i].Targets[j].RefID == refID {
						return &ps[i].Targets[j]
					}
				}
			}
			if t := find(ps[i].Panels); t != nil {
				return t
			}
		}
		return nil
	}
	t := find(d.Panels)
	if t == nil {
		return "", "", fmt.Errorf("dashboardtest: %s has no panel %q with query %s", path, title, refID)
	}
	window := fmt.Sprintf("%dms", int64(n-1)*Interval.Milliseconds()+1)
	expr = strings.NewReplacer("$__rate_interval", window, "$__range", window).Replace(t.Expr)
	// Hand-written: Grafana's interpolation is TypeScript; its "All" is a
	// quoted "$var" in a matcher, which this replaces with ".*".
	for {
		i := strings.Index(expr, "\"$")
		if i < 0 {
			break
		}
		j := strings.IndexByte(expr[i+1:], '"')
		if j < 0 {
			return "", "", fmt.Errorf("dashboardtest: unterminated variable in %q", t.Expr)
		}
		expr = expr[:i] + `".*"` + expr[i+1+j+1:]
	}
	return expr, t.Legend, nil
}

// Eval loads scrapes (scrapes[i] holds one scrape of each target at i ×
// Interval) into a fresh TSDB and evaluates expr at the last one's time.
func Eval(t testing.TB, scrapes [][]Scrape, expr string) []Sample {
	t.Helper()
	st := teststorage.New(t)
	app := st.Appender(context.Background())
	for i, round := range scrapes {
		ts := int64(i) * Interval.Milliseconds()
		for _, s := range round {
			if err := appendScrape(app, s, ts); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	q, err := eng.NewInstantQuery(context.Background(), st, nil, expr, time.UnixMilli(int64(len(scrapes)-1)*Interval.Milliseconds()))
	if err != nil {
		t.Fatalf("dashboardtest: query %s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("dashboardtest: query %s: %v", expr, res.Err)
	}
	vec, err := res.Vector()
	if err != nil {
		t.Fatalf("dashboardtest: query %s: %v", expr, err)
	}
	out := make([]Sample, 0, len(vec))
	for _, s := range vec {
		out = append(out, Sample{Labels: s.Metric.Map(), Value: s.F})
	}
	sort.Slice(out, func(a, b int) bool { return fmt.Sprint(out[a].Labels) < fmt.Sprint(out[b].Labels) })
	return out
}

// appendScrape adds the counter, gauge and untyped samples of s at ts
// (histograms and summaries are not needed by the ratios and are left
// out). A scraped label that a target label also names is kept, as the
// chart's monitors do (honorLabels).
func appendScrape(app storage.Appender, s Scrape, ts int64) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(s.Text))
	if err != nil {
		return fmt.Errorf("dashboardtest: parse scrape: %w", err)
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			b := labels.NewBuilder(labels.EmptyLabels())
			for k, x := range s.Target {
				b.Set(k, x)
			}
			for _, l := range m.GetLabel() {
				b.Set(l.GetName(), l.GetValue())
			}
			b.Set(model.MetricNameLabel, name)
			if _, err := app.Append(0, b.Labels(), ts, v); err != nil {
				return fmt.Errorf("dashboardtest: append %s: %w", name, err)
			}
		}
	}
	return nil
}

// Legend renders a Grafana legend format ({{label}}) for sample s.
func Legend(format string, s Sample) string {
	out := format
	for k, v := range s.Labels {
		out = strings.ReplaceAll(out, "{{"+k+"}}", v)
	}
	return out
}

// Close reports whether a and b agree to within rel of b (the engine
// extrapolates a rate by at most a millisecond over the window: Query's).
func Close(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(b), 1e-12) }
