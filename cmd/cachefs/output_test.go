package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/prefetch"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the cachefs output tests (testdata/*.golden)")

// golden compares got with testdata/name.golden, or rewrites it under
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update creates it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it)\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// formats is every -o of the commands, the table ("") first.
var formats = append([]string{cliprint.Table}, cliprint.All...)

func formatName(f string) string {
	if f == "" {
		return "table"
	}
	return f
}

// TestPrefetchOutputGolden: the summary in every -o format.
func TestPrefetchOutputGolden(t *testing.T) {
	s := prefetch.Summary{State: prefetch.StateCacheFull, Message: "cache full at 49.9% of the dataset: 10 files (1MiB) did not fit",
		Dataset: "posix:0123456789abcdef", Manifest: true, Files: 20, Bytes: 2 << 20, CachedFiles: 10, CachedBytes: 1 << 20,
		PercentBytes: 49.9, PercentFiles: 50, AlreadyFiles: 2, AlreadyBytes: 4096, FetchedFiles: 8, FetchedBytes: 1<<20 - 4096,
		NotFitFiles: 10, NotFitBytes: 1 << 20, Errors: []string{"a/b: read: EIO"}, FailedFiles: 0,
		CapacityBytes: 1 << 20, UsedBytes: 1 << 20, WholeFileMax: 8 << 20, BlockSize: 4 << 20, Workers: 16, ElapsedSeconds: 2}
	for _, f := range formats {
		var b bytes.Buffer
		if err := reportPrefetch(&b, f, "local", s); err != nil {
			t.Fatalf("-o %q: %v", f, err)
		}
		golden(t, "prefetch-"+formatName(f), b.String())
	}
}

// TestIndexOutputGolden: the index report, written and verified, in
// every -o format.
func TestIndexOutputGolden(t *testing.T) {
	written := indexReport{Source: "file:///data/set", Files: 120, Bytes: 300_000, Dirs: 7, Skipped: 1, ElapsedSeconds: 0.25,
		Checksums: true, Manifests: []storedManifest{{Location: "/data/set/.epochfs/manifest", Bytes: 4100}}}
	verified := indexReport{Source: "file:///data/set", Files: 120, Bytes: 300_000, Dirs: 7, ElapsedSeconds: 0.25,
		Verify: &verifyReport{Manifest: "/m", Drift: true, Missing: []string{"a.jpg"}, New: []string{"new.jpg"},
			Changed: []changeReport{{"b.jpg", "sha256 01ab → 02cd"}}}}
	for name, r := range map[string]indexReport{"index": written, "index-verify": verified} {
		for _, f := range formats {
			var b bytes.Buffer
			if err := cliprint.Print(&b, f, r.output()); err != nil {
				t.Fatalf("-o %q: %v", f, err)
			}
			golden(t, name+"-"+formatName(f), b.String())
		}
	}
}

// TestIndexOutputRun: a real `cachefs index -o json` prints one JSON
// object, snake_case keys only, with the figures of the dataset; a bad -o
// and an old-style `-o FILE` exit 2 and write nothing.
func TestIndexOutputRun(t *testing.T) {
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 30, Classes: 3, MedianSize: 500, MinSize: 1, MaxSize: 2000, Seed: 3})
	out := filepath.Join(t.TempDir(), "m")
	run := func(args ...string) (string, error) {
		root := newRoot()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs(append([]string{"index", src, "--progress", "none", "--log-level", "error"}, args...))
		err := root.ExecuteContext(context.Background())
		return stdout.String(), err
	}
	got, err := run("--out", out, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("-o json: %v\n%s", err, got)
	}
	if m["files"] != float64(len(files)) || m["bytes"] != float64(datagen.TotalSize(files)) {
		t.Errorf("-o json: files %v, bytes %v; want %d, %d", m["files"], m["bytes"], len(files), datagen.TotalSize(files))
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var keys func(v any)
	keys = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snake.MatchString(k) {
					t.Errorf("-o json key %q is not snake_case", k)
				}
				keys(e)
			}
		case []any:
			for _, e := range v {
				keys(e)
			}
		}
	}
	keys(m)
	if _, err := os.Stat(out); err != nil {
		t.Errorf("--out: %v", err)
	}
	for _, args := range [][]string{{"-o", filepath.Join(t.TempDir(), "x")}, {"--out", out, "-o", "table"}, {"--nosuch"}} {
		got, err := run(args...)
		if code := asExitError(err).code; err == nil || code != int(exitcode.Usage) || got != "" {
			t.Errorf("%v: exit %d, %v, stdout %q; want exit 2 and nothing printed", args, code, err, got)
		}
		if args[0] == "-o" && (err == nil || !strings.Contains(err.Error(), "give --out")) {
			t.Errorf("old-style -o FILE: %v, want it to name --out", err)
		}
	}
}

// TestUsageErrorsExit2: an unknown flag, a bad -o and missing arguments
// exit 2 in every cachefs command.
func TestUsageErrorsExit2(t *testing.T) {
	var cases [][]string
	for _, c := range newRoot().Commands() {
		switch c.Name() {
		case "help", "completion", "job": // job: cachefs-job's own (cmd/cachefs-job tests)
			continue
		}
		cases = append(cases, []string{c.Name(), "--no-such-flag"})
	}
	cases = append(cases,
		[]string{"prefetch", "/d", "--cache-dir", "/c", "-o", "table"},
		[]string{"index", "/d", "--out", "/m", "-o", "csv"},
		[]string{"umount"},
		[]string{"index"},
		[]string{"nosuch"},
	)
	for _, args := range cases {
		root := newRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append(args, "--log-level", "error"))
		err := root.Execute()
		if code := asExitError(err).code; err == nil || code != int(exitcode.Usage) {
			t.Errorf("cachefs %q: exit %d (%v), want %d", args, code, err, exitcode.Usage)
		}
	}
}
