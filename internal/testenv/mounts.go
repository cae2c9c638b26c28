package testenv

import (
	"fmt"
	"sort"
	"strings"

	mountutils "k8s.io/mount-utils"
)

// mountinfoUnescaper undoes the kernel's octal escapes of mount points in
// mountinfo (space, tab, newline, backslash), which k8s.io/mount-utils
// leaves in place.
var mountinfoUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// MountPoints lists the mount points of this process's mount namespace
// (/proc/self/mountinfo), unescaped, in the table's order.
func MountPoints() ([]string, error) {
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("testenv: mount table: %w", err)
	}
	out := make([]string, len(infos))
	for i, m := range infos {
		out[i] = mountinfoUnescaper.Replace(m.MountPoint)
	}
	return out, nil
}

// MountsUnder lists the mount points at or below dir, deepest first (the
// order to unmount them in).
func MountsUnder(dir string) ([]string, error) {
	all, err := MountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}
