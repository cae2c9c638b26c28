package main

import (
	"os"
	"path/filepath"
	"runtime"
)

// writeDataset writes the benchmark's JPEG tree under dir (replacing what
// was there) and returns its slash-separated paths and total size.
func writeDataset(dir string, files int, seed uint64) ([]string, int64, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, 0, err
	}
	paths, err := generateJPEGs(dir, files, seed, runtime.NumCPU())
	if err != nil {
		return nil, 0, err
	}
	var size int64
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return nil, 0, err
		}
		size += fi.Size()
	}
	return paths, size, nil
}
