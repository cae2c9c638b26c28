package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// examplesDir is where the torch-example image holds the repository's
// examples/pytorch/ (train.py): `torchrun /opt/epochfs/examples/pytorch/train.py`.
const examplesDir = "opt/epochfs/examples/pytorch"

// torchrun is the image's /usr/local/bin/torchrun, ahead of Debian's
// /usr/bin/torchrun in PATH: torch 1.13's launcher fails on Debian 12's
// Python 3.11 before it starts a worker (its Std.from_str("0") is None), and
// examples/pytorch/torchrun.py runs torch.distributed.run with that one
// conversion fixed, so users' and the controller's `torchrun` commands work.
const torchrun = `#!/bin/sh
exec python3 /` + examplesDir + `/torchrun.py "$@"
`

// torchExample writes epochfs/torch-example: two layers, the Debian root
// filesystem that scripts/image-rootfs.sh made with IMAGE_PACKAGES
// python3-torch, python3-torchvision and python3-pil (converted once and
// kept beside the tar, as the epochfs image's base), and a layer of
// examples's files (not its Go test, not byte-compiled caches) in
// /opt/epochfs/examples/pytorch with /usr/local/bin/torchrun.
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
	layer, err := imagebuild.WriteLayer(out+".examples-layer", entries)
	if err != nil {
		return err
	}
	defer os.Remove(out + ".examples-layer")
	tag := ref[strings.LastIndex(ref, ":")+1:]
	return imagebuild.WriteLayersFile(out, ref, torchExampleConfig(tag), base, layer)
}

// exampleEntries are the examples layer's entries: the directories down to
// examplesDir and the tree under dir, without __pycache__ directories and
// .pyc files (a local run of train.py leaves them) or .go files (the
// example's CI test), every file readable by all (the job's container may
// run as any user); and /usr/local/bin/torchrun. dir must hold train.py
// and torchrun.py.
func exampleEntries(dir string) ([]imagebuild.Entry, error) {
	tree, err := imagebuild.DirEntries(dir, examplesDir)
	if err != nil {
		return nil, fmt.Errorf("torch-example: %w", err)
	}
	var entries []imagebuild.Entry
	for p := examplesDir; p != "."; p = path.Dir(p) {
		entries = append(entries, imagebuild.Dir(p))
	}
	entries = append(entries, imagebuild.Dir("usr"), imagebuild.Dir("usr/local"), imagebuild.Dir("usr/local/bin"),
		imagebuild.Entry{Name: "usr/local/bin/torchrun", Mode: 0o755, Data: []byte(torchrun)})
	scripts := 0
	for _, e := range tree {
		if strings.Contains("/"+e.Name+"/", "/__pycache__/") || strings.HasSuffix(e.Name, ".pyc") || strings.HasSuffix(e.Name, ".go") {
			continue
		}
		if e.Mode.IsDir() {
			e.Mode |= 0o755
		} else if e.Mode.IsRegular() {
			e.Mode |= 0o444
		}
		if e.Name == examplesDir+"/train.py" || e.Name == examplesDir+"/torchrun.py" {
			scripts++
		}
		entries = append(entries, e)
	}
	if scripts != 2 {
		return nil, fmt.Errorf("torch-example: %s lacks train.py or torchrun.py", dir)
	}
	return entries, nil
}

// torchExampleConfig is the torch-example image's config: no entrypoint,
// root, python3 by default (a TrainingJob sets the command, e.g. torchrun),
// in the examples directory; Python writes no byte-code caches into a
// read-only or shared tree.
func torchExampleConfig(tag string) v1.Config {
	return v1.Config{
		Cmd:        []string{"python3"},
		Env:        []string{imagebuild.DefaultPath, "PYTHONDONTWRITEBYTECODE=1"},
		WorkingDir: "/" + examplesDir,
		Labels: map[string]string{
			"org.opencontainers.image.title":   "torch-example",
			"org.opencontainers.image.version": tag,
		},
	}
}
