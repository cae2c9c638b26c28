// Command mkimage writes the project's container images as Docker-archive
// tars (`make images`, mk/images.mk; docs/CLUSTER.md) and pushes them to a
// registry (`make image-push`), with package imagebuild
// (go-containerregistry):
//
//	mkimage epochfs -rootfs ROOTFS.tar -bin-dir DIR -ref epochfs/epochfs:TAG -out FILE.tar
//	mkimage test-reader -busybox /bin/busybox -ref epochfs/test-reader:TAG -out FILE.tar
//	mkimage torch-example -rootfs ROOTFS.tar -examples examples/pytorch -ref epochfs/torch-example:TAG -out FILE.tar
//	mkimage push -registry HOST[:PORT][/PATH] [-tag TAG] [-insecure] FILE.tar...
//
// epochfs: two layers, the Debian root filesystem that
// scripts/image-rootfs.sh made (converted once and kept beside it as
// ROOTFS.tar.layer.gz, so a rebuild only writes the binaries layer) and
// DIR's cachefs, cachefs-job, csi-driver and job-controller in
// /usr/local/bin. test-reader: one layer, Debian's static busybox and its
// applets (sh, find, sort, xargs, sha256sum) plus /usr/local/bin/read-dataset.
// torch-example (torch.go): two layers, a Debian root filesystem with
// PyTorch (scripts/image-rootfs.sh with IMAGE_PACKAGES, kept converted
// the same way) and examples/pytorch/ in /opt/epochfs/examples/pytorch.
// push (push.go): each archive's image to REGISTRY/NAME:TAG (crane,
// credentials from the docker config).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// binaries are the files of the epochfs image's binaries layer, from
// -bin-dir, in /usr/local/bin (as the Dockerfile copies them).
var binaries = []string{"cachefs", "cachefs-job", "csi-driver", "job-controller"}

// readDataset is the test-reader's /usr/local/bin/read-dataset.
const readDataset = `#!/bin/sh
# read-dataset DIR [PASSES]: read every file under DIR, in name order, PASSES
# times (default 2), printing "pass N" and then "SHA256  PATH" for each file,
# and "done" at the end. Exits non-zero on the first unreadable file.
set -e
dir=${1:?usage: read-dataset DIR [PASSES]}
passes=${2:-2}
i=1
while [ "$i" -le "$passes" ]; do
	echo "pass $i"
	find "$dir" -type f -print0 | sort -z | xargs -0 -r sha256sum
	i=$((i + 1))
done
echo done
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: mkimage epochfs|test-reader|torch-example|push FLAGS")
	}
	if args[0] == "push" {
		return push(context.Background(), args[1:], os.Stdout)
	}
	fs := flag.NewFlagSet("mkimage "+args[0], flag.ContinueOnError)
	ref := fs.String("ref", "", "image NAME:TAG")
	out := fs.String("out", "", "the Docker-archive tar to write")
	rootfs := fs.String("rootfs", "", "epochfs, torch-example: the root filesystem tar of scripts/image-rootfs.sh")
	examples := fs.String("examples", "", "torch-example: the repository's examples/pytorch directory")
	binDir := fs.String("bin-dir", "", "epochfs: directory holding "+strings.Join(binaries, ", "))
	busybox := fs.String("busybox", "/bin/busybox", "test-reader: Debian's static busybox")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *ref == "" || *out == "" {
		return errors.New("-ref and -out are required")
	}
	start := time.Now()
	var err error
	switch args[0] {
	case "epochfs":
		err = epochfs(*out, *ref, *rootfs, *binDir)
	case "test-reader":
		err = testReader(*out, *ref, *busybox)
	case "torch-example":
		err = torchExample(*out, *ref, *rootfs, *examples)
	default:
		return fmt.Errorf("unknown image %q: want epochfs, test-reader or torch-example", args[0])
	}
	if err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s, %.1f MB, %.1fs\n", *out, *ref, float64(st.Size())/1e6, time.Since(start).Seconds())
	return nil
}

func epochfs(out, ref, rootfs, binDir string) error {
	if rootfs == "" || binDir == "" {
		return errors.New("epochfs: -rootfs and -bin-dir are required")
	}
	base, err := baseLayer(rootfs)
	if err != nil {
		return err
	}
	entries := []imagebuild.Entry{imagebuild.Dir("usr"), imagebuild.Dir("usr/local"), imagebuild.Dir("usr/local/bin")}
	for _, b := range binaries {
		src := filepath.Join(binDir, b)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("epochfs: %w", err)
		}
		entries = append(entries, imagebuild.File("usr/local/bin/"+b, src, 0o755))
	}
	binLayer, err := imagebuild.WriteLayer(out+".bin-layer", entries)
	if err != nil {
		return err
	}
	defer os.Remove(out + ".bin-layer")
	tag := ref[strings.LastIndex(ref, ":")+1:]
	return imagebuild.WriteLayersFile(out, ref, epochfsConfig(tag), base, binLayer)
}

// epochfsConfig is the epochfs image's config, as the Dockerfile sets it
// (TestDockerfileSameRecipe): no entrypoint, root, the manifests set each
// container's command (csi-driver as root, job-controller as 65532).
func epochfsConfig(tag string) v1.Config {
	return v1.Config{
		Cmd:        []string{"/usr/local/bin/cachefs", "--help"},
		Env:        []string{imagebuild.DefaultPath},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":   "epochfs",
			"org.opencontainers.image.version": tag,
		},
	}
}

// baseLayer is the layer of the rootfs tar, made once and kept beside it
// gzip-compressed (ROOTFS.layer.gz); made again when the rootfs tar is
// newer than it. (go-containerregistry hashes it on every build: its
// digest, and its diff ID through a gunzip.)
func baseLayer(rootfs string) (v1.Layer, error) {
	path := rootfs + ".layer.gz"
	rst, err := os.Stat(rootfs)
	if err != nil {
		return nil, fmt.Errorf("base (scripts/image-rootfs.sh): %w", err)
	}
	if lst, err := os.Stat(path); err == nil && !rst.ModTime().After(lst.ModTime()) {
		return imagebuild.ReadLayer(path)
	}
	f, err := os.Open(rootfs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return imagebuild.RootfsLayer(path, f, nil)
}

func testReader(out, ref, busybox string) error {
	entries, err := imagebuild.BusyboxEntries(busybox)
	if err != nil {
		return err
	}
	entries = append(entries, imagebuild.Dir("usr"), imagebuild.Dir("usr/local"), imagebuild.Dir("usr/local/bin"),
		imagebuild.Entry{Name: "usr/local/bin/read-dataset", Mode: 0o755, Data: []byte(readDataset)})
	return imagebuild.WriteEntriesImage(out, ref, v1.Config{Cmd: []string{"/bin/sh"}}, entries)
}
