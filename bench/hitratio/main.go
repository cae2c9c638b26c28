package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/bench/policies"
	"github.com/epochfs/epochfs/internal/benchproc"
)

func main() {
	tiny := flag.Bool("tiny", false, "a few hundred files, 2 epochs, nr and lru (seconds; what CI runs)")
	dir := flag.String("dir", "", "work directory (default: a temporary directory, removed afterwards)")
	files := flag.Int("files", 0, "number of files (default 2400; tiny 300)")
	epochs := flag.Int("epochs", 0, "epochs per (policy, cache size) (default 5; tiny 2)")
	policies := flag.String("policies", "", "comma-separated policies (default "+strings.Join(policies.Names(), ",")+")")
	fractions := flag.String("fractions", "", "comma-separated cache sizes as fractions of the dataset (default 1/16,5/16,10/16,1,1.25)")
	classes := flag.Int("classes", 0, "number of class directories (default 24; tiny 6)")
	minSize := flag.Int64("min-size", 0, "smallest file, bytes (default 16000; tiny 1000)")
	maxSize := flag.Int64("max-size", 0, "largest file, bytes (default 5000000; tiny 64000)")
	medianSize := flag.Int64("median-size", 0, "log-normal median file size, bytes (default 110000; tiny 8000)")
	workers := flag.Int("workers", 8, "parallel readers")
	drop := flag.Bool("drop", true, "drop the page cache before each epoch (root; not in -tiny); the ratios do not depend on it, the files/s do")
	md := flag.String("md", "", "write the markdown table to this file")
	png := flag.String("png", "", "write the plot to this PNG file")
	flag.Parse()

	cfg := FullConfig()
	if *tiny {
		cfg = TinyConfig()
	}
	if *files > 0 {
		cfg.Spec.Files = *files
	}
	if *classes > 0 {
		cfg.Spec.Classes = *classes
	}
	if *minSize > 0 {
		cfg.Spec.MinSize = *minSize
	}
	if *maxSize > 0 {
		cfg.Spec.MaxSize = *maxSize
	}
	if *medianSize > 0 {
		cfg.Spec.MedianSize = *medianSize
	}
	if *epochs > 0 {
		cfg.Epochs = *epochs
	}
	if *policies != "" {
		cfg.Policies = strings.Split(*policies, ",")
	}
	if *fractions != "" {
		fs, err := parseFractions(*fractions)
		if err != nil {
			fatal(err)
		}
		cfg.Fractions = fs
	}
	cfg.Workers = *workers
	cfg.Drop = cfg.Drop && *drop
	cfg.Log = os.Stderr
	workDir, removeDir, err := benchproc.WorkDir(*dir, "epochfs-hitratio-")
	if err != nil {
		fatal(err)
	}
	defer removeDir()
	cfg.Dir = workDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := Bench(ctx, cfg)
	if err != nil {
		fatal(err)
	}
	table := rep.Markdown()
	fmt.Print(table)
	fmt.Fprintf(os.Stderr, "done in %s\n", time.Since(start).Round(time.Second))
	if *md != "" {
		if err := os.WriteFile(*md, []byte(table), 0o644); err != nil {
			fatal(err)
		}
	}
	if *png != "" {
		if err := rep.WritePNG(*png); err != nil {
			fatal(err)
		}
	}
}

// parseFractions reads "1/16,0.5,1.25".
func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		num, den, isFrac := strings.Cut(f, "/")
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return nil, fmt.Errorf("hitratio: bad fraction %q", f)
		}
		if isFrac {
			d, err := strconv.ParseFloat(den, 64)
			if err != nil || d == 0 {
				return nil, fmt.Errorf("hitratio: bad fraction %q", f)
			}
			v /= d
		}
		if v <= 0 {
			return nil, fmt.Errorf("hitratio: fraction %q must be positive", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
