package main

// TEMPORARY until wt-jpeg's internal/datagen.WriteJPEGs is merged: a small
// deterministic JPEG tree (20 classes, log-normal pixel counts).

import (
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

func generateJPEGs(dir string, files int, seed uint64, _ int) ([]string, error) {
	r := rand.New(rand.NewPCG(seed, 1))
	var paths []string
	for i := range files {
		px := math.Exp(math.Log(150_000) + 0.9*r.NormFloat64())
		px = min(max(px, 4_000), 4_000_000)
		aspect := 0.75 + 0.5*r.Float64()
		w := max(int(math.Sqrt(px*aspect)), 16)
		h := max(int(px)/w, 16)
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		c0 := r.IntN(256)
		for y := range h {
			for x := range w {
				n := r.IntN(64)
				img.Set(x, y, color.RGBA{uint8((x*255/w + c0 + n) % 256), uint8((y*255/h + n) % 256), uint8((c0*3 + n) % 256), 255})
			}
		}
		p := fmt.Sprintf("class-%03d/img-%06d.jpg", i%20, i)
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(full)
		if err != nil {
			return nil, err
		}
		err = jpeg.Encode(f, img, &jpeg.Options{Quality: 85})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
