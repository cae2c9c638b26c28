package main

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/epochfs/epochfs/internal/datagen"
)

// writeDataset writes the benchmark's JPEG tree (datagen.JPEGSpec: class
// directories of decodable JPEGs, ~10 KB–1 MB) under dir, replacing what
// was there, and returns its slash-separated paths and total size.
func writeDataset(dir string, spec datagen.JPEGSpec) ([]string, int64, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, 0, err
	}
	ims, err := datagen.WriteJPEGs(dir, spec, runtime.NumCPU())
	if err != nil {
		return nil, 0, err
	}
	var size int64
	paths := make([]string, len(ims))
	for i, im := range ims {
		paths[i] = im.Path
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(im.Path)))
		if err != nil {
			return nil, 0, err
		}
		size += fi.Size()
	}
	return paths, size, nil
}
