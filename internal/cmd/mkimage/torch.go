package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/epochfs/epochfs/internal/ociimage"
)

// examplesDir is where the torch-example image holds the repository's
// examples/pytorch/ (train.py): `torchrun /opt/epochfs/examples/pytorch/train.py`.
const examplesDir = "opt/epochfs/examples/pytorch"

// torchExample writes epochfs/torch-example: two layers, the Debian root
// filesystem that scripts/image-rootfs.sh made with IMAGE_PACKAGES
// python3-torch, python3-torchvision and python3-pil (Debian's
// python3-torch ships /usr/bin/torchrun; converted once and kept beside
// the tar, as the epochfs image's base), and examples's regular files
// (byte-compiled caches left out) in /opt/epochfs/examples/pytorch.
func torchExample(out, ref, rootfs, examples string) error {
	if rootfs == "" || examples == "" {
		return errors.New("torch-example: -rootfs and -examples are required")
	}
	base, err := baseLayer(rootfs)
	if err != nil {
		return err
	}
	entries, err := exampleEntries(examples)
	if err != nil {
		return err
	}
	layer, err := ociimage.WriteLayer(out+".examples-layer", entries)
	if err != nil {
		return err
	}
	defer os.Remove(layer.Path)
	tag := ref[strings.LastIndex(ref, ":")+1:]
	return ociimage.WriteFile(out, ref, torchExampleConfig(tag), []ociimage.Layer{base, layer})
}

// exampleEntries are the examples layer's entries: the directories down to
// examplesDir and the tree under dir, without __pycache__ directories and
// .pyc files (a local run of train.py leaves them) and with every file
// readable by all (the job's container may run as any user).
func exampleEntries(dir string) ([]ociimage.Entry, error) {
	tree, err := ociimage.DirEntries(dir, examplesDir)
	if err != nil {
		return nil, fmt.Errorf("torch-example: %w", err)
	}
	var entries []ociimage.Entry
	for p := examplesDir; p != "."; p = path.Dir(p) {
		entries = append(entries, ociimage.Dir(p))
	}
	hasScript := false
	for _, e := range tree {
		if strings.Contains("/"+e.Name+"/", "/__pycache__/") || strings.HasSuffix(e.Name, ".pyc") {
			continue
		}
		if e.Mode.IsDir() {
			e.Mode |= 0o755
		} else if e.Mode.IsRegular() {
			e.Mode |= 0o444
		}
		hasScript = hasScript || e.Name == examplesDir+"/train.py"
		entries = append(entries, e)
	}
	if !hasScript {
		return nil, fmt.Errorf("torch-example: %s has no train.py", dir)
	}
	return entries, nil
}

// torchExampleConfig is the torch-example image's config: no entrypoint,
// root, python3 by default (a TrainingJob sets the command, e.g. torchrun),
// in the examples directory; Python writes no byte-code caches into a
// read-only or shared tree.
func torchExampleConfig(tag string) ociimage.Config {
	return ociimage.Config{
		Cmd:        []string{"python3"},
		Env:        []string{ociimage.DefaultPath, "PYTHONDONTWRITEBYTECODE=1"},
		WorkingDir: "/" + examplesDir,
		Labels: map[string]string{
			"org.opencontainers.image.title":   "torch-example",
			"org.opencontainers.image.version": tag,
		},
	}
}
