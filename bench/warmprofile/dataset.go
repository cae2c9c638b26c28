package main

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// The dataset: decodable JPEGs in class directories, ImageNet-like. Pixel
// dimensions are log-normal (median 400×350, σ 0.45, clamped to 64–2000),
// content a smooth gradient with per-image noise, so files span ~10 KB to a
// few hundred KB as ImageNet's do. Deterministic: the same flags write the
// same bytes. (Branch wt-jpeg's `bench/gen --format jpeg` is the project's
// generator once merged; this one keeps the profile tool self-contained.)

// datasetSpec says what to write.
type datasetSpec struct {
	Files   int
	Classes int
	Seed    uint64
}

// writeDataset writes spec's JPEGs under root (skipped when root already
// holds a complete dataset of this spec, marked by a stamp file) and
// returns the files' paths relative to root, in name order, and their bytes.
func writeDataset(root string, spec datasetSpec) ([]string, int64, error) {
	stamp := filepath.Join(root, ".warmprofile-"+fmt.Sprintf("%d-%d-%d", spec.Files, spec.Classes, spec.Seed))
	paths := make([]string, spec.Files)
	for i := range paths {
		paths[i] = fmt.Sprintf("class%03d/img%06d.jpg", i%spec.Classes, i)
	}
	if _, err := os.Stat(stamp); err != nil {
		if err := os.RemoveAll(root); err != nil {
			return nil, 0, err
		}
		for i, p := range paths {
			if err := writeJPEG(filepath.Join(root, p), spec.Seed+uint64(i)); err != nil {
				return nil, 0, err
			}
		}
		if err := os.WriteFile(stamp, nil, 0o644); err != nil {
			return nil, 0, err
		}
	}
	var total int64
	for _, p := range paths {
		st, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			return nil, 0, err
		}
		total += st.Size()
	}
	return paths, total, nil
}

// writeJPEG writes one image, all of it decided by seed.
func writeJPEG(path string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x6a7065))
	dim := func(median float64) int {
		return int(math.Min(2000, math.Max(64, median*math.Exp(0.45*rng.NormFloat64()))))
	}
	w, h := dim(400), dim(350)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	base := [3]float64{rng.Float64() * 255, rng.Float64() * 255, rng.Float64() * 255}
	noise := 8 + rng.Float64()*40
	for y := range h {
		for x := range w {
			fx, fy := float64(x)/float64(w), float64(y)/float64(h)
			px := func(c int, k float64) uint8 {
				v := base[c] + 90*math.Sin(k*fx*math.Pi+fy*3) + noise*(rng.Float64()-0.5)
				return uint8(math.Max(0, math.Min(255, v)))
			}
			img.Set(x, y, color.RGBA{px(0, 2), px(1, 3), px(2, 5), 255})
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = jpeg.Encode(bw, img, &jpeg.Options{Quality: 90})
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
