package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/epochfs/epochfs/internal/benchproc"
)

func main() {
	files := flag.Int("files", 10_000_000, "number of files")
	classes := flag.Int("classes", 1000, "class directories under train/")
	versions := flag.String("versions", VersionsETag+","+VersionsPosix, "comma-separated version kinds, one run each: etag, posix")
	dir := flag.String("dir", "", "work directory for the manifest file (default: a temporary directory, removed afterwards)")
	doMount := flag.Bool("mount", os.Geteuid() == 0, "also time a real FUSE mount serving the manifest (root)")
	workers := flag.Int("workers", 16, "index listing workers")
	flag.Parse()
	workDir, removeDir, err := benchproc.WorkDir(*dir, "epochfs-manifest-scale-")
	if err != nil {
		fatal(err)
	}
	defer removeDir()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("nproc %d, GOMAXPROCS %d, %s\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Println("| versions | files | entries | build | file size | B/file on disk | load (ReadFile) | heap B/entry | heap B/file | mount ready |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, v := range splitComma(*versions) {
		_, r, err := Run(ctx, Config{Files: *files, Classes: *classes, Versions: v, Dir: workDir, Mount: *doMount,
			Workers: *workers, Log: os.Stderr})
		if err != nil {
			fatal(err)
		}
		ready := "not run"
		if r.MountReady > 0 {
			ready = fmt.Sprintf("%.2f s", r.MountReady.Seconds())
		}
		fmt.Printf("| %s | %d | %d | %.1f s | %.1f MB | %.2f | %.2f s | %.1f | %.1f | %s |\n", v, r.Files, r.Entries,
			r.Build.Seconds(), float64(r.FileSize)/1e6, float64(r.FileSize)/float64(r.Files), r.Load.Seconds(),
			r.HeapPerEntry, r.HeapPerFile, ready)
		_ = os.Remove(workDir + "/manifest")
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
