package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
)

func main() {
	if os.Getenv(childEnv) != "" {
		childMain(os.Getenv(childEnv))
		return
	}
	tiny := flag.Bool("tiny", false, "200 small files, 1 round (seconds; what CI runs)")
	dir := flag.String("dir", "", "work directory (default: a temporary directory under /var/tmp, removed afterwards)")
	files := flag.Int("files", 0, "number of files (default 2000; tiny 200)")
	workers := flag.Int("workers", 8, "parallel readers, GET-loop and prefetch workers")
	rounds := flag.Int("rounds", 0, "interleaved rounds (default 3; tiny 1)")
	drop := flag.Bool("drop-caches", true, "drop the page cache before every run (root)")
	only := flag.String("only", "p2,p3", "comparisons to run: p2, p3")
	p2Man := flag.Bool("p2-manifest", true, "P2 also reads through a mount of the dataset from its manifest")
	raFiles := flag.Int("readahead-files", 8, "P3 also runs the cold epoch with this many files read ahead per miss (0: not)")
	s3Latency := flag.Duration("s3-latency", 0, "P3: add this to every request's time to first byte (a proxy between MinIO and every reader), like a far object store; 0: MinIO on this machine as is")
	tools := flag.String("tools", ".tools/bin", "directory of rclone and minio")
	cachefs := flag.String("cachefs", "bin/cachefs", "cachefs binary (for `cachefs prefetch`)")
	md := flag.String("md", "", "also write the markdown report to this file")
	profDir := flag.String("profile-dir", "", "write CPU profiles of the mount process during every EpochFS epoch here")
	profSec := flag.Int("profile-seconds", 4, "length of each profile (keep it below an epoch's duration)")
	floor := flag.Bool("p3-floor", false, "P3 also reads the cold epoch through a mount that caches nothing (a one-byte cache: every file read through from memory, no cache file written): a cold epoch without the cache write")
	flag.Parse()

	cfg := Config{Spec: datagen.Spec{Files: 2000, Seed: 1}, Rounds: 3}
	if *tiny {
		cfg = Config{Spec: datagen.Spec{Files: 200, Classes: 4, Seed: 1, MedianSize: 8_000, MinSize: 1_000, MaxSize: 64_000}, Rounds: 1}
	}
	if *files > 0 {
		cfg.Spec.Files = *files
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	cfg.Workers, cfg.Drop, cfg.Log = *workers, *drop, os.Stderr
	cfg.ReadaheadFiles = *raFiles
	cfg.S3Latency = *s3Latency
	cfg.P2Manifest = *p2Man
	cfg.ProfileDir, cfg.ProfileSeconds = *profDir, *profSec
	cfg.Floor = *floor
	cfg.P2, cfg.P3 = strings.Contains(*only, "p2"), strings.Contains(*only, "p3")
	cfg.RClone = tool(*tools, "rclone")
	cfg.MinIO = tool(*tools, "minio")
	if _, err := os.Stat(*cachefs); err == nil {
		cfg.CacheFS, _ = filepath.Abs(*cachefs)
	}
	workDir, removeDir, err := benchproc.WorkDir(*dir, "epochfs-throughput-")
	if err != nil {
		fatal(err)
	}
	defer removeDir()
	cfg.Dir = workDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Bench(ctx, cfg)
	if err != nil {
		stop()
		fatal(err)
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	header := fmt.Sprintf("- Date %s, commit %s, machine: %s\n- Command: `%s`\n- Dataset: %d files, %.0f MB (datagen seed %d); %d readers; page cache dropped before every run: %v\n",
		time.Now().Format("2006-01-02"), strings.TrimSpace(string(commit)), machine(),
		strings.Join(append([]string{"throughput"}, os.Args[1:]...), " "),
		rep.Files, float64(rep.Bytes)/1e6, cfg.Spec.Seed, cfg.Workers, cfg.Drop)
	out := rep.Markdown(header)
	fmt.Print(out)
	if *md != "" {
		if err := os.WriteFile(*md, []byte(out), 0o644); err != nil {
			fatal(err)
		}
	}
}

// tool returns dir/name when it exists, else name from the PATH, else "".
func tool(dir, name string) string {
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err == nil {
		abs, _ := filepath.Abs(p)
		return abs
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "throughput:", err)
	os.Exit(1)
}
