package datagen

import (
	"bytes"
	"fmt"
	"image/jpeg"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestJPEGDecodesToPlannedSize(t *testing.T) {
	dir := t.TempDir()
	spec := JPEGSpec{Files: 24, Classes: 4, Seed: 7}
	ims, err := WriteJPEGs(dir, spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ims) != spec.Files {
		t.Fatalf("%d images, want %d", len(ims), spec.Files)
	}
	classes := map[int]int{}
	for _, im := range ims {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(im.Path)))
		if err != nil {
			t.Fatal(err)
		}
		img, err := jpeg.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", im.Path, err)
		}
		if b := img.Bounds(); b.Dx() != im.Width || b.Dy() != im.Height {
			t.Errorf("%s: decoded %dx%d, planned %dx%d", im.Path, b.Dx(), b.Dy(), im.Width, im.Height)
		}
		if dir := fmt.Sprintf("class-%03d/", im.Class); !strings.HasPrefix(im.Path, dir) {
			t.Errorf("%s: class %d, want it under %s", im.Path, im.Class, dir)
		}
		classes[im.Class]++
	}
	if len(classes) != 4 {
		t.Errorf("classes %v, want 4 of them", classes)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", "*.tmp"))
	if len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestJPEGSameSpecSameBytes(t *testing.T) {
	spec := JPEGSpec{Files: 12, Classes: 3, Seed: 11, Quality: 80}
	a, err := WriteJPEGs(t.TempDir(), spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := spec.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same spec planned different images")
	}
	other := spec
	other.Seed++
	c, _ := other.Plan()
	differ := 0
	for i := range a {
		x, err := a[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		y, _ := b[i].Encode()
		if !bytes.Equal(x, y) {
			t.Fatalf("%s: two encodings differ", a[i].Path)
		}
		if z, _ := c[i].Encode(); !bytes.Equal(x, z) {
			differ++
		}
	}
	if differ != len(a) {
		t.Errorf("only %d of %d images differ under another seed", differ, len(a))
	}
}

// TestJPEGSizesLookLikePhotos checks the default spec's spread of file
// sizes: a 300-image draw spans roughly 10 KB–1 MB around a ~100 KB median.
func TestJPEGSizesLookLikePhotos(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 300 JPEGs (~40 MB)")
	}
	dir := t.TempDir()
	ims, err := WriteJPEGs(dir, JPEGSpec{Files: 300, Seed: 1}, runtime.GOMAXPROCS(0))
	if err != nil {
		t.Fatal(err)
	}
	sizes := make([]int, len(ims))
	for i, im := range ims {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(im.Path)))
		if err != nil {
			t.Fatal(err)
		}
		sizes[i] = int(fi.Size())
	}
	slices.Sort(sizes)
	lo, med, hi := sizes[0], sizes[len(sizes)/2], sizes[len(sizes)-1]
	t.Logf("sizes: min %d, median %d, max %d bytes", lo, med, hi)
	if lo < 5_000 || lo > 30_000 {
		t.Errorf("smallest %d bytes, want 5–30 KB", lo)
	}
	if med < 60_000 || med > 160_000 {
		t.Errorf("median %d bytes, want 60–160 KB", med)
	}
	if hi < 400_000 || hi > 1_500_000 {
		t.Errorf("largest %d bytes, want 400 KB–1.5 MB", hi)
	}
	if hi < 20*lo {
		t.Errorf("sizes span only %d..%d bytes, want a ≥ 20× spread", lo, hi)
	}
}

func TestJPEGPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec JPEGSpec
		want string
	}{
		{"no files", JPEGSpec{}, "0 files"},
		{"negative files", JPEGSpec{Files: -1}, "-1 files"},
		{"negative classes", JPEGSpec{Files: 1, Classes: -2}, "-2 classes"},
		{"too many classes", JPEGSpec{Files: 1, Classes: 1001}, "1001 classes"},
		{"negative median", JPEGSpec{Files: 1, MedianPixels: -5}, "median pixels -5"},
		{"quality over 100", JPEGSpec{Files: 1, Quality: 101}, "quality 101"},
		{"negative quality", JPEGSpec{Files: 1, Quality: -1}, "quality -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ims, err := tc.spec.Plan()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan() = %d images, %v; want an error containing %q", len(ims), err, tc.want)
			}
			if _, err := WriteJPEGs(t.TempDir(), tc.spec, 2); err == nil {
				t.Error("WriteJPEGs succeeded")
			}
		})
	}
	if _, err := (Image{Path: "x.jpg"}).Encode(); err == nil {
		t.Error("Encode of a 0x0 image succeeded")
	}
}
