package cluster

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/epochfs/epochfs/internal/ociimage"
)

// ImageConfig is the part of an OCI/Docker image config that WriteImageTar
// sets.
type ImageConfig = ociimage.Config

// WriteImageTar writes a one-layer container image in the Docker archive
// format (what `docker save` writes and `ctr images import` reads) to w:
// the layer holds the tree under root (owned by root, modes and symlinks
// kept), tagged ref ("NAME:TAG"; containerd stores a name without a host
// as docker.io/NAME:TAG). No registry is involved. See package ociimage
// for images of several layers.
func WriteImageTar(w io.Writer, root, ref string, cfg ImageConfig) error {
	return ociimage.WriteDirImage(w, root, ref, cfg)
}

// BusyboxImage writes a Docker-archive tar of a tiny image holding only
// Debian's static busybox as /bin/busybox, with /bin/sh and every other
// applet linked to it, tagged ref ("NAME:TAG"), into tarPath. Its default
// command is /bin/sh.
func BusyboxImage(tarPath, ref string) error {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("busybox (Debian's busybox-static, scripts/cluster-deps.sh): %w", err)
	}
	entries, err := ociimage.BusyboxEntries(busybox)
	if err != nil {
		return err
	}
	layer, err := ociimage.WriteLayer(tarPath+".layer", entries)
	if err != nil {
		return err
	}
	defer os.Remove(layer.Path)
	return ociimage.WriteFile(tarPath, ref, ImageConfig{Cmd: []string{"/bin/sh"}}, []ociimage.Layer{layer})
}

// writePauseImage writes the pod sandbox image PauseImage (the static
// pause binary as /pause) to tarPath.
func writePauseImage(pauseBin, tarPath string) error {
	layer, err := ociimage.WriteLayer(tarPath+".layer", []ociimage.Entry{ociimage.File("pause", pauseBin, 0o755)})
	if err != nil {
		return err
	}
	defer os.Remove(layer.Path)
	return ociimage.WriteFile(tarPath, strings.TrimPrefix(PauseImage, "docker.io/"), ImageConfig{Entrypoint: []string{"/pause"}}, []ociimage.Layer{layer})
}
