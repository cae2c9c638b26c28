package csi_test

import (
	"strings"
	"testing"

	mountutils "k8s.io/mount-utils"
)

// mountinfoUnescaper undoes the kernel's octal escapes of mount points.
var mountinfoUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// mountsUnder lists mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range infos {
		if p := mountinfoUnescaper.Replace(m.MountPoint); p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}
