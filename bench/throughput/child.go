package main

import (
	"context"
	"encoding/json"
	"expvar"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the mount child serves /debug/pprof for profiling
	"os"
	"os/signal"
	"syscall"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount"
)

// childEnv, when set in the environment, makes this binary a mount child:
// exactly what `cachefs mount` runs (pkg/mount with AllowOther), plus
// /debug/pprof and /debug/vars (fusefs request counters) on a debug address.
// The parent runs the mount in its own process, like production, and reads
// the counters and profiles over HTTP.
const childEnv = "EPOCHFS_BENCH_MOUNT_CHILD"

func init() {
	expvar.Publish("fusefs", expvar.Func(func() any { return fusefs.ReadCounters() }))
}

// childMain runs the mount child: flags from args, "ready ADDR" on stdout
// once mounted, unmount on SIGTERM.
func childMain(args []string) {
	fl := flag.NewFlagSet("mount-child", flag.ExitOnError)
	var cfg mount.Config
	fl.StringVar(&cfg.CacheDir, "cache-dir", "", "")
	fl.Int64Var(&cfg.CacheSize, "cache-size", 0, "")
	fl.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "")
	fl.StringVar(&cfg.Manifest, "manifest", mount.ManifestNone, "")
	fl.BoolVar(&cfg.Debug, "fuse-debug", false, "")
	readaheadFiles := fl.String("readahead-files", mount.ReadaheadFilesAuto, "") // cachefs mount's default
	_ = fl.Parse(args)
	var err error
	if cfg.ReadaheadFiles, err = mount.ParseReadaheadFiles(*readaheadFiles); err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(2)
	}
	if fl.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "mount child: want SOURCE MOUNTPOINT")
		os.Exit(2)
	}
	cfg.Source, cfg.Mountpoint = fl.Arg(0), fl.Arg(1)
	cfg.AllowOther = true
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, nil) }()
	m, err := mount.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(1)
	}
	if err := m.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", ln.Addr())
	unmounted := make(chan struct{})
	go func() { m.Wait(); close(unmounted) }()
	select {
	case <-ctx.Done():
		err = m.Unmount()
	case <-unmounted:
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(1)
	}
}

// fetchCounters reads a mount child's fusefs counters.
func fetchCounters(debugAddr string) (fusefs.Counters, error) {
	var out struct {
		Fusefs fusefs.Counters `json:"fusefs"`
	}
	resp, err := http.Get("http://" + debugAddr + "/debug/vars")
	if err != nil {
		return out.Fusefs, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out.Fusefs, err
}
