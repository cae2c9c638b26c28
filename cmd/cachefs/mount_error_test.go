package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
)

// TestMountErrorLine: a failed mount on a terminal prints one plain line,
// `cachefs: mount: MESSAGE`; with --log-format json, or when stderr is not
// a terminal (the CSI driver's log file), the failure line stays the
// structured one that exitcode.LastFailure reads back. Exit codes are the
// same.
func TestMountErrorLine(t *testing.T) {
	t.Setenv("TERM", "xterm")
	args := []string{"/nonexistent-source-dir", t.TempDir(), "--cache-dir", t.TempDir(), "--cache-size", "500m"}
	run := func(format string, w io.Writer) error {
		g := &globalFlags{logLevel: "info", logFormat: format, stderr: w}
		cmd := newMountCmd(g)
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		return cmd.Execute()
	}
	ptm, pts, err := pty.Open()
	if err != nil {
		testenv.RequireOrSkip(t, "no pseudo-terminal ("+err.Error()+")", "the test needs /dev/ptmx")
	}
	defer ptm.Close()
	err = run("text", pts)
	pts.Close()
	got, _ := io.ReadAll(ptm) // EIO once pts is closed and drained
	if code := asExitError(err).code; code != int(exitcode.Usage) {
		t.Errorf("exit %d (%v), want %d", code, err, exitcode.Usage)
	}
	want := `cachefs: mount: invalid argument "500m" for "--cache-size" flag: invalid size "500m": "m" is milli in Kubernetes quantities, not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)` + "\r\n"
	if string(got) != want {
		t.Errorf("on a terminal:\n%q\nwant\n%q", got, want)
	}

	for _, tc := range []struct {
		format string
		tty    bool
	}{{"json", true}, {"json", false}, {"text", false}} {
		var out bytes.Buffer
		var w io.Writer = &out
		var ptm io.Reader
		if tc.tty {
			m, s, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			w, ptm = s, m
		}
		err := run(tc.format, w)
		if code := asExitError(err).code; code != int(exitcode.Usage) {
			t.Errorf("%s tty=%v: exit %d, want %d", tc.format, tc.tty, code, exitcode.Usage)
		}
		if tc.tty {
			w.(interface{ Close() error }).Close()
			b, _ := io.ReadAll(ptm)
			out.Write(b)
		}
		switch tc.format {
		case "json":
			f, ok := exitcode.LastFailure(out.Bytes())
			if !ok || f.Code != exitcode.Usage || !strings.Contains(f.Error, `invalid size "500m"`) {
				t.Errorf("json tty=%v: no failure line read back: %+v %v\n%s", tc.tty, f, ok, out.String())
			}
			var line map[string]any
			if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &line); err != nil {
				t.Errorf("json tty=%v: not one JSON line: %v\n%s", tc.tty, err, out.String())
			}
		default:
			if !strings.Contains(out.String(), `msg="mount failed" exitCode=2 reason=invalid`) {
				t.Errorf("text, not a terminal: not the structured failure line:\n%s", out.String())
			}
		}
	}
}
