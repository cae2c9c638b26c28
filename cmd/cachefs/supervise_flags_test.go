package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestSuperviseChildArgs: the supervisor's mount processes get the
// launcher's argv less the flags the supervisor sets per process or keeps
// (their values too, in both spellings).
func TestSuperviseChildArgs(t *testing.T) {
	in := mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt", CacheDir: "/c", CacheSize: 1 << 30,
		CredentialsFD: 3, Takeover: "/c/handover.sock", Supervise: true, MaxRestarts: 4, RecoverFrom: "/h.sock",
		LogLevel: "info"}.Args()
	in = append(in, "--"+mountapi.FlagCredentialsFD+"=5", "--"+mountapi.FlagRecoverFrom+"=/x.sock", "--"+mountapi.FlagSupervise+"=true")
	got := childArgs(in)
	want := mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt", CacheDir: "/c", CacheSize: 1 << 30, LogLevel: "info"}.Args()
	if !slices.Equal(got, want) {
		t.Errorf("childArgs:\n%q\nwant\n%q", got, want)
	}
}

// TestSuperviseFlagCombinations: the combinations refused before anything
// is started, with a usage exit code.
func TestSuperviseFlagCombinations(t *testing.T) {
	base := mountapi.CommandOptions{Source: t.TempDir(), Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 30}
	for _, tc := range []struct {
		name string
		opts func(o *mountapi.CommandOptions)
		want string
	}{
		{"recover-from without supervise", func(o *mountapi.CommandOptions) { o.RecoverFrom = "/h.sock" }, "--recover-from needs --supervise"},
		{"recover-from and takeover", func(o *mountapi.CommandOptions) {
			o.Supervise, o.RecoverFrom, o.Takeover = true, "/h.sock", "/c/handover.sock"
		}, "--recover-from and --takeover: not together"},
		{"supervise and recover-fd", func(o *mountapi.CommandOptions) {
			o.Supervise, o.Extra = true, []string{"--" + mountapi.FlagRecoverFD, "4"}
		}, "--supervise and --recover-fd: not together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.opts(&o)
			var stderr bytes.Buffer
			g := &globalFlags{logLevel: "info", logFormat: "text", stderr: &stderr}
			cmd := newMountCmd(g)
			cmd.SetArgs(o.Args()[1:])
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if code := asExitError(err).code; code != int(exitcode.Usage) || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d (%v), log %q; want %d and %q", code, err, stderr.String(), exitcode.Usage, tc.want)
			}
		})
	}
}
