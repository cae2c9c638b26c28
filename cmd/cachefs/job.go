package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// jobBinary is the program of the `cachefs job` commands (cmd/cachefs-job).
// It is a binary of its own so that client-go and controller-runtime stay
// out of cachefs, which runs once per mounted dataset.
const jobBinary = "cachefs-job"

// newJobCmd runs `cachefs job ARGS` as `cachefs-job ARGS`: the process
// becomes cachefs-job (same pid, stdio, environment; its exit code is the
// command's).
func newJobCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "job",
		Short:              "Submit and watch distributed training jobs (TrainingJobs) that read EpochFS datasets (runs " + jobBinary + ")",
		DisableFlagParsing: true,
		ValidArgsFunction:  completeJob,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, _ := os.Executable() // "" when unknown: only $PATH is searched
			bin, err := findJobBinary(exe)
			if err != nil {
				return err
			}
			return syscall.Exec(bin, append([]string{bin}, args...), os.Environ())
		},
	}
}

// completeJob completes `cachefs job …` by asking cachefs-job, which knows
// the job commands, their flags and (from the API server) the job names:
// cobra hands a command with DisableFlagParsing every word, flags included.
func completeJob(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	exe, _ := os.Executable()
	bin, err := findJobBinary(exe)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobCompletionTimeout)
	defer cancel()
	req := append(append([]string{cobra.ShellCompRequestCmd}, args...), toComplete)
	out, err := exec.CommandContext(ctx, bin, req...).Output()
	if err != nil {
		cobra.CompErrorln(fmt.Sprintf("%s %s: %v", jobBinary, cobra.ShellCompRequestCmd, err))
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return parseCompletion(string(out))
}

// jobCompletionTimeout bounds one completion through cachefs-job (its own
// API lookups give up after 5 s).
const jobCompletionTimeout = 10 * time.Second

// parseCompletion reads cobra's __complete output: one candidate a line
// (with an optional tab and description), then ":DIRECTIVE".
func parseCompletion(out string) ([]cobra.Completion, cobra.ShellCompDirective) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	d, err := strconv.Atoi(strings.TrimPrefix(last, ":"))
	if !strings.HasPrefix(last, ":") || err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var c []cobra.Completion
	for _, l := range lines[:len(lines)-1] {
		if l != "" {
			c = append(c, l)
		}
	}
	return c, cobra.ShellCompDirective(d)
}

// findJobBinary returns cachefs-job next to the executable exe, else the one
// on $PATH.
func findJobBinary(exe string) (string, error) {
	if exe != "" {
		if p := filepath.Join(filepath.Dir(exe), jobBinary); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(jobBinary)
	if err == nil {
		return p, nil
	}
	if errors.Is(err, exec.ErrDot) {
		return "", fmt.Errorf("job: %s is in the current directory, which cachefs does not run programs from: put it next to cachefs or on $PATH", jobBinary)
	}
	return "", fmt.Errorf("job: the job commands are in %s, found neither next to cachefs (%s) nor on $PATH: install it there (make build writes bin/%s)",
		jobBinary, filepath.Dir(exe), jobBinary)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
