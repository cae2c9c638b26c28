package csi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/units"
)

// chartSchema is the chart's values.schema.json, decoded.
func chartSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "epochfs", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return s
}

// defPattern is the pattern of $defs/NAME.
func defPattern(t *testing.T, s map[string]any, name string) string {
	t.Helper()
	d, _ := s["$defs"].(map[string]any)[name].(map[string]any)
	p, ok := d["pattern"].(string)
	if !ok {
		t.Fatalf("values.schema.json has no $defs/%s pattern", name)
	}
	return p
}

// TestChartSchemaGrammar: the chart's schema for sizes and percentages is
// the grammar of the binaries' parsers (units.ParseSize, csi.ParseCacheBudget),
// so a value `helm install` accepts never crash-loops the node plugin.
// The patterns are the same strings as the Go constants, and every value of
// the table is accepted by the schema only if the parser accepts it; the
// values a user would type by mistake (500m, 50.5%, 120%, 0) are refused by
// both.
func TestChartSchemaGrammar(t *testing.T) {
	s := chartSchema(t)
	if got := defPattern(t, s, "byteSize"); got != units.SizeSchemaPattern {
		t.Fatalf("$defs/byteSize pattern\n  %s\nwant units.SizeSchemaPattern\n  %s", got, units.SizeSchemaPattern)
	}
	if got := defPattern(t, s, "percent"); got != csi.PercentSchemaPattern {
		t.Fatalf("$defs/percent pattern %s, want csi.PercentSchemaPattern %s", got, csi.PercentSchemaPattern)
	}
	size := regexp.MustCompile(units.SizeSchemaPattern)
	pct := regexp.MustCompile(csi.PercentSchemaPattern)
	// A budget value (cacheRootBudget, namespaceMaxCacheBytes) is either.
	budgetSchema := func(v string) bool { return size.MatchString(v) || pct.MatchString(v) }

	// Each value: does the schema accept it, does the parser? The schema
	// may be stricter than the parser (0.5Ki, 1.Gi), never looser.
	ok, strict, bad := [2]bool{true, true}, [2]bool{false, true}, [2]bool{false, false}
	for _, tc := range []struct {
		v    string
		want [2]bool // schema, parser
	}{
		{"1", ok}, {"4096", ok}, {"1B", ok}, {"1b", ok}, {"1.5", ok},
		{"500M", ok}, {"500MB", ok}, {"500mb", ok}, {"500Mi", ok}, {"500mi", ok}, {"500MiB", ok}, {"500mib", ok},
		{"50G", ok}, {"50GB", ok}, {"50Gi", ok}, {"50GiB", ok}, {"50gib", ok}, {"64k", ok}, {"64K", ok},
		{"64KiB", ok}, {"64Ki", ok}, {"1T", ok}, {"2Ti", ok}, {"1.5GiB", ok}, {"10 GiB", ok},
		{"1P", ok}, {"1Pi", ok}, {"1E", ok}, {"7Ei", ok},
		{"0.5Ki", strict}, {"1.Gi", strict}, {"1  GiB", strict}, {"010Gi", strict},
		// The mistakes: milli, zero, nothing, negative, junk.
		{"500m", bad}, {"0", bad}, {"0Gi", bad}, {"", bad}, {"-1Gi", bad}, {"lots", bad}, {"1GiBs", bad}, {"1 000", bad},
	} {
		_, perr := units.ParseSize(tc.v)
		if got := [2]bool{size.MatchString(tc.v), perr == nil}; got != tc.want {
			t.Errorf("size %q: schema accepts %v, units.ParseSize %v (%v); want %v", tc.v, got[0], got[1], perr, tc.want)
		}
	}

	for _, tc := range []struct {
		v    string
		want [2]bool
	}{
		{"1%", ok}, {"50%", ok}, {"80%", ok}, {"99%", ok}, {"100%", ok}, {"500GiB", ok}, {"2Ti", ok}, {"80", ok},
		{"080%", strict}, {" 80%", strict},
		{"50.5%", bad}, {"120%", bad}, {"0%", bad}, {"101%", bad}, {"%", bad}, {"-5%", bad}, {"500m", bad},
	} {
		_, perr := csi.ParseCacheBudget(tc.v)
		if got := [2]bool{budgetSchema(tc.v), perr == nil}; got != tc.want {
			t.Errorf("budget %q: schema accepts %v, csi.ParseCacheBudget %v (%v); want %v", tc.v, got[0], got[1], perr, tc.want)
		}
	}
}
