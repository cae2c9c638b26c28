package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// run runs bin with args and PATH=path, and returns stdout, stderr and the
// exit code.
func run(t *testing.T, path, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestJobDispatch: `cachefs job ARGS` is `cachefs-job ARGS` (same output,
// same exit code) when cachefs-job is next to cachefs or on $PATH, and a
// clear error when it is nowhere.
func TestJobDispatch(t *testing.T) {
	alone, both := t.TempDir(), t.TempDir()
	for _, b := range []struct{ dir, pkg string }{{alone, "./cmd/cachefs"}, {both, "./cmd/cachefs"}, {both, "./cmd/cachefs-job"}} {
		if _, err := testenv.Build(b.pkg, "", b.dir); err != nil {
			t.Fatal(err)
		}
	}
	noPath := t.TempDir()

	_, stderr, code := run(t, noPath, filepath.Join(alone, "cachefs"), "job", "list")
	if code != 1 || !strings.HasPrefix(stderr, "cachefs: job: the job commands are in cachefs-job, found neither next to cachefs") {
		t.Errorf("without cachefs-job: exit %d, stderr %q", code, stderr)
	}

	for _, tc := range []struct {
		args             []string
		code             int
		stdoutHas, errIs string
	}{
		{[]string{"submit", "resnet", "-n", "ml", "--image", "pytorch/pytorch:2.4.0", "--workers", "2", "--dry-run", "--", "torchrun", "train.py"},
			0, "kind: TrainingJob", ""},
		{[]string{"submit", "resnet", "-n", "ml"}, 1, "", "cachefs: --image is required: the container image of the workers\n"},
		{[]string{"--help"}, 0, "cachefs job [command]", ""},
	} {
		wantOut, wantErr, wantCode := run(t, noPath, filepath.Join(both, "cachefs-job"), tc.args...)
		if wantCode != tc.code || !strings.Contains(wantOut, tc.stdoutHas) || wantErr != tc.errIs {
			t.Errorf("cachefs-job %v: exit %d, stdout %q, stderr %q", tc.args, wantCode, wantOut, wantErr)
		}
		for _, path := range []string{noPath, both} { // next to cachefs; on $PATH
			cachefs := filepath.Join(both, "cachefs")
			if path == both {
				cachefs = filepath.Join(alone, "cachefs")
			}
			out, stderr, code := run(t, path, cachefs, append([]string{"job"}, tc.args...)...)
			if out != wantOut || stderr != wantErr || code != wantCode {
				t.Errorf("cachefs job %v (PATH=%s): exit %d, stdout %q, stderr %q; cachefs-job: exit %d, stdout %q, stderr %q",
					tc.args, path, code, out, stderr, wantCode, wantOut, wantErr)
			}
		}
	}

	// Shell completion: `cachefs job …` completes as `cachefs-job …` does
	// (cachefs asks cachefs-job). No cluster is needed for commands and -o.
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"su"}, "submit\tSubmit a training job\nsuspend\tSuspend training jobs: their pods are deleted and none run until resumed\n:4\n"},
		{[]string{"list", "-o", ""}, "json\nyaml\nname\nwide\n:4\n"},
	} {
		direct, _, code := run(t, noPath, filepath.Join(both, "cachefs-job"), append([]string{"__complete"}, tc.words...)...)
		if code != 0 || direct != tc.want {
			t.Errorf("cachefs-job __complete %q: exit %d, %q, want %q", tc.words, code, direct, tc.want)
		}
		via, _, code := run(t, noPath, filepath.Join(both, "cachefs"), append([]string{"__complete", "job"}, tc.words...)...)
		if code != 0 || via != tc.want {
			t.Errorf("cachefs __complete job %q: exit %d, %q, want %q", tc.words, code, via, tc.want)
		}
	}
	if script, _, code := run(t, noPath, filepath.Join(both, "cachefs-job"), "completion", "bash"); code != 0 || !strings.Contains(script, "__start_cachefs-job") {
		t.Errorf("cachefs-job completion bash: exit %d\n%.300s", code, script)
	}
}
