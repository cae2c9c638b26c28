package reliability

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
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

func sums(files []datagen.File) map[string][sha256.Size]byte {
	m := make(map[string][sha256.Size]byte, len(files))
	for _, f := range files {
		m[f.Path] = datagen.Sum(f)
	}
	return m
}

// startMount mounts cfg in this process and unmounts in t.Cleanup.
func startMount(t *testing.T, cfg mount.Config) *mount.Mount {
	t.Helper()
	testenv.RequireFUSE(t)
	if cfg.Mountpoint == "" {
		cfg.Mountpoint = t.TempDir()
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	m, err := mount.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = syscall.Unmount(cfg.Mountpoint, syscall.MNT_DETACH)
		}
	})
	return m
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
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
