package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestDemoTiny runs `cachefs demo` (the README's first command) on a small
// dataset so that it cannot rot: every file matches, epoch 1 hits nothing
// and epoch 2 hits about half the bytes.
func TestDemoTiny(t *testing.T) {
	testenv.RequireFUSE(t)
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"demo", "--files", "120", "--epochs", "2", "--no-drop-caches"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	re := regexp.MustCompile(`epoch (\d): .* byte hit ratio ([0-9.]+)`)
	ratios := map[int]float64{}
	for _, m := range re.FindAllStringSubmatch(out.String(), -1) {
		e, _ := strconv.Atoi(m[1])
		ratios[e], _ = strconv.ParseFloat(m[2], 64)
	}
	if len(ratios) != 2 || ratios[1] != 0 || ratios[2] < 0.45 || ratios[2] > 0.5 {
		t.Errorf("hit ratios %v, want epoch 1 = 0 and epoch 2 ≈ 0.5\n%s", ratios, out.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("all match")) {
		t.Errorf("demo did not report matching bytes:\n%s", out.String())
	}
}
