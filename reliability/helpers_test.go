package reliability

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
)

// envInt reads a scale knob from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// smallSpec is a dataset of small files, quick to upload and read.
func smallSpec(n int, seed uint64) datagen.Spec {
	return datagen.Spec{Files: n, Classes: 8, MedianSize: 16_000, MinSize: 1_000, MaxSize: 96_000, Seed: seed}
}

// logBuffer collects log lines for assertions.
type logBuffer struct{ testenv.SyncBuffer }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func join(root, p string) string { return filepath.Join(root, filepath.FromSlash(p)) }

// scrape returns one metric's value from a mount's /metrics.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	return testenv.Metric(t, "http://"+addr+"/metrics", name)
}
