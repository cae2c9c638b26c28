package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
)

// TestMain lets the test binary serve as the benchmark's mount child, as the
// command's binary does.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		childMain(os.Getenv(childEnv))
		return
	}
	os.Exit(m.Run())
}

// TestTiny runs the tiny configuration end to end (mount child, rclone when
// installed, MinIO, GET loop) so the benchmark cannot rot. No timings are
// asserted: only that every reader read every file with the right bytes
// (Bench fails otherwise), that the report has every row, and that cached
// EpochFS epochs send no READ to the daemon when passthrough is possible.
func TestTiny(t *testing.T) {
	testenv.RequireFUSE(t)
	minio, err := testenv.FindTool("minio")
	if err != nil {
		testenv.RequireOrSkip(t, "minio not found", "run `make tools`")
	}
	rclone, _ := testenv.FindTool("rclone") // optional: bench/setup.sh and make bench-tools install it
	cfg := Config{
		Dir:     t.TempDir(),
		Spec:    datagen.Spec{Files: 60, Classes: 3, Seed: 3, MedianSize: 8_000, MinSize: 1_000, MaxSize: 64_000},
		Workers: 4, Rounds: 2, P2: true, P3: true,
		RClone: rclone, MinIO: minio,
		S3Latency: 5 * time.Millisecond, // through the latency proxy
	}
	rep, err := Bench(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.P2) != cfg.Rounds || len(rep.P3) != cfg.Rounds {
		t.Fatalf("rounds: P2 %d, P3 %d, want %d", len(rep.P2), len(rep.P3), cfg.Rounds)
	}
	want2 := []string{native, epochfs}
	if rclone != "" {
		want2 = append(want2, rcloneR)
	}
	for i, row := range rep.P2 {
		for _, r := range want2 {
			if row[r] <= 0 {
				t.Errorf("P2 round %d: no files/s for %s", i+1, r)
			}
		}
	}
	for i, row := range rep.P3 {
		for _, r := range []string{mountCol, getLoop} {
			if row[r] <= 0 {
				t.Errorf("P3 round %d: no files/s for %s", i+1, r)
			}
		}
	}
	if got, want := rep.CachedOpens, uint64(cfg.Spec.Files*cfg.Rounds); got != want {
		t.Errorf("cached epochs: %d opens reached the daemon, want %d (one per file per epoch)", got, want)
	}
	if passthroughExpected() && rep.CachedReads != 0 {
		t.Errorf("cached epochs: %d READ requests reached the daemon; passthrough should serve them all", rep.CachedReads)
	}
	for _, r := range append(want2, mountCol, getLoop) {
		if len(rep.CPU[r]) != cfg.Rounds {
			t.Errorf("CPU accounting: %d samples for %s, want %d", len(rep.CPU[r]), r, cfg.Rounds)
		}
	}
	md := rep.Markdown("header\n")
	for _, s := range []string{"### P2", "### P3", "epochfs / native", "mount cold / GET loop", "median",
		"behind a proxy adding 5ms", "### Where the CPU went", "| mount cold |"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q:\n%s", s, md)
		}
	}
}
