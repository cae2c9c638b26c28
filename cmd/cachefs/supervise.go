package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// superviseFlags are `cachefs mount`'s crash-recovery flags (mount.Supervise).
type superviseFlags struct {
	on            bool
	maxRestarts   int
	recoverFD     int
	noPassthrough bool
}

// restartWindow is the window --max-restarts counts in.
const restartWindow = 10 * time.Minute

func (s *superviseFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&s.on, mountapi.FlagSupervise, false, "run the mount under a small parent that holds a duplicate of its FUSE descriptor and, when the mount process dies (crash, kill -9, OOM), starts a new one on the same connection: readers see a stall, not an error (needs --"+mountapi.FlagManifest+" FILE: node ids must be the manifest's)")
	f.IntVar(&s.maxRestarts, mountapi.FlagMaxRestarts, 10, "with --"+mountapi.FlagSupervise+": the most recoveries within 10 minutes; one more (or 3 recovered processes in a row dying before they serve) unmounts and fails")
	f.IntVar(&s.recoverFD, mountapi.FlagRecoverFD, -1, "serve the FUSE connection of inherited descriptor N, whose serving process died, instead of mounting; N+1 carries its state (set by --"+mountapi.FlagSupervise+")")
	_ = f.MarkHidden(mountapi.FlagRecoverFD)
	f.BoolVar(&s.noPassthrough, mountapi.FlagNoPassthrough, false, "serve cached files through this process instead of kernel passthrough (slower)")
}

// complete checks the combinations and reads a recovery's state into cfg.
func (s *superviseFlags) complete(cmd *cobra.Command, cfg *mount.Config) error {
	fl := cmd.Flags()
	cfg.NoPassthrough = s.noPassthrough
	if s.on {
		if cfg.Manifest == "" || cfg.Manifest == mountapi.ManifestNone {
			return usageError(fmt.Errorf("--%s needs --%s FILE or URL: %w", mountapi.FlagSupervise, mountapi.FlagManifest, mount.ErrRecoverNeedsManifest))
		}
		for _, other := range []string{mountapi.FlagTakeover, mountapi.FlagRecoverFD, mountapi.FlagCredentialsFD} {
			if fl.Changed(other) { // credentials: the pipe is read once; a restart would find it empty (not built)
				return usageError(fmt.Errorf("--%s and --%s: not together", mountapi.FlagSupervise, other))
			}
		}
		if s.maxRestarts < 0 {
			return usageError(fmt.Errorf("--%s: %d must be at least 0", mountapi.FlagMaxRestarts, s.maxRestarts))
		}
	}
	if !fl.Changed(mountapi.FlagRecoverFD) {
		return nil
	}
	if s.recoverFD < 3 || s.recoverFD > 1<<20 {
		return usageError(fmt.Errorf("--%s: %d is not an inherited descriptor", mountapi.FlagRecoverFD, s.recoverFD))
	}
	if cfg.Takeover != "" {
		return usageError(fmt.Errorf("--%s and --%s: not together", mountapi.FlagRecoverFD, mountapi.FlagTakeover))
	}
	st, err := handover.ReadState(s.recoverFD + 1)
	if err != nil {
		return usageError(err)
	}
	cfg.Recover = &handover.Held{State: st, Fd: s.recoverFD}
	return nil
}

// runSupervised runs this command again, without --supervise, under
// mount.Supervise: the child's argv is ours (the CommandOptions argv a
// launcher built), less the supervisor's own flags.
func runSupervised(ctx context.Context, g *globalFlags, cfg mount.Config, s superviseFlags) error {
	log, err := g.logger()
	if err != nil {
		return usageError(err)
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	err = mount.Supervise(ctx, mount.SuperviseConfig{
		Bin: bin, Args: childArgs(os.Args[1:]), CacheDir: cfg.CacheDir, Mountpoint: cfg.Mountpoint,
		MaxRestarts: s.maxRestarts, Window: restartWindow, Version: version, Log: log,
	})
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 && !errors.Is(err, mount.ErrCrashLoop) {
		// The mount failed before it served: it logged its failure line.
		return &exitError{code: exit.ExitCode(), err: err, reported: true}
	}
	return g.mountFailed(err)
}

// childArgs is args without --supervise and --max-restarts.
func childArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--"+mountapi.FlagSupervise || strings.HasPrefix(a, "--"+mountapi.FlagSupervise+"="):
		case a == "--"+mountapi.FlagMaxRestarts:
			i++ // its value
		case strings.HasPrefix(a, "--"+mountapi.FlagMaxRestarts+"="):
		default:
			out = append(out, a)
		}
	}
	return out
}
