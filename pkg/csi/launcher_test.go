package csi

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckLaunch: what a mounter accepts to start. The credentials
// descriptor is the mounter's own to name.
func TestCheckLaunch(t *testing.T) {
	logDir := "/state/node/logs"
	ok := launchRequest{Args: []string{"mount", "/src", "/state/node/mnt/ds-a", "--cache-dir", "/c"}, Log: filepath.Join(logDir, "ds-a.log")}
	for _, tc := range []struct {
		name    string
		mutate  func(*launchRequest)
		wantErr string
	}{
		{"mount with credentials", func(r *launchRequest) { r.Env = []string{"AWS_ACCESS_KEY_ID=a", "AWS_SECRET_ACCESS_KEY=s"} }, ""},
		{"another command", func(r *launchRequest) { r.Args[0] = "prefetch" }, "only `cachefs mount"},
		{"unknown variable", func(r *launchRequest) { r.Env = []string{"LD_PRELOAD=/x.so"} }, `"LD_PRELOAD" is not allowed`},
		{"credentials fd", func(r *launchRequest) { r.Args = append(r.Args, "--credentials-fd", "0") }, "--credentials-fd is set by the mounter"},
		{"credentials fd=", func(r *launchRequest) { r.Args = append(r.Args, "--credentials-fd=4") }, "--credentials-fd is set by the mounter"},
		{"log elsewhere", func(r *launchRequest) { r.Log = "/etc/x.log" }, "must be a .log file in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			req.Args = append([]string(nil), ok.Args...)
			tc.mutate(&req)
			err := checkLaunch(req, logDir)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("checkLaunch = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
