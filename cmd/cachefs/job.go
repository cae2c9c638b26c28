package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

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
