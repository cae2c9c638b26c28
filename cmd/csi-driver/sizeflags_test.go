package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestSizeFlagsHelp: the driver's sizes and budgets are flag values
// (units.Size, csi.CacheBudget): their help names SIZE or SIZE|PERCENT
// with the default, and a bad value fails flag parsing with the grammar's
// message (the flag package then exits 2).
func TestSizeFlagsHelp(t *testing.T) {
	for _, tc := range []struct{ flag, typ, def, bad, msg string }{
		{"default-cache-size", "SIZE", "10GiB", "500m", `invalid size "500m": "m" is milli`},
		{"max-cache-size", "SIZE", "1TiB", "-1", `invalid size "-1": negative`},
		{"max-inline-cache-size", "SIZE", "", "lots", `invalid size "lots"`},
		{"mount-log-max-size", "SIZE", "10MiB", "500m", `invalid size "500m"`},
		{"cache-root-budget", "SIZE|PERCENT", "80%", "120%", `a percentage must be a whole number from 1% to 100%`},
		{"max-namespace-cache-bytes", "SIZE|PERCENT", "50%", "50.5%", `a percentage must be a whole number from 1% to 100%`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			fs := flag.NewFlagSet("csi-driver", flag.ContinueOnError)
			defineFlags(fs)
			var help bytes.Buffer
			fs.SetOutput(&help)
			fs.PrintDefaults()
			var head, body string
			lines := strings.Split(help.String(), "\n")
			for i, l := range lines {
				if strings.HasPrefix(l, "  -"+tc.flag+" ") && i+1 < len(lines) {
					head, body = l, lines[i+1]
				}
			}
			if head != "  -"+tc.flag+" "+tc.typ {
				t.Errorf("help line %q: want -%s %s", head, tc.flag, tc.typ)
			}
			if tc.def != "" && !strings.HasSuffix(body, "(default "+tc.def+")") {
				t.Errorf("help %q: want (default %s)", body, tc.def)
			} else if tc.def == "" && strings.Contains(body, "(default ") {
				t.Errorf("help %q: want no default", body)
			}
			fs.SetOutput(io.Discard)
			err := fs.Parse([]string{"--" + tc.flag, tc.bad})
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "-"+tc.flag) {
				t.Errorf("--%s %s: %v, want an error naming the flag and saying %s", tc.flag, tc.bad, err, tc.msg)
			}
		})
	}
	fs := flag.NewFlagSet("csi-driver", flag.ContinueOnError)
	f := defineFlags(fs)
	if err := fs.Parse([]string{"--max-inline-cache-size=", "--default-cache-size", "2Gi", "--cache-root-budget", "500GiB", "--max-namespace-cache-bytes", "30%"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := f.config(); err != nil || cfg.DefaultCacheSize != 2<<30 || cfg.CacheRootBudget.Bytes != 500<<30 || cfg.MaxNamespaceCacheBytes.Percent != 30 || cfg.MaxCacheSize != 1<<40 || cfg.MaxInlineCacheSize != 0 {
		t.Errorf("parsed %+v, %v", cfg, err)
	}
}
