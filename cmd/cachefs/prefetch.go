package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/prefetch"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// exitInterrupted is the exit code of an interrupted prefetch (128+SIGINT).
const exitInterrupted = 130

type prefetchConfig struct {
	source       string
	cacheDir     string
	cacheSize    units.Size
	manifest     string
	manifestMax  units.Size // --manifest-max-memory
	policy       string
	wholeFileMax units.Size
	blockSize    units.Size
	workers      int
	format       string // -o (cliprint)
	json         bool   // --json, deprecated: -o json
	progress     string
	readTimeout  time.Duration
	// splitSet: --whole-file-max or --block-size was given explicitly.
	splitSet bool
	// Cluster scope: fill only the files peerID owns among peers.
	scope, peers, peerID string
}

func newPrefetchCmd(g *globalFlags) *cobra.Command {
	var c prefetchConfig
	cmd := &cobra.Command{
		Use:   "prefetch SOURCE --cache-dir DIR --cache-size SIZE",
		Short: "Warm a cache with the files a mount of SOURCE keeps under NR, up to capacity",
		Long: `Read SOURCE's files into the cache directory before training, so that the
first epoch of a later 'cachefs mount SOURCE … --cache-dir DIR' already hits.

Files are taken in path order (from the manifest when there is one, else from a
parallel walk of the source) and cached exactly as the mount caches them (whole
up to --whole-file-max, in --block-size blocks beyond), with --workers parallel
reads, until the cache is full: like NR, a file that does not fit is skipped
and smaller ones after it are still tried. Files already cached are skipped, so
a rerun resumes where an interrupted one stopped.

When a mount is running on DIR (it holds the directory's lock), prefetch asks
that mount, through DIR/control.sock, to run the same prefetch against its own
cache, and shows its progress; the mount keeps serving meanwhile. The mount's
own capacity, manifest and split apply then.

Shows a progress bar with percent and ETA on a terminal (plain lines
otherwise: every 5s while listing, then one per 10% fetched), then
what is cached: "complete" only when every file is; "cache full at X% of the
dataset" when the rest did not fit; "interrupted at X%" after Ctrl-C. -o json
or yaml prints the summary as one object on stdout instead (snake_case
keys), -o wide adds a row per figure, -o name prints dataset/ID. Exit status: 0 complete or cache
full, 1 error or files that could not be read, 130 interrupted.`,
		Example: `  cachefs prefetch /data/imagenet --cache-dir /var/cache/epochfs --cache-size 50GiB
  cachefs prefetch 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000' \
      --cache-dir /var/cache/epochfs --cache-size 100GiB --workers 64 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.source = args[0]
			c.splitSet = cmd.Flags().Changed("whole-file-max") || cmd.Flags().Changed("block-size")
			if c.json && c.format == "" {
				c.format = cliprint.JSON
			}
			if err := cliprint.Check(c.format); err != nil {
				return err
			}
			return runPrefetch(cmd.Context(), g, c, cmd.OutOrStdout(), os.Stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.cacheDir, "cache-dir", "", "cache directory, the one the mount will use (required)")
	c.manifestMax, c.wholeFileMax, c.blockSize = units.Size(manifest.DefaultMaxMemory), units.Size(cache.DefaultWholeFileMax), units.Size(cache.DefaultBlockSize)
	f.Var(&c.cacheSize, "cache-size", "cache capacity, as for mount (required unless a mount is running on --cache-dir)")
	f.StringVar(&c.manifest, "manifest", "", "dataset manifest: a local file or a URL; default: SOURCE/.epochfs/manifest when it exists; 'none' walks the source")
	f.Var(&c.manifestMax, mountapi.FlagManifestMaxMemory, "as for mount: the most memory the manifest may take, estimated from its header")
	f.StringVar(&c.policy, "policy", cache.PolicyNR, "cache policy; only nr (prefetching into a replacing policy would evict what it fetched)")
	f.Var(&c.wholeFileMax, "whole-file-max", "as for mount: files up to this size are cached whole")
	f.Var(&c.blockSize, "block-size", "as for mount: larger files are cached in blocks of this size")
	f.IntVar(&c.workers, "workers", prefetch.DefaultWorkers, "parallel reads from the source")
	cliprint.AddFlag(cmd, &c.format, "a summary")
	f.BoolVar(&c.json, "json", false, "print the final summary as JSON on stdout")
	_ = f.MarkDeprecated("json", "use -o json")
	f.StringVar(&c.progress, "progress", "auto", "progress display on stderr: auto (a bar with percent and ETA on a terminal, plain lines otherwise), lines (a line per 10% fetched; every 5s while listing), none")
	f.StringVar(&c.scope, mountapi.FlagCacheScope, mountapi.ScopeNode, "cluster: fill only the files this node owns among --peers (as its cluster-scope mount admits them); a running mount on --cache-dir applies its own scope")
	f.StringVar(&c.peers, mountapi.FlagPeers, "", "cluster scope: the cache peers, id=host:port[;capacity=BYTES],... (as given to the mounts)")
	f.StringVar(&c.peerID, mountapi.FlagPeerID, "", "cluster scope: this node's peer id (as given to its mount)")
	f.DurationVar(&c.readTimeout, "read-timeout", prefetch.DefaultReadTimeout, "deadline of one read (a file or a block), retries included")
	_ = cmd.MarkFlagRequired("cache-dir")
	return cmd
}

func runPrefetch(ctx context.Context, g *globalFlags, c prefetchConfig, stdout, stderr io.Writer) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	members, err := c.check()
	if err != nil {
		return err
	}
	whole, block, capacity := c.wholeFileMax.Bytes(), c.blockSize.Bytes(), c.cacheSize.Bytes()
	src, err := source.Parse(c.source)
	if err != nil {
		return err
	}
	remote := func() error {
		sum, err := prefetchRemote(ctx, c, src, whole, block, stderr)
		if err != nil {
			return err
		}
		return reportPrefetch(stdout, c.format, "mount", sum)
	}
	if capacity == 0 {
		if err := remote(); errors.Is(err, mountapi.ErrNoControl) {
			return errors.New("prefetch: --cache-size is required (no mount is running on --cache-dir)")
		} else if err != nil {
			return err
		}
		return nil
	}
	store, err := cache.Open(cache.Options{Dir: c.cacheDir, Capacity: capacity,
		KeyScheme: src.VersionScheme(), Logger: log})
	switch {
	case errors.Is(err, cache.ErrLocked):
		if rerr := remote(); errors.Is(rerr, mountapi.ErrNoControl) {
			return fmt.Errorf("prefetch: %w, and no mount serves %s: %v", err, mountapi.ControlSocket(c.cacheDir), rerr)
		} else if rerr != nil {
			return rerr
		}
		return nil
	case err != nil:
		return err
	}
	sum, err := prefetchLocal(ctx, log, c, src, store, whole, block, members, stderr)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return reportPrefetch(stdout, c.format, "local", sum)
}

// check validates the flags and returns the cluster scope's members (none
// in node scope).
func (c prefetchConfig) check() ([]peer.Peer, error) {
	switch {
	case c.policy != cache.PolicyNR:
		return nil, fmt.Errorf("prefetch: --policy %q: only %q (a replacing policy would evict what it prefetched)", c.policy, cache.PolicyNR)
	case c.workers < 1:
		return nil, fmt.Errorf("prefetch: --workers %d: want at least 1", c.workers)
	case c.progress != "auto" && c.progress != "lines" && c.progress != "none":
		return nil, fmt.Errorf("prefetch: --progress %q: want auto, lines or none", c.progress)
	}
	switch c.scope {
	case mountapi.ScopeNode, "":
		return nil, nil
	case mountapi.ScopeCluster:
	default:
		return nil, fmt.Errorf("prefetch: --%s %q: want %s or %s", mountapi.FlagCacheScope, c.scope, mountapi.ScopeNode, mountapi.ScopeCluster)
	}
	members, err := peer.ParsePeers(c.peers)
	if err != nil {
		return nil, fmt.Errorf("prefetch: --%s: %w", mountapi.FlagPeers, err)
	}
	for _, p := range members {
		if p.ID == c.peerID {
			return members, nil
		}
	}
	return nil, fmt.Errorf("prefetch: --%s %q is not one of --%s", mountapi.FlagPeerID, c.peerID, mountapi.FlagPeers)
}

// prefetchRemote prefetches through the control socket of the mount that
// holds the cache directory, showing its progress on stderr.
func prefetchRemote(ctx context.Context, c prefetchConfig, src source.Source, whole, block int64, stderr io.Writer) (prefetch.Summary, error) {
	req := mountapi.ControlRequest{Source: src.String(), Workers: c.workers}
	if c.splitSet {
		req.WholeFileMax, req.BlockSize = whole, block
	}
	var latest atomic.Pointer[prefetch.Progress]
	stop := func() {}
	sum, err := mountapi.RemotePrefetch(ctx, c.cacheDir, req, func(ev mountapi.ControlEvent) {
		switch ev.Type {
		case mountapi.EventStarted:
			s := ev.Started
			fmt.Fprintf(stderr, "%s is in use by a running mount (pid %d): prefetching through its control socket (capacity %s)\n",
				c.cacheDir, s.Pid, units.FormatSize(s.CapacityBytes))
			stop = showPrefetchProgress(stderr, c.progress, func() prefetch.Progress {
				if p := latest.Load(); p != nil {
					return *p
				}
				return prefetch.Progress{Phase: prefetch.PhaseListing, ETASeconds: -1}
			})
		case mountapi.EventProgress:
			latest.Store(ev.Progress)
		}
	})
	stop()
	if err != nil && ctx.Err() != nil {
		return prefetch.Summary{}, &exitError{code: exitInterrupted, err: err}
	}
	return sum, err
}

// prefetchLocal runs the prefetch in this process against store.
func prefetchLocal(ctx context.Context, log *slog.Logger, c prefetchConfig, src source.Source, store *cache.Store, whole, block int64, members []peer.Peer, stderr io.Writer) (prefetch.Summary, error) {
	bopts := backend.Options{Logger: log}
	b, err := all.Open(ctx, src, bopts)
	if err != nil {
		return prefetch.Summary{}, err
	}
	defer b.Close()
	man, where, err := manifest.DiscoverMax(ctx, b, c.manifest, bopts, c.manifestMax.Bytes())
	switch {
	case errors.Is(err, manifest.ErrTooLarge):
		return prefetch.Summary{}, fmt.Errorf("prefetch: %w: raise --%s or use --manifest none", err, mountapi.FlagManifestMaxMemory)
	case err != nil:
		return prefetch.Summary{}, fmt.Errorf("prefetch: %w", err)
	case man != nil:
		log.Info("manifest loaded", "manifest", where, "files", man.Files(), "bytes", man.TotalBytes())
	case where != "":
		log.Info("no manifest: walking the source", "looked_for", where)
	}
	var owns func(string) bool
	if members != nil {
		// The mounts' ownership: byte-balanced over the manifest when the
		// peers advertise capacities (peer.Assign), else plain rendezvous.
		var cat peer.Catalog
		if man != nil {
			cat = man
		}
		cl, err := peer.NewCluster(peer.ClientOptions{Self: c.peerID, Dataset: b.ID(), Group: peer.DatasetGroup(b.ID()),
			Members: peer.Static(members), Token: []byte("prefetch: ownership only, never sends"), Catalog: cat})
		if err != nil {
			return prefetch.Summary{}, err
		}
		owns = cl.Owns
	}
	p, err := prefetch.New(prefetch.Config{Backend: b, Store: store, Manifest: man, WholeFileMax: whole, BlockSize: block,
		Workers: c.workers, ReadTimeout: c.readTimeout, Logger: log, Owns: owns})
	if err != nil {
		return prefetch.Summary{}, err
	}
	stop := showPrefetchProgress(stderr, c.progress, p.Progress)
	sum, err := p.Run(ctx)
	stop()
	return sum, err
}

// reportPrefetch prints the summary in format (cliprint) and maps its
// state to the exit status.
func reportPrefetch(w io.Writer, format, via string, s prefetch.Summary) error {
	out := prefetchReport{s, via}
	if err := cliprint.Print(w, format, cliprint.Output{Value: out, Table: out.table,
		Names: func() []string { return []string{"dataset/" + s.Dataset} }}); err != nil {
		return err
	}
	switch s.State {
	case prefetch.StateInterrupted:
		return &exitError{code: exitInterrupted, err: errors.New("prefetch: " + s.Message)}
	case prefetch.StateFailed:
		return &exitError{code: 1, err: errors.New("prefetch: " + s.Message)}
	}
	return nil
}

// prefetchReport is what prefetch prints: the summary (snake_case keys)
// and who ran it.
type prefetchReport struct {
	prefetch.Summary
	Via string `json:"via"` // "local": this process; "mount": the running mount, through its control socket
}

// table writes the summary for people; wide adds a row per figure.
func (r prefetchReport) table(w io.Writer, wide bool) error {
	s := r.Summary
	fmt.Fprintln(w, s.Message)
	if s.Files > 0 || s.State != prefetch.StateInterrupted {
		rate := float64(s.FetchedBytes) / max(s.ElapsedSeconds, 1e-9)
		fmt.Fprintf(w, "dataset %s: %d files, %s (%s); cached in total %d files (%.1f%%), %s (%.1f%%); by this run %d files, %s in %.1fs (%s/s); already cached %d files, %s; cache %s used of %s\n",
			s.Dataset, s.Files, units.FormatSize(s.Bytes), map[bool]string{true: "manifest", false: "listed"}[s.Manifest],
			s.CachedFiles, s.PercentFiles, units.FormatSize(s.CachedBytes), s.PercentBytes,
			s.FetchedFiles, units.FormatSize(s.FetchedBytes), s.ElapsedSeconds, units.FormatSize(int64(rate)),
			s.AlreadyFiles, units.FormatSize(s.AlreadyBytes), units.FormatSize(s.UsedBytes), units.FormatSize(s.CapacityBytes))
	}
	if wide {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  state\t%s\n  via\t%s\n  files\t%d\n  bytes\t%d\n  cached files\t%d\n  cached bytes\t%d\n"+
			"  fetched files\t%d\n  fetched bytes\t%d\n  already files\t%d\n  already bytes\t%d\n"+
			"  not fit files\t%d\n  not fit bytes\t%d\n  failed files\t%d\n  capacity bytes\t%d\n  used bytes\t%d\n"+
			"  whole file max\t%d\n  block size\t%d\n  workers\t%d\n  seconds\t%.3f\n",
			s.State, r.Via, s.Files, s.Bytes, s.CachedFiles, s.CachedBytes, s.FetchedFiles, s.FetchedBytes, s.AlreadyFiles, s.AlreadyBytes,
			s.NotFitFiles, s.NotFitBytes, s.FailedFiles, s.CapacityBytes, s.UsedBytes, s.WholeFileMax, s.BlockSize, s.Workers, s.ElapsedSeconds)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, e := range s.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	return nil
}

// showPrefetchProgress shows progress() on w until the returned stop is
// called (see showProgress).
func showPrefetchProgress(w io.Writer, mode string, progress func() prefetch.Progress) (stop func()) {
	return showProgress(w, mode, func() progressState { return prefetchState(progress()) })
}

// prefetchState is p for showProgress: counts while listing and checking,
// then the bytes done of those planned, with the ETA.
func prefetchState(p prefetch.Progress) progressState {
	switch p.Phase {
	case prefetch.PhaseListing:
		return progressState{Label: "listing", ETA: -1, Detail: fmt.Sprintf("%d dirs, %d files, %s, %s", p.ListedDirs,
			p.DatasetFiles, units.FormatSize(p.DatasetBytes), (time.Duration(p.ElapsedSeconds) * time.Second).String())}
	case prefetch.PhasePlanning:
		return progressState{Label: "checking", ETA: -1, Detail: fmt.Sprintf("%d files (%s) against the cache",
			p.DatasetFiles, units.FormatSize(p.DatasetBytes))}
	}
	st := progressState{Label: "prefetch", Done: p.DoneBytes, Total: max(p.PlannedBytes, 1), ETA: -1}
	if p.PlannedBytes == 0 {
		st.Done = 1 // nothing to fetch: done
	}
	if p.ETASeconds >= 0 {
		st.ETA = time.Duration(p.ETASeconds * float64(time.Second))
	}
	st.Detail = fmt.Sprintf("%s/%s, %d/%d files, %s/s | cached before %d files, %s | dataset %d files, %s",
		units.FormatSize(p.DoneBytes), units.FormatSize(p.PlannedBytes), p.DoneFiles, p.PlannedFiles,
		units.FormatSize(int64(p.BytesPerSecond)), p.AlreadyFiles, units.FormatSize(p.AlreadyBytes),
		p.DatasetFiles, units.FormatSize(p.DatasetBytes))
	if p.FailedFiles > 0 {
		st.Detail += fmt.Sprintf(" | %d failed", p.FailedFiles)
	}
	return st
}
