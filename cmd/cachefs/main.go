// Command cachefs is EpochFS's command line: mount a dataset through the NR
// cache, inspect a cache directory, and run the demo. `cachefs job …` runs
// the separate cachefs-job binary (cmd/cachefs-job), which keeps the
// Kubernetes client libraries out of this one, the per-dataset mount process.
//
// Mains are thin: flags become a Config, the package validates it and runs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliusage"
	"github.com/epochfs/epochfs/internal/logging"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// exitError carries an exit code through cobra; reported when the
// command has already written its error (to its log).
type exitError struct {
	code     int
	err      error
	reported bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// A mount must outlive whoever reads its output: with SIGPIPE ignored, a
	// closed stdout/stderr pipe makes writes fail instead of killing the
	// process and leaving a dead mount behind.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		ee := asExitError(err)
		if !ee.reported {
			fmt.Fprintln(os.Stderr, "cachefs:", err)
		}
		os.Exit(ee.code)
	}
}

// asExitError returns the exit code and message of a command's error: its
// own *exitError, else 2 for a usage error and 1 for any other.
func asExitError(err error) *exitError {
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: 1, err: err}
		if cliusage.Is(err) {
			ee.code = int(exitcode.Usage)
		}
	}
	return ee
}

type globalFlags struct {
	logLevel  string
	logFormat string
	stderr    io.Writer // where logs go; nil: os.Stderr (tests set a pty)
}

// errOut is where the command's logs and failure lines go.
func (g *globalFlags) errOut() io.Writer {
	if g.stderr != nil {
		return g.stderr
	}
	return os.Stderr
}

func newRoot() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "cachefs",
		Short: "EpochFS: read-only training datasets through a no-replacement (NR) node cache",
		Long: `cachefs mounts a read-only dataset (a local path, s3://bucket/prefix or nfs://host/export) through
a node-local cache with the NR (no-replacement) policy: files are admitted until
the cache is full and never evicted, so every epoch after the first hits exactly
cache/dataset of the bytes, where LRU thrashes under shuffled epochs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, mountapi.FlagLogLevel, "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, mountapi.FlagLogFormat, "text", "log format on stderr: text or json")
	root.AddCommand(newMountCmd(g), newUmountCmd(), newIndexCmd(g), newPrefetchCmd(g), newStatsCmd(), newVersionCmd(), newDemoCmd(g))
	root.AddCommand(newJobCmd())
	cliusage.Mark(root) // usage errors exit 2 (exitcode.Usage) in every command
	registerCompletions(root)
	return root
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	return logging.New(g.errOut(), g.logFormat, g.logLevel)
}

// registerCompletions completes the values of the flags that take a word
// from a fixed set, in every command that has them.
func registerCompletions(root *cobra.Command) {
	fixed := func(words ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp)
	}
	_ = root.RegisterFlagCompletionFunc(mountapi.FlagLogFormat, fixed("text", "json"))
	_ = root.RegisterFlagCompletionFunc(mountapi.FlagLogLevel, fixed("debug", "info", "warn", "error"))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup(mountapi.FlagPolicy) != nil {
			_ = c.RegisterFlagCompletionFunc(mountapi.FlagPolicy, fixed(cache.PolicyNR))
		}
		if c.Flags().Lookup(mountapi.FlagCacheScope) != nil {
			_ = c.RegisterFlagCompletionFunc(mountapi.FlagCacheScope, fixed(mountapi.ScopeNode, mountapi.ScopeCluster))
		}
		if c.Flags().Lookup("progress") != nil {
			_ = c.RegisterFlagCompletionFunc("progress", fixed("auto", "lines", "none"))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
