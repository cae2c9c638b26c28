package main

import (
	"testing"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestUmountMountArgs: umount finds a mount's cache directory in its command
// line, with mount's own flags, paths relative to its working directory.
func TestUmountMountArgs(t *testing.T) {
	abs := mountapi.CommandOptions{Source: "/data", Mountpoint: "/mnt/x", CacheDir: "/var/cache/x", CacheSize: 1 << 30,
		LogFormat: "json"}.Args()
	for _, tc := range []struct {
		name    string
		args    []string
		cwd, mp string
		want    string
		ok      bool
	}{
		{"the launchers' argv", abs, "/", "/mnt/x", "/var/cache/x", true},
		{"another mount point", abs, "/", "/mnt/y", "", false},
		{"relative paths", []string{"mount", "/data", "mnt", "--cache-dir=cache", "--cache-size", "1GiB"}, "/home/u", "/home/u/mnt", "/home/u/cache", true},
		{"flags first", []string{"mount", "--cache-size", "1GiB", "--cache-dir", "/c", "/data", "/m/"}, "/", "/m", "/c", true},
		{"not mount", []string{"prefetch", "/data", "--cache-dir", "/c"}, "/", "/data", "", false},
		{"unknown flag", []string{"mount", "/data", "/m", "--cache-dir", "/c", "--from-the-future"}, "/", "/m", "", false},
	} {
		got, ok := mountArgs(tc.args, tc.cwd, tc.mp)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
