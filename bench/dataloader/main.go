package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
)

func main() {
	quick := flag.Bool("quick", false, "smoke run: 300 images, 1 round, 2 workers only")
	dir := flag.String("dir", "", "work directory (default: a temporary directory under /var/tmp, removed afterwards)")
	files := flag.Int("files", 0, "JPEGs in the dataset (default 2000; quick 300)")
	rounds := flag.Int("rounds", 0, "interleaved rounds (default 3; quick 1)")
	workers := flag.String("workers", "", "comma-separated DataLoader worker counts (default 2,8; quick 2)")
	latency := flag.Duration("s3-latency", 20*time.Millisecond, "added to every request of the far store")
	drop := flag.Bool("drop-caches", true, "sync and drop the page cache before every run (root)")
	python := flag.String("python", "", "python3 with torch, torchvision and boto3 (default: /usr/bin/python3, else python3 on the PATH)")
	tools := flag.String("tools", ".tools/bin", "directory of rclone and minio")
	cachefs := flag.String("cachefs", "bin/cachefs", "cachefs binary")
	md := flag.String("md", "", "also write the markdown report to this file")
	png := flag.String("png", "", "write the plot to this PNG file")
	waitLoad := flag.Float64("wait-load", 0, "before starting, wait (polling every 30 s, at most -wait-max) until the 1-minute load average is below this; 0: do not wait")
	waitMax := flag.Duration("wait-max", 20*time.Minute, "longest wait for -wait-load")
	flag.Parse()

	cfg := Config{Files: 2000, Seed: 1, Rounds: 3, Workers: []int{2, 8}}
	if *quick {
		cfg.Files, cfg.Rounds, cfg.Workers = 300, 1, []int{2}
	}
	if *files > 0 {
		cfg.Files = *files
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	if *workers != "" {
		ws, err := parseWorkers(*workers)
		if err != nil {
			fatal(err)
		}
		cfg.Workers = ws
	}
	cfg.Latency, cfg.Drop, cfg.Log = *latency, *drop, os.Stderr
	cfg.RClone, cfg.MinIO = tool(*tools, "rclone"), tool(*tools, "minio")
	if abs, err := filepath.Abs(*cachefs); err == nil && isFile(abs) {
		cfg.CacheFS = abs
	}
	py, err := FindPython(*python)
	if err != nil {
		fatal(err)
	}
	cfg.Python = py
	workDir, removeDir, err := benchproc.WorkDir(*dir, "epochfs-dataloader-")
	if err != nil {
		fatal(err)
	}
	defer removeDir()
	cfg.Dir = workDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	loadStart, waited := waitQuiet(ctx, *waitLoad, *waitMax)
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if err != nil {
		removeDir()
		if rep == nil || len(rep.Runs) == 0 {
			fatal(err)
		}
		// Interrupted or failed after some rounds: keep what was measured,
		// marked incomplete, and still exit 1.
		rep.Notes = append(rep.Notes, "INCOMPLETE run, stopped by: "+err.Error())
	}
	header := reportHeader(rep, loadStart, waited, time.Since(start))
	out := rep.Markdown(header)
	fmt.Print(out)
	if *md != "" {
		if err := os.WriteFile(*md, []byte(out), 0o644); err != nil {
			fatal(err)
		}
	}
	if *png != "" {
		if err := rep.WritePNG(*png); err != nil {
			fatal(err)
		}
	}
	if err != nil {
		fatal(err)
	}
}

// reportHeader is the command, machine, date and load of the run.
func reportHeader(rep *Report, loadStart float64, waited, took time.Duration) string {
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	return fmt.Sprintf("- Date %s, commit %s, machine: %s, torch %s (%s)\n- Command: `%s`\n"+
		"- 1-minute load average: %.2f at the start (after waiting %s for < -wait-load), %.2f at the end; the run took %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSpace(string(commit)), machine(), rep.Torch, "Debian python3-torch",
		strings.Join(append([]string{"dataloader"}, os.Args[1:]...), " "),
		loadStart, waited.Round(time.Second), loadAvg(), took.Round(time.Second))
}

// waitQuiet polls the 1-minute load average every 30 s until it is below
// threshold or maxWait has passed, and returns the load it started at and
// how long it waited. threshold 0 does not wait.
func waitQuiet(ctx context.Context, threshold float64, maxWait time.Duration) (float64, time.Duration) {
	start := time.Now()
	for threshold > 0 && loadAvg() >= threshold && time.Since(start) < maxWait {
		fmt.Fprintf(os.Stderr, "load %.2f ≥ %.2f: waiting (%s so far)\n", loadAvg(), threshold, time.Since(start).Round(time.Second))
		select {
		case <-ctx.Done():
			return loadAvg(), time.Since(start)
		case <-time.After(30 * time.Second):
		}
	}
	return loadAvg(), time.Since(start)
}

// loadAvg is the 1-minute load average (0 when unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// parseWorkers reads "2,8".
func parseWorkers(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("dataloader: bad worker count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// machine describes this host.
func machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	return fmt.Sprintf("nproc %d, MemTotal %s, kernel %s", runtime.NumCPU(), mem, strings.TrimSpace(string(kernel)))
}

// tool returns dir/name when it exists, else name from the PATH, else "".
func tool(dir, name string) string {
	if abs, err := filepath.Abs(filepath.Join(dir, name)); err == nil && isFile(abs) {
		return abs
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "dataloader:", err)
	os.Exit(1)
}
