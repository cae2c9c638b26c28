// Command warmprofile says where the time of a warm epoch through EpochFS
// goes (issue 24, the warm DataLoader goal): a PIL reader, doing per file
// what a torchvision ImageFolder worker does (open, Image.open,
// convert('RGB'), close; pilread.py), reads a JPEG dataset from (a) local
// disk, (b) a `cachefs mount` of that directory whose cache holds it all
// (one priming epoch), and (c) go-fuse's plain loopback (fs.NewLoopbackRoot,
// 1 h timeouts, passthrough: the ceiling of any go-fuse mount), in
// interleaved rounds a b c a b c with the caches dropped before each epoch.
// Per file it reports each mount process's CPU (/proc/PID/stat utime+stime
// and the threads' schedstat run time, before and after the epoch), the
// reader's own user and system CPU, and images/s with /proc/loadavg; then
// a second pass with go-fuse's request log on counts the FUSE requests per
// file by opcode, and (-pprof) a CPU profile of the mount over one epoch.
//
// As root (mounts, drop_caches):
//
//	make bench-warm-profile                      # 2,000 JPEGs, 3 rounds
//	bin/bench-warm-profile -cachefs bin/cachefs -files 2000 -rounds 5 -drops 3,1
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

//go:embed pilread.py
var pilread []byte

// Config is one profile run.
type Config struct {
	Dir             string        // work directory: dataset, caches, mount points, logs
	Cachefs         string        // the cachefs binary
	Python          string        // a python3 with PIL (Debian's python3-pil)
	Files, Classes  int           // dataset shape
	Seed            uint64        // dataset and shuffle seed
	Rounds          int           // interleaved rounds
	Workers         int           // reader worker processes (DataLoader num_workers)
	Drops           []int         // drop_caches modes to run before each epoch (3, 1)
	LoopbackTimeout time.Duration // the loopback's entry/attr timeouts
	Opcodes         bool          // run the request-counting pass
	PProf           string        // file for a CPU profile of the mount; "" none
	PProfEpochs     int           // epochs the profiled mount serves
	Variants        []string      // keys of variants: more EpochFS mounts, side by side
	Buffered        bool          // also read local and epochfs opening files with an explicit buffer size
	MD              string        // markdown report; "" stdout only
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == loopbackArg {
		loopbackMain(os.Args[2:])
		return
	}
	var cfg Config
	var drops string
	flag.StringVar(&cfg.Dir, "dir", "/var/tmp/epochfs-warmprofile", "work directory (dataset kept between runs)")
	flag.StringVar(&cfg.Cachefs, "cachefs", "bin/cachefs", "cachefs binary")
	flag.StringVar(&cfg.Python, "python", "/usr/bin/python3", "python3 with PIL")
	flag.IntVar(&cfg.Files, "files", 2000, "JPEGs in the dataset")
	flag.IntVar(&cfg.Classes, "classes", 20, "class directories")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "dataset seed; round r shuffles with seed+r")
	flag.IntVar(&cfg.Rounds, "rounds", 3, "interleaved rounds (local, epochfs, loopback)")
	flag.IntVar(&cfg.Workers, "workers", 2, "reader worker processes")
	flag.StringVar(&drops, "drops", "3,1", "drop_caches modes, each run every round: 3 = pages+dentries+inodes, 1 = pages only")
	flag.DurationVar(&cfg.LoopbackTimeout, "loopback-timeout", time.Hour, "go-fuse loopback entry/attr timeouts")
	flag.BoolVar(&cfg.Opcodes, "opcodes", true, "count FUSE requests by opcode (a second pass with the request log on)")
	flag.StringVar(&cfg.PProf, "pprof", "", "write a CPU profile of a new mount over the warm cache to this file")
	flag.IntVar(&cfg.PProfEpochs, "pprof-epochs", 6, "epochs of the profiled mount (the first verifies the recovered entries)")
	flag.BoolVar(&cfg.Buffered, "buffered", false, "also run local+buffered and epochfs+buffered: the reader opens with buffering set, so no isatty ioctl")
	var vars string
	flag.StringVar(&vars, "variants", "", "more EpochFS mounts side by side: procs1 (GOMAXPROCS=1), gogc400 (GOGC=400)")
	flag.StringVar(&cfg.MD, "md", "", "write the report (markdown) to this file too")
	flag.Parse()
	for _, d := range strings.Split(drops, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || (n != 1 && n != 3) {
			fmt.Fprintf(os.Stderr, "warmprofile: -drops %q: want 1 and/or 3\n", drops)
			os.Exit(2)
		}
		cfg.Drops = append(cfg.Drops, n)
	}
	for _, v := range strings.Split(vars, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if _, ok := variants[v]; !ok {
			fmt.Fprintf(os.Stderr, "warmprofile: -variants: unknown %q\n", v)
			os.Exit(2)
		}
		cfg.Variants = append(cfg.Variants, v)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "warmprofile: needs root (FUSE mounts, drop_caches)")
		os.Exit(2)
	}
	rep, err := Run(cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "warmprofile:", err)
		os.Exit(1)
	}
	md := rep.Markdown()
	fmt.Print(md)
	if cfg.MD != "" {
		if err := os.WriteFile(cfg.MD, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "warmprofile:", err)
			os.Exit(1)
		}
	}
}
