package main

import (
	"cmp"
	"context"
	"encoding/json"
	"expvar"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the mount child serves /debug/pprof for profiling
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// childEnv, when set in the environment, makes this binary a mount child:
// exactly what `cachefs mount` runs (pkg/mount with AllowOther), plus
// /debug/pprof and /debug/vars (fusefs request counters) on a debug address.
// Its value is the mount's mountapi.CommandOptions in JSON, so the child
// has no flag parser of its own to drift from the mount's defaults. The
// parent runs the mount in its own process, like production, and reads the
// counters and profiles over HTTP.
const childEnv = "EPOCHFS_BENCH_MOUNT_CHILD"

func init() {
	expvar.Publish("fusefs", expvar.Func(func() any { return fusefs.ReadCounters() }))
}

// childConfig is the mount.Config of `cachefs mount` with opts, for the
// options a benchmark sets; any other is an error rather than ignored.
func childConfig(opts mountapi.CommandOptions) (mount.Config, error) {
	cfg := mount.Config{Source: opts.Source, Mountpoint: opts.Mountpoint, CacheDir: opts.CacheDir, CacheSize: opts.CacheSize,
		Manifest: opts.Manifest, MetricsAddr: opts.MetricsAddr, Debug: opts.FuseDebug, AllowOther: true}
	if opts.Policy != "" && opts.Policy != cache.PolicyNR {
		return cfg, fmt.Errorf("policy %q: the mount child, as cachefs mount, takes %q only", opts.Policy, cache.PolicyNR)
	}
	var err error
	if cfg.ReadaheadFiles, err = mount.ParseReadaheadFiles(cmp.Or(opts.ReadaheadFiles, mountapi.ReadaheadFilesAuto)); err != nil {
		return cfg, err
	}
	rest := opts
	rest.Source, rest.Mountpoint, rest.CacheDir, rest.CacheSize, rest.Policy, rest.Manifest = "", "", "", 0, "", ""
	rest.MetricsAddr, rest.FuseDebug, rest.ReadaheadFiles = "", false, ""
	if !reflect.ValueOf(rest).IsZero() {
		return cfg, fmt.Errorf("options the mount child does not take: %+v", rest)
	}
	return cfg, nil
}

// childMain runs the mount child with the options in optsJSON: "ready
// ADDR" on stdout once mounted, unmount on SIGTERM.
func childMain(optsJSON string) {
	var opts mountapi.CommandOptions
	err := json.Unmarshal([]byte(optsJSON), &opts)
	var cfg mount.Config
	if err == nil {
		cfg, err = childConfig(opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount child:", err)
		os.Exit(2)
	}
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
