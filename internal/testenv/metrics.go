package testenv

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Scrape GETs a Prometheus text endpoint (http://host:port/metrics) and
// returns its samples, keyed by the name as written with its labels
// (`x_bucket{le="0.1"}`), and the whole body.
func Scrape(t testing.TB, url string) (samples map[string]float64, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	samples = map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := cutLast(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			samples[name] = v
		}
	}
	return samples, string(b)
}

// Metric returns the value of one sample (a name with its labels, if any)
// of a Prometheus text endpoint; the test fails when there is none.
func Metric(t testing.TB, url, name string) float64 {
	t.Helper()
	samples, _ := Scrape(t, url)
	v, ok := samples[name]
	if !ok {
		t.Fatalf("%s has no %s", url, name)
	}
	return v
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
