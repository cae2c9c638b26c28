package imagebuild

import (
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
)

// BusyboxEntries returns the entries of a root holding only a static
// busybox (Debian's busybox-static; copied from the file busybox) as
// bin/busybox, a bin/<applet> symlink to it for every applet it lists
// (`busybox --list`: sh, sha256sum, find, …), and empty etc, tmp (1777),
// proc, sys and dev.
func BusyboxEntries(busybox string) ([]Entry, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %s --list (Debian's busybox-static): %w", busybox, err)
	}
	entries := []Entry{
		Dir("bin"), Dir("etc"), Dir("proc"), Dir("sys"), Dir("dev"),
		{Name: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		File("bin/busybox", busybox, 0o755),
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			entries = append(entries, Symlink("bin/"+applet, "busybox"))
		}
	}
	return entries, nil
}
