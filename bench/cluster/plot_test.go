package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteSVG: the plot is an SVG naming every sampler run in its legend
// and none of the "every node reads every file" runs.
func TestWriteSVG(t *testing.T) {
	var rows []row
	for _, s := range []string{"node", "cluster", "cluster, plain rendezvous (no capacities)", "cluster, every node reads every file"} {
		for e := 1; e <= 3; e++ {
			rows = append(rows, row{scope: s, frac: "1/3", epoch: e, backendBytes: int64(100 / e), total: 100, clusterHit: 1 - 1/float64(e)})
		}
	}
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := writeSVG(path, rows); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	if !strings.Contains(svg, "<svg") || !strings.HasSuffix(strings.TrimSpace(svg), "</svg>") {
		t.Fatalf("not an SVG document: %.200s", svg)
	}
	for _, want := range []string{"C = D×1/3, node", "C = D×1/3, cluster", "plain rendezvous"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	if strings.Contains(svg, "every node") {
		t.Error("the plot shows an every-node-reads-every-file run")
	}
}
