package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// Source names, in the order each round runs them.
const (
	srcLocal    = "local"
	srcEpochFS  = "epochfs"
	srcLoopback = "loopback"
)

// source is one way of reading the dataset: a directory and, for a mount,
// its process and log.
type source struct {
	name     string
	root     string
	proc     *benchproc.Proc // nil for local disk
	log      string
	buffered bool // the reader opens with an explicit buffer size (no isatty ioctl)
}

// env is the files every pass shares.
type env struct {
	cfg      Config
	ds       string // the dataset on local disk
	list     string // its paths, one a line
	script   string // pilread.py
	cacheDir string
	capacity int64
}

// variants are the other EpochFS mounts -variants may add, each the same
// `cachefs mount` with its own cache directory and these environment
// settings: ways of running the product's binary, not options of it.
var variants = map[string][]string{
	"procs1":  {"GOMAXPROCS=1"}, // one P: no idle P to wake a spinning thread for each request
	"gogc400": {"GOGC=400"},     // fewer GC cycles
}

// Run writes (or reuses) the dataset, runs the interleaved CPU rounds, then
// the profile and the request-counting passes.
func Run(cfg Config, logw io.Writer) (*Report, error) {
	e := &env{cfg: cfg, ds: filepath.Join(cfg.Dir, "dataset"), list: filepath.Join(cfg.Dir, "paths.txt"),
		script: filepath.Join(cfg.Dir, "pilread.py"), cacheDir: filepath.Join(cfg.Dir, "cache")}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	paths, total, err := writeDataset(e.ds, datasetSpec{Files: cfg.Files, Classes: cfg.Classes, Seed: cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	e.capacity = 2*total + 256<<20 // the cache holds it all
	if err := os.WriteFile(e.list, []byte(strings.Join(paths, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.script, pilread, 0o644); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(e.cacheDir); err != nil {
		return nil, err
	}
	rep := &Report{Cfg: cfg, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Machine: machine(), Bytes: total,
		Opcodes: map[string]map[int]map[string]int{}}
	fmt.Fprintf(logw, "dataset: %d JPEGs, %.1f MB in %s\n", len(paths), float64(total)/1e6, e.ds)
	if err := e.rounds(rep, logw); err != nil {
		return nil, err
	}
	if cfg.PProf != "" {
		if err := e.profile(logw); err != nil {
			return nil, err
		}
	}
	if cfg.Opcodes {
		if err := e.opcodes(rep, logw); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// mounts starts the EpochFS mount over the dataset (cache warm after its
// first epoch) and the loopback, with the request log on when debug.
func (e *env) mounts(debug bool, pprof string) ([]source, func(), error) {
	var procs []*benchproc.Proc
	stop := func() {
		for _, p := range procs {
			p.Stop()
		}
	}
	efs := source{name: srcEpochFS, root: filepath.Join(e.cfg.Dir, "mnt-epochfs"), log: filepath.Join(e.cfg.Dir, "epochfs.log")}
	p, err := startCachefs(e.cfg.Cachefs, mountapi.CommandOptions{Source: e.ds, Mountpoint: efs.root,
		CacheDir: e.cacheDir, CacheSize: e.capacity, FuseDebug: debug, CPUProfile: pprof}, efs.log)
	if err != nil {
		return nil, stop, err
	}
	procs, efs.proc = append(procs, p), p
	lb := source{name: srcLoopback, root: filepath.Join(e.cfg.Dir, "mnt-loopback"), log: filepath.Join(e.cfg.Dir, "loopback.log")}
	if p, err = startLoopback(e.ds, lb.root, e.cfg.LoopbackTimeout, debug, lb.log); err != nil {
		return nil, stop, err
	}
	procs, lb.proc = append(procs, p), p
	srcs := []source{{name: srcLocal, root: e.ds}, efs, lb}
	if debug || pprof != "" {
		return srcs, stop, nil
	}
	if e.cfg.Buffered {
		for _, s := range srcs[:2] {
			s.name, s.buffered = s.name+"+buffered", true
			srcs = append(srcs, s)
		}
	}
	for _, v := range e.cfg.Variants {
		s := source{name: srcEpochFS + "-" + v, root: filepath.Join(e.cfg.Dir, "mnt-epochfs-"+v), log: filepath.Join(e.cfg.Dir, "epochfs-"+v+".log")}
		cacheDir := filepath.Join(e.cfg.Dir, "cache-"+v)
		if err := os.RemoveAll(cacheDir); err != nil {
			return nil, stop, err
		}
		p, err := startCachefs(e.cfg.Cachefs, mountapi.CommandOptions{Source: e.ds, Mountpoint: s.root,
			CacheDir: cacheDir, CacheSize: e.capacity}, s.log, variants[v]...)
		if err != nil {
			return nil, stop, err
		}
		procs, s.proc = append(procs, p), p
		srcs = append(srcs, s)
	}
	return srcs, stop, nil
}

// epoch drops the caches (mode drop) and reads the dataset once from s,
// returning the run with the mount's CPU over it.
func (e *env) epoch(s source, round, drop int) (epochRun, error) {
	r := epochRun{Round: round, Drop: drop, Source: s.name}
	if err := dropCaches(drop); err != nil {
		return r, fmt.Errorf("drop_caches: %w", err)
	}
	var before, after procCPU
	var err error
	if s.proc != nil {
		if before, err = readProcCPU(s.proc.Cmd.Process.Pid); err != nil {
			return r, err
		}
	}
	r.Load = loadavg()
	disk := diskReads(e.cfg.Dir)
	r.Res, r.User, r.Sys, err = runReader(e.cfg.Python, e.script, s.root, e.list, e.cfg.Workers, e.cfg.Seed+uint64(round), s.buffered)
	if err != nil {
		return r, err
	}
	r.DiskBytes = diskReads(e.cfg.Dir) - disk
	if s.proc != nil {
		if after, err = readProcCPU(s.proc.Cmd.Process.Pid); err != nil {
			return r, err
		}
		r.Mount = procCPU{ticks: after.ticks - before.ticks, sched: after.sched - before.sched}
	}
	return r, nil
}

// rounds primes the EpochFS cache and runs the interleaved measured rounds.
func (e *env) rounds(rep *Report, logw io.Writer) error {
	srcs, stop, err := e.mounts(false, "")
	defer stop()
	if err != nil {
		return err
	}
	rep.Sources = nil
	for _, s := range srcs {
		rep.Sources = append(rep.Sources, s.name)
		if s.proc != nil && s.name != srcLoopback && !s.buffered {
			r, err := e.epoch(s, 0, 3) // fills the cache: a cold epoch
			if err != nil {
				return fmt.Errorf("priming epoch of %s: %w", s.name, err)
			}
			rep.Priming = append(rep.Priming, r)
		}
	}
	missesBefore, err := cacheMisses(e.cacheDir)
	if err != nil {
		return err
	}
	for round := 1; round <= e.cfg.Rounds; round++ {
		for _, drop := range e.cfg.Drops {
			for i := range srcs {
				s := srcs[(i+round-1)%len(srcs)] // a b c, b c a, …: no source always first
				r, err := e.epoch(s, round, drop)
				if err != nil {
					return err
				}
				if err := rep.add(r); err != nil {
					return err
				}
				fmt.Fprintf(logw, "round %d drop %d %-8s %6.0f img/s  mount %5.1f µs/file  reader sys %5.1f µs/file  disk %5.1f MB (reader %5.1f MB)  load %s\n",
					round, drop, s.name, r.imgs(), perFile(r.Mount.sched, r.Res.Files), perFile(r.Sys, r.Res.Files),
					float64(r.DiskBytes)/1e6, float64(r.Res.InBytes)/1e6, r.Load)
			}
		}
	}
	missesAfter, err := cacheMisses(e.cacheDir)
	if err != nil {
		return err
	}
	rep.MeasuredMisses = missesAfter - missesBefore
	return nil
}

// profile writes a CPU profile of a fresh mount over the warm cache over
// PProfEpochs epochs (drop 3).
func (e *env) profile(logw io.Writer) error {
	srcs, stop, err := e.mounts(false, e.cfg.PProf)
	defer stop()
	if err != nil {
		return err
	}
	// The first epoch of a new mount process verifies each recovered
	// entry before serving it (cache.Store.checkCached): read the profile
	// with -ignore=checkCached for the warm epochs' own work.
	for i := range e.cfg.PProfEpochs {
		if _, err := e.epoch(srcs[1], i, 3); err != nil {
			return err
		}
	}
	fmt.Fprintf(logw, "CPU profile of the mount over %d warm epochs (the first verifies the recovered entries): %s\n",
		e.cfg.PProfEpochs, e.cfg.PProf)
	return nil
}

// opcodes runs one epoch per mount and drop mode with go-fuse's request
// log on and counts the requests, from before the drop (FORGETs) to the
// end of the epoch.
func (e *env) opcodes(rep *Report, logw io.Writer) error {
	srcs, stop, err := e.mounts(true, "")
	defer stop()
	if err != nil {
		return err
	}
	for _, drop := range e.cfg.Drops {
		for _, s := range srcs[1:] {
			if _, err := e.epoch(s, 0, drop); err != nil { // after a fresh mount: every dentry known once
				return err
			}
			off := fileSize(s.log)
			if _, err := e.epoch(s, 1, drop); err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond) // the log's last lines
			counts, _, err := countOpcodes(s.log, off)
			if err != nil {
				return err
			}
			if rep.Opcodes[s.name] == nil {
				rep.Opcodes[s.name] = map[int]map[string]int{}
			}
			rep.Opcodes[s.name][drop] = counts
			fmt.Fprintf(logw, "requests drop %d %-8s %v\n", drop, s.name, counts)
		}
	}
	return nil
}

var missesLine = regexp.MustCompile(`(?m)^cachefs_cache_misses_total(?:\{[^}]*\})? ([0-9.e+]+)$`)

// cacheMisses reads the mount's cache misses through its control socket.
func cacheMisses(cacheDir string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	text, err := mountapi.RemoteMetrics(ctx, cacheDir)
	if err != nil {
		return 0, fmt.Errorf("mount metrics: %w", err)
	}
	var sum float64
	for _, m := range missesLine.FindAllStringSubmatch(text, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum, nil
}
