package main

import (
	"context"
	"math"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestTiny runs the tiny configuration through real mounts so the benchmark
// cannot rot. It checks correctness invariants only, never timings: every
// epoch counted exactly the dataset's bytes (Bench fails otherwise), epoch 1
// hits nothing, NR hits ≈ C/D from epoch 2 on, and a cache ≥ D hits all.
func TestTiny(t *testing.T) {
	testenv.RequireFUSE(t)
	cfg := TinyConfig()
	cfg.Dir = t.TempDir()
	rep, err := Bench(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rep.Runs), len(cfg.Fractions)*len(cfg.Policies); got != want {
		t.Fatalf("%d runs, want %d", got, want)
	}
	for _, r := range rep.Runs {
		if len(r.Ratios) != cfg.Epochs {
			t.Fatalf("%s C/D %.3f: %d epochs, want %d", r.Policy, r.Fraction, len(r.Ratios), cfg.Epochs)
		}
		if r.Ratios[0] != 0 {
			t.Errorf("%s C/D %.3f: epoch 1 hit ratio %.3f, want 0 (a fresh cache)", r.Policy, r.Fraction, r.Ratios[0])
		}
		for e, v := range r.Ratios[1:] {
			switch {
			case r.Fraction >= 1 && v != 1:
				t.Errorf("%s C/D %.3f epoch %d: hit ratio %.3f, want 1 (everything fits)", r.Policy, r.Fraction, e+2, v)
			case r.Policy == "nr" && math.Abs(v-r.Fraction) > 0.02:
				t.Errorf("nr C/D %.3f epoch %d: hit ratio %.3f, want C/D within 0.02", r.Fraction, e+2, v)
			case v < 0 || v > 1:
				t.Errorf("%s C/D %.3f epoch %d: hit ratio %.3f out of [0, 1]", r.Policy, r.Fraction, e+2, v)
			}
		}
	}
	if md := rep.Markdown(); len(md) == 0 {
		t.Error("empty markdown table")
	}
	if err := rep.WritePNG(t.TempDir() + "/hitratio.png"); err != nil {
		t.Errorf("plot: %v", err)
	}
}
