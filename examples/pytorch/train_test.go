// Package pytorch_test runs examples/pytorch/train.py with Debian's
// python3-torch 1.13 and python3-torchvision 0.14 (`make torch-deps`) over a
// JPEG tree from internal/datagen: in one process, and in two under
// torchrun (examples/pytorch/torchrun.py, Debian's launcher fixed for
// Python 3.11), checking the script's JSON lines.
package pytorch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
)

// event is one JSON line of train.py (the fields of every event kind).
type event struct {
	Event      string  `json:"event"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	Dataset    int     `json:"dataset"`
	Classes    int     `json:"classes"`
	Workers    int     `json:"workers"`
	BatchSize  int     `json:"batch_size"`
	Epoch      int     `json:"epoch"`
	Epochs     int     `json:"epochs"`
	Samples    int     `json:"samples"`
	ImagesPerS float64 `json:"images_per_s"`
	Loss       float64 `json:"loss"`
	Seconds    float64 `json:"seconds"`
	Checksum   string  `json:"checksum"`
	Indices    []int   `json:"indices"`
}

// python returns a python3 that imports torch and torchvision: Debian's
// /usr/bin/python3 (where python3-torch installs), else python3 on PATH.
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import torch, torchvision, PIL").Run() == nil {
			return p
		}
	}
	testenv.RequireOrSkip(t, "no python3 imports torch, torchvision and PIL",
		"run `make torch-deps` (Debian's python3-torch python3-torchvision python3-pil)")
	return ""
}

// script returns the path of a file of examples/pytorch.
func script(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// result is one run of a command: its exit code, JSON events and output.
type result struct {
	code           int
	events         []event
	stdout, stderr string
}

// runPython runs python with args (in its own process group, so that a
// hang guard kills torchrun's workers and the DataLoader's too).
func runPython(t *testing.T, py string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a hang guard, not an assertion
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the checkout
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", py, args, err)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		r.events = append(r.events, e)
	}
	return r
}

// epochs returns the epoch events of rank, by epoch (1-based).
func (r result) epochs(t *testing.T, rank, want int) []event {
	t.Helper()
	var out []event
	for _, e := range r.events {
		if e.Event == "epoch" && e.Rank == rank {
			if e.Epoch != len(out)+1 {
				t.Fatalf("rank %d: epoch %d after %d epochs", rank, e.Epoch, len(out))
			}
			out = append(out, e)
		}
	}
	if len(out) != want {
		t.Fatalf("rank %d: %d epoch lines, want %d\nstdout:\n%s\nstderr:\n%s", rank, len(out), want, r.stdout, r.stderr)
	}
	return out
}

// checkStartDone checks each rank's start and done lines.
func (r result) checkStartDone(t *testing.T, world, dataset, classes, epochs int) {
	t.Helper()
	starts, dones := map[int]event{}, map[int]event{}
	for _, e := range r.events {
		switch e.Event {
		case "start":
			starts[e.Rank] = e
		case "done":
			dones[e.Rank] = e
		}
	}
	for rank := range world {
		s, ok := starts[rank]
		if !ok || s.World != world || s.Dataset != dataset || s.Classes != classes || s.Workers != 2 || s.BatchSize != 16 {
			t.Errorf("rank %d: start %+v (found %v), want world %d, dataset %d, classes %d, workers 2, batch 16",
				rank, s, ok, world, dataset, classes)
		}
		if d, ok := dones[rank]; !ok || d.Epochs != epochs {
			t.Errorf("rank %d: done %+v (found %v), want epochs %d", rank, d, ok, epochs)
		}
	}
	if len(starts) != world || len(dones) != world {
		t.Errorf("%d start and %d done lines, want %d each", len(starts), len(dones), world)
	}
}

func parseChecksum(t *testing.T, s string) uint64 {
	t.Helper()
	if len(s) != 16 {
		t.Fatalf("checksum %q: want 16 hex digits", s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("checksum %q: %v", s, err)
	}
	return v
}

func span(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

const (
	files   = 120
	classes = 4
)

// TestTrain writes 120 small JPEGs in 4 classes, trains two epochs in one
// process, then in two processes under torchrun, and checks what each rank
// read (exact covers of the dataset), the order-free checksums (the same
// every epoch; the ranks' sum is the single process's) and that the loss
// falls.
func TestTrain(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	// Small images (median ~160×120): the test is of the script, not of the sizes.
	if _, err := datagen.WriteJPEGs(dir, datagen.JPEGSpec{Files: files, Classes: classes, Seed: 5, MedianPixels: 20_000}, 2); err != nil {
		t.Fatal(err)
	}
	train := script(t, "train.py")
	args := []string{train, "--data", dir, "--epochs", "2", "--workers", "2", "--batch-size", "16"}
	var single uint64
	t.Run("one process", func(t *testing.T) {
		r := runPython(t, py, args...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		r.checkStartDone(t, 1, files, classes, 2)
		ep := r.epochs(t, 0, 2)
		for _, e := range ep {
			if e.World != 1 || e.Samples != files || !slices.Equal(e.Indices, span(files)) {
				t.Errorf("epoch %d: world %d, %d samples, indices %v; want world 1 and each of 0..%d once",
					e.Epoch, e.World, e.Samples, e.Indices, files-1)
			}
			if e.ImagesPerS <= 0 || e.Seconds <= 0 {
				t.Errorf("epoch %d: %v images/s over %v s", e.Epoch, e.ImagesPerS, e.Seconds)
			}
		}
		if ep[0].Checksum != ep[1].Checksum {
			t.Errorf("checksum %s in epoch 1, %s in epoch 2: the same images decoded differently", ep[0].Checksum, ep[1].Checksum)
		}
		if !(ep[1].Loss < ep[0].Loss) {
			t.Errorf("loss %v in epoch 1, %v in epoch 2: want it to fall", ep[0].Loss, ep[1].Loss)
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("epoch 2 rank 0/1: %d samples, ", files)) {
			t.Errorf("no human epoch line in\n%s", r.stdout)
		}
		single = parseChecksum(t, ep[0].Checksum)
		t.Logf("loss %.4f → %.4f, %.1f and %.1f images/s, checksum %s", ep[0].Loss, ep[1].Loss, ep[0].ImagesPerS, ep[1].ImagesPerS, ep[0].Checksum)
	})
	t.Run("torchrun 2 processes", func(t *testing.T) {
		if single == 0 {
			t.Skip("needs the one-process run's checksum")
		}
		port := testenv.FreePort(t)
		r := runPython(t, py, append([]string{script(t, "torchrun.py"), "--nnodes", "1", "--nproc_per_node", "2",
			"--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(port)}, args...)...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		r.checkStartDone(t, 2, files, classes, 2)
		ranks := [][]event{r.epochs(t, 0, 2), r.epochs(t, 1, 2)}
		for e := range 2 {
			a, b := ranks[0][e], ranks[1][e]
			union := slices.Sorted(slices.Values(append(slices.Clone(a.Indices), b.Indices...)))
			if a.World != 2 || b.World != 2 || len(a.Indices) != files/2 || len(b.Indices) != files/2 || !slices.Equal(union, span(files)) {
				t.Errorf("epoch %d: rank 0 read %v, rank 1 %v; want disjoint halves covering 0..%d", e+1, a.Indices, b.Indices, files-1)
			}
			if sum := parseChecksum(t, a.Checksum) + parseChecksum(t, b.Checksum); sum != single {
				t.Errorf("epoch %d: checksums %s + %s = %016x, want the one process's %016x", e+1, a.Checksum, b.Checksum, sum, single)
			}
		}
		if slices.Equal(ranks[0][0].Indices, ranks[0][1].Indices) {
			t.Errorf("rank 0 read the same shard in both epochs (set_epoch not called?): %v", ranks[0][0].Indices)
		}
		t.Logf("rank 0 loss %.4f → %.4f, rank 1 %.4f → %.4f", ranks[0][0].Loss, ranks[0][1].Loss, ranks[1][0].Loss, ranks[1][1].Loss)
	})
}

// TestTrainBadData checks exit status 2 and a clear message for a missing
// and an empty data directory.
func TestTrainBadData(t *testing.T) {
	py := python(t)
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "class-000"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such directory"},
		{"no class directories", t.TempDir(), "no images"},
		{"empty class directory", empty, "no images"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runPython(t, py, script(t, "train.py"), "--data", tc.dir, "--epochs", "1")
			if r.code != 2 || !strings.Contains(r.stderr, tc.dir) || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and a line naming %s with %q", r.code, r.stderr, tc.dir, tc.want)
			}
			if len(r.events) != 0 {
				t.Errorf("events %+v before the data was found", r.events)
			}
		})
	}
}
