package cluster

import (
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// BusyboxImage writes a Docker-archive tar of a tiny image holding only
// Debian's static busybox as /bin/busybox, with /bin/sh and every other
// applet linked to it, tagged ref ("NAME:TAG"), into tarPath. Its default
// command is /bin/sh.
func BusyboxImage(tarPath, ref string) error {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("busybox (Debian's busybox-static, scripts/cluster-deps.sh): %w", err)
	}
	entries, err := imagebuild.BusyboxEntries(busybox)
	if err != nil {
		return err
	}
	return imagebuild.WriteEntriesImage(tarPath, ref, v1.Config{Cmd: []string{"/bin/sh"}}, entries)
}

// writePauseImage writes the pod sandbox image PauseImage (the static
// pause binary as /pause) to tarPath.
func writePauseImage(pauseBin, tarPath string) error {
	return imagebuild.WriteEntriesImage(tarPath, strings.TrimPrefix(PauseImage, "docker.io/"),
		v1.Config{Entrypoint: []string{"/pause"}}, []imagebuild.Entry{imagebuild.File("pause", pauseBin, 0o755)})
}
