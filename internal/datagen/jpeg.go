package datagen

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// JPEGSpec describes a tree of decodable JPEG images, one directory per
// class, like an ImageNet training split: pixel dimensions drawn from a
// log-normal (aspect ratios 3:4..4:3, sides clamped to 64..1024 px), so
// that at the defaults the files span ~10 KB–1 MB around a ~100 KB median.
//
// Each class has its own base hue and stripe orientation, so a tiny CNN
// tells the classes apart after an epoch or two; every pixel carries noise
// (texture), so the JPEGs compress like photos, not like flat colour.
// Zero fields take the documented defaults.
type JPEGSpec struct {
	Files   int    // images, > 0
	Classes int    // class directories; default 10, at most 1000
	Seed    uint64 // same spec, same bytes
	// MedianPixels is the median width×height; default 135,000 (about
	// 420×320), which at Quality 90 gives a ~100 KB median file.
	MedianPixels int
	Quality      int // JPEG quality 1–100; default 90
}

// Image is one planned JPEG. Images come from JPEGSpec.Plan; Encode turns
// one into its bytes.
type Image struct {
	Path          string // slash-separated, relative: "class-003/img-000123.jpg"
	Class         int
	Width, Height int
	Seed          uint64
	NumClasses    int // the spec's Classes: places the class's hue on the colour wheel
	Quality       int // JPEG quality 1–100
}

// Pixel-dimension bounds and the log-normal shape of the pixel area.
const (
	minSide    = 64
	maxSide    = 1024
	areaSigma  = 0.9
	maxClasses = 1000 // class-%03d sorts as ImageFolder numbers the classes
)

func (s JPEGSpec) withDefaults() JPEGSpec {
	s.Classes = cmp.Or(s.Classes, 10)
	s.MedianPixels = cmp.Or(s.MedianPixels, 135_000)
	s.Quality = cmp.Or(s.Quality, 90)
	return s
}

// Validate reports a spec that cannot be generated.
func (s JPEGSpec) Validate() error {
	s = s.withDefaults()
	switch {
	case s.Files <= 0:
		return fmt.Errorf("datagen: jpeg: %d files: want at least 1", s.Files)
	case s.Classes < 0 || s.Classes > maxClasses:
		return fmt.Errorf("datagen: jpeg: %d classes: want 1..%d", s.Classes, maxClasses)
	case s.MedianPixels < 0:
		return fmt.Errorf("datagen: jpeg: median pixels %d: want > 0", s.MedianPixels)
	case s.Quality < 1 || s.Quality > 100:
		return fmt.Errorf("datagen: jpeg: quality %d: want 1..100", s.Quality)
	}
	return nil
}

// Plan validates the spec and returns its images, in generation order
// (image i is in class i mod Classes). It encodes nothing.
func (s JPEGSpec) Plan() ([]Image, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x6a09e667f3bcc908))
	ims := make([]Image, s.Files)
	logMedian := math.Log(float64(s.MedianPixels))
	for i := range ims {
		area := math.Exp(logMedian + areaSigma*rng.NormFloat64())
		aspect := math.Exp((rng.Float64()*2 - 1) * math.Log(4.0/3.0)) // width/height
		w := int(math.Round(math.Sqrt(area * aspect)))
		h := int(math.Round(math.Sqrt(area / aspect)))
		class := i % s.Classes
		ims[i] = Image{
			Path:       fmt.Sprintf("class-%03d/img-%06d.jpg", class, i),
			Class:      class,
			Width:      min(max(w, minSide), maxSide),
			Height:     min(max(h, minSide), maxSide),
			Seed:       rng.Uint64(),
			NumClasses: s.Classes,
			Quality:    s.Quality,
		}
	}
	return ims, nil
}

// Encode returns the image's JPEG bytes: the same Image, the same bytes.
func (im Image) Encode() ([]byte, error) {
	if im.Width <= 0 || im.Height <= 0 {
		return nil, fmt.Errorf("datagen: jpeg %s: size %dx%d", im.Path, im.Width, im.Height)
	}
	q := cmp.Or(im.Quality, 90)
	var buf bytes.Buffer
	buf.Grow(im.Width * im.Height)
	if err := jpeg.Encode(&buf, im.pixels(), &jpeg.Options{Quality: q}); err != nil {
		return nil, fmt.Errorf("datagen: jpeg %s: %w", im.Path, err)
	}
	return buf.Bytes(), nil
}

// pixels paints the image in Y'CbCr 4:2:0 (what image/jpeg encodes without
// converting): the class's hue in the chroma planes, the class's stripe
// orientation in the luma, each jittered per image, plus noise everywhere.
// The inner loops are integer: a phase of 2^32 per stripe period indexes a
// sine table, and each noise draw feeds 8 pixels.
func (im Image) pixels() *image.YCbCr {
	img := image.NewYCbCr(image.Rect(0, 0, im.Width, im.Height), image.YCbCrSubsampleRatio420)
	rng := rand.New(rand.NewPCG(im.Seed, 0xbb67ae8584caa73b))
	k := max(im.NumClasses, 1)
	hue := 2*math.Pi*float64(im.Class)/float64(k) + (rng.Float64()-0.5)*0.6*math.Pi/float64(k)
	sat := 40 + 20*rng.Float64()
	cb0, cr0 := int(128+sat*math.Cos(hue)), int(128+sat*math.Sin(hue))
	// Stripes: orientation from the class, period and phase from the image.
	theta := math.Pi*float64(im.Class)/float64(k) + (rng.Float64()-0.5)*0.2
	period := 6 + 10*rng.Float64()
	const turn = 1 << 32 // one stripe period in phase units
	dx := uint32(int64(math.Cos(theta) / period * turn))
	dy := uint32(int64(math.Sin(theta) / period * turn))
	p0 := uint32(rng.Uint64())
	base := 100 + rng.IntN(50)
	noise := noiseBytes{x: xorshift{s: rng.Uint64() | 1}}
	for y := range im.Height {
		row := img.Y[y*img.YStride : y*img.YStride+im.Width]
		p := p0 + uint32(y)*dy
		for x := range row {
			row[x] = clamp8(base + int(sine[p>>(32-sineBits)]) + noise.centered(48))
			p += dx
		}
	}
	for i := range img.Cb { // chroma rows, the last one of an odd height included
		img.Cb[i] = clamp8(cb0 + noise.centered(16))
		img.Cr[i] = clamp8(cr0 + noise.centered(16))
	}
	return img
}

// sine is 45·sin over one period in 2^sineBits steps: the stripes' profile.
var sine = func() (t [1 << sineBits]int8) {
	for i := range t {
		t[i] = int8(math.Round(45 * math.Sin(2*math.Pi*float64(i)/float64(len(t)))))
	}
	return t
}()

const sineBits = 10

func clamp8(v int) uint8 {
	return uint8(min(max(v, 0), 255))
}

// xorshift is a small, fast noise source.
type xorshift struct{ s uint64 }

func (r *xorshift) next() uint64 {
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return r.s
}

// noiseBytes hands out a xorshift's draws a byte at a time.
type noiseBytes struct {
	x    xorshift
	bits uint64
	left int
}

// centered returns a value roughly uniform in [-a, a].
func (n *noiseBytes) centered(a int) int {
	if n.left == 0 {
		n.bits, n.left = n.x.next(), 8
	}
	b := int(n.bits & 0xff)
	n.bits >>= 8
	n.left--
	return b*(2*a+1)>>8 - a
}

// WriteJPEGs writes the spec's images under dir (created if missing), up to
// workers at once, each to a temporary file renamed into place, and returns
// Plan(). Existing files are overwritten.
func WriteJPEGs(dir string, s JPEGSpec, workers int) ([]Image, error) {
	ims, err := s.Plan()
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(ims))
	for i, im := range ims {
		paths[i] = im.Path
	}
	if err := makeDirs(dir, paths); err != nil {
		return nil, err
	}
	if err := eachParallel(len(ims), workers, func(i int) error { return writeJPEG(dir, ims[i]) }); err != nil {
		return nil, err
	}
	return ims, nil
}

func writeJPEG(dir string, im Image) error {
	b, err := im.Encode()
	if err != nil {
		return err
	}
	p := filepath.Join(dir, filepath.FromSlash(im.Path))
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("datagen: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return errors.Join(fmt.Errorf("datagen: %w", err), os.Remove(tmp))
	}
	return nil
}
