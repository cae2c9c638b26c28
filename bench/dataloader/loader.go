package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// loaderPy is loader.py, written into the work directory by the run so the
// binary needs no checkout beside it.
//
//go:embed loader.py
var loaderPy []byte

// Epoch is what one run of loader.py printed: one epoch of the DataLoader.
type Epoch struct {
	Images     int     `json:"images"`
	Seconds    float64 `json:"seconds"`
	ImagesPerS float64 `json:"images_per_s"`
	// Checksum is the order-free sum of the per-sample hashes, 16 hex digits.
	Checksum string `json:"checksum"`
	Workers  int    `json:"workers"`
	Torch    string `json:"torch"`
}

// parseEpoch reads loader.py's output: the last line that is a JSON object
// (anything a library printed before it is ignored).
func parseEpoch(out []byte) (Epoch, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e Epoch
		dec := json.NewDecoder(strings.NewReader(line))
		if err := dec.Decode(&e); err != nil {
			return Epoch{}, fmt.Errorf("loader: bad result line %q: %w", line, err)
		}
		if e.Images <= 0 || e.Seconds <= 0 {
			return Epoch{}, fmt.Errorf("loader: result without images or time: %q", line)
		}
		if _, err := strconv.ParseUint(e.Checksum, 16, 64); err != nil || len(e.Checksum) != 16 {
			return Epoch{}, fmt.Errorf("loader: bad checksum %q", e.Checksum)
		}
		return e, nil
	}
	return Epoch{}, errors.New("loader: no result line in its output")
}

// Loader runs loader.py with one Python interpreter.
type Loader struct {
	Python string // interpreter with torch and torchvision (and boto3 for S3)
	Script string // path of loader.py
}

// LoadArgs says what one epoch reads: Dir (ImageFolder) or Bucket and
// Prefix (boto3 in the workers at Endpoint).
type LoadArgs struct {
	Dir                      string
	Bucket, Prefix, Endpoint string
	Workers                  int
	Seed                     uint64
	// Env is added to the environment (the S3 credentials).
	Env []string
}

// argv is loader.py's command line for a (never a credential).
func (a LoadArgs) argv(script string) []string {
	args := []string{script, "--workers", strconv.Itoa(a.Workers), "--seed", strconv.FormatUint(a.Seed, 10)}
	if a.Bucket != "" {
		args = append(args, "--s3-bucket", a.Bucket, "--endpoint-url", a.Endpoint)
		if a.Prefix != "" {
			args = append(args, "--s3-prefix", a.Prefix)
		}
		return args
	}
	return append(args, "--data", a.Dir)
}

// Run runs one epoch.
func (l Loader) Run(ctx context.Context, a LoadArgs) (Epoch, error) {
	cmd := exec.CommandContext(ctx, l.Python, a.argv(l.Script)...)
	cmd.Env = append(os.Environ(), a.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Epoch{}, fmt.Errorf("loader %s: %v: %s", strings.Join(a.argv(l.Script), " "), err, tail(stderr.String(), 2000))
	}
	return parseEpoch(stdout.Bytes())
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// FindPython returns the first interpreter that imports torch and
// torchvision: want when given, else Debian's /usr/bin/python3 (where
// apt's python3-torch lives), else python3 on the PATH.
func FindPython(want string) (string, error) {
	cands := []string{want}
	if want == "" {
		cands = []string{"/usr/bin/python3", "python3"}
	}
	var errs []error
	for _, c := range cands {
		out, err := exec.Command(c, "-c", "import torch, torchvision, PIL").CombinedOutput()
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %v: %s", c, err, tail(strings.TrimSpace(string(out)), 200)))
	}
	return "", fmt.Errorf("no python3 with torch and torchvision (apt-get install python3-torch python3-torchvision python3-boto3): %w", errors.Join(errs...))
}
