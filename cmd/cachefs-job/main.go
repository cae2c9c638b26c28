// Command cachefs-job is `cachefs job`: it submits, lists, inspects, follows
// and deletes TrainingJobs (jobs.epochfs.io/v1alpha1) on a Kubernetes
// cluster. It is a binary of its own so that client-go and
// controller-runtime stay out of cachefs, the per-dataset mount process;
// cachefs runs it for `cachefs job …` (cmd/cachefs/job.go), so
// `cachefs-job ARGS` and `cachefs job ARGS` are the same command.
//
// It knows the job controller only through its API (pkg/job/api/v1alpha1).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliusage"
)

func main() {
	// As in cachefs, whose `job` command this is: a closed stdout/stderr
	// pipe makes writes fail instead of killing the process.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	root.SetArgs(completionArgs(os.Args[1:]))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cachefs:", err)
		if cliusage.Is(err) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// newRoot is the `cachefs` command with only its `job` subcommand, so that
// usage and errors name the commands as users type them: `cachefs job …`.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "cachefs",
		Short:         "EpochFS training jobs (the job commands of cachefs)",
		SilenceUsage:  true,
		SilenceErrors: true,
		// The completion command is `cachefs job completion` (the root is
		// not reachable from the command line).
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	// cachefs's global flags, accepted as before the job commands had a
	// binary of their own; they do not log.
	var logLevel, logFormat string
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&logFormat, "log-format", "text", "log format on stderr: text or json")
	_ = root.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(newJobCmd())
	cliusage.Mark(root) // usage errors exit 2 in every command, as in cachefs
	return root
}
