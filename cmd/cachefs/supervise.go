package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
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
	recoverFrom   string
	credentials   bool // --credentials-fd given (read by mountFlags.complete)
	noPassthrough bool
}

// restartWindow is the window --max-restarts counts in.
const restartWindow = 10 * time.Minute

func (s *superviseFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&s.on, mountapi.FlagSupervise, false, "run the mount under a small parent that holds a duplicate of its FUSE descriptor and, when the mount process dies (crash, kill -9, OOM), starts a new one on the same connection: readers see a stall, not an error. With --"+mountapi.FlagCredentialsFD+" the parent reads the credentials once and gives each mount process its own pipe; with --"+mountapi.FlagTakeover+" the first mount process takes over the running mount; with --"+mountapi.FlagRecoverFrom+" it recovers a held connection. A mount without a manifest is recovered too: its node ids are recorded in the cache dir (connection/nodes)")
	f.IntVar(&s.maxRestarts, mountapi.FlagMaxRestarts, 10, "with --"+mountapi.FlagSupervise+": the most recoveries within 10 minutes; one more (or 3 recovered processes in a row dying before they serve) unmounts and fails")
	f.StringVar(&s.recoverFrom, mountapi.FlagRecoverFrom, "", "with --"+mountapi.FlagSupervise+": instead of mounting, recover the FUSE connection of this mount point that the holder listening at this socket (e.g. the CSI node plugin) lends, after its mount process died")
	f.IntVar(&s.recoverFD, mountapi.FlagRecoverFD, -1, "serve the FUSE connection of inherited descriptor N, whose serving process died, instead of mounting; N+1 carries its state (set by --"+mountapi.FlagSupervise+": N is 3, or 4 after a --"+mountapi.FlagCredentialsFD+" 3 pipe)")
	_ = f.MarkHidden(mountapi.FlagRecoverFD)
	f.BoolVar(&s.noPassthrough, mountapi.FlagNoPassthrough, false, "serve cached files through this process instead of kernel passthrough (slower)")
}

// complete checks the combinations and reads a recovery's state into cfg.
func (s *superviseFlags) complete(cmd *cobra.Command, cfg *mount.Config) error {
	fl := cmd.Flags()
	cfg.NoPassthrough = s.noPassthrough
	s.credentials = fl.Changed(mountapi.FlagCredentialsFD)
	if s.recoverFrom != "" && !s.on {
		return usageError(fmt.Errorf("--%s needs --%s", mountapi.FlagRecoverFrom, mountapi.FlagSupervise))
	}
	if s.on {
		if fl.Changed(mountapi.FlagRecoverFD) {
			return usageError(fmt.Errorf("--%s and --%s: not together", mountapi.FlagSupervise, mountapi.FlagRecoverFD))
		}
		if s.recoverFrom != "" && cfg.Takeover != "" {
			return usageError(fmt.Errorf("--%s and --%s: not together", mountapi.FlagRecoverFrom, mountapi.FlagTakeover))
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
	var creds *mountapi.Credentials
	if s.credentials { // read once by mountFlags.complete; each mount process gets its own pipe
		c := mountapi.Credentials(cfg.Backend.Credentials)
		creds = &c
	}
	err = mount.Supervise(ctx, mount.SuperviseConfig{
		Bin: bin, Args: childArgs(os.Args[1:]), CacheDir: cfg.CacheDir, Mountpoint: cfg.Mountpoint,
		Credentials: creds, Takeover: cfg.Takeover, RecoverFrom: s.recoverFrom,
		MaxRestarts: s.maxRestarts, Window: restartWindow, Version: version, Log: log,
	})
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 && !errors.Is(err, mount.ErrCrashLoop) {
		// The mount failed before it served: it logged its failure line.
		return &exitError{code: exit.ExitCode(), err: err, reported: true}
	}
	return g.mountFailed(err)
}

// childArgs is args without --supervise and the flags mount.Supervise
// sets per process (--credentials-fd, --takeover) or keeps
// (--max-restarts, --recover-from).
func childArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--"+mountapi.FlagSupervise || strings.HasPrefix(a, "--"+mountapi.FlagSupervise+"="):
		case slices.Contains(supervisorFlags, strings.TrimPrefix(a, "--")):
			i++ // its value
		case slices.ContainsFunc(supervisorFlags, func(f string) bool { return strings.HasPrefix(a, "--"+f+"=") }):
		default:
			out = append(out, a)
		}
	}
	return out
}

// supervisorFlags are the flags with a value that the supervisor's mount
// processes are not given as they are.
var supervisorFlags = []string{mountapi.FlagMaxRestarts, mountapi.FlagCredentialsFD, mountapi.FlagTakeover, mountapi.FlagRecoverFrom}
