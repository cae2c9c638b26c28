package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/units"
)

// TestSizeFlagsHelp: every size flag of cachefs is a units.Size value, so
// --help reads "--flag SIZE … (default …)" and a bad value is a usage
// error (exit 2) at flag parsing, with the grammar's message.
func TestSizeFlagsHelp(t *testing.T) {
	wholeDef, blockDef := units.FormatSize(cache.DefaultWholeFileMax), units.FormatSize(cache.DefaultBlockSize)
	manDef, listDef := units.FormatSize(manifest.DefaultMaxMemory), units.FormatSize(fusefs.DefaultMaxListingMemory)
	for _, tc := range []struct {
		cmd, flag, def string
	}{
		{"mount", "cache-size", ""},
		{"mount", "whole-file-max", wholeDef},
		{"mount", "block-size", blockDef},
		{"mount", "manifest-max-memory", manDef},
		{"mount", "max-listing-memory", listDef},
		{"prefetch", "cache-size", ""},
		{"prefetch", "whole-file-max", wholeDef},
		{"prefetch", "block-size", blockDef},
		{"prefetch", "manifest-max-memory", manDef},
		{"index", "manifest-max-memory", manDef},
	} {
		t.Run(tc.cmd+"/"+tc.flag, func(t *testing.T) {
			cmd, _, err := newRoot().Find([]string{tc.cmd})
			if err != nil {
				t.Fatal(err)
			}
			var line string
			for _, l := range strings.Split(cmd.Flags().FlagUsages(), "\n") {
				if strings.Contains(l, "--"+tc.flag+" ") {
					line = l
				}
			}
			if !regexp.MustCompile(`^\s+--` + regexp.QuoteMeta(tc.flag) + ` SIZE\s`).MatchString(line) {
				t.Errorf("help line %q: want --%s SIZE", line, tc.flag)
			}
			if def := "(default " + tc.def + ")"; tc.def != "" && !strings.HasSuffix(line, def) {
				t.Errorf("help line %q: want it to end %s", line, def)
			} else if tc.def == "" && strings.Contains(line, "(default ") {
				t.Errorf("help line %q: want no default", line)
			}
			root := newRoot()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs([]string{tc.cmd, "--log-level", "error", "--" + tc.flag, "500m"})
			err = root.Execute()
			want := `invalid argument "500m" for "--` + tc.flag + `" flag: invalid size "500m": "m" is milli`
			if err == nil || !strings.HasPrefix(err.Error(), want) || asExitError(err).code != int(exitcode.Usage) {
				t.Errorf("--%s 500m: %v (exit %d); want exit 2 and an error starting %s", tc.flag, err, asExitError(err).code, want)
			}
		})
	}
}
