package datagen

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestTotalBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"imagenet-like 1000 files, 200 MB", Spec{Files: 1000, TotalBytes: 200_000_000, Seed: 5}},
		{"small files", Spec{Files: 300, TotalBytes: 9_000_000, MinSize: 1000, MaxSize: 150_000, Seed: 2}},
		{"at the lower clamp", Spec{Files: 100, TotalBytes: 100 * 16_000, Seed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Validate(); err != nil {
				t.Fatal(err)
			}
			files := tc.spec.Plan()
			total := TotalSize(files)
			if diff := float64(total-tc.spec.TotalBytes) / float64(tc.spec.TotalBytes); diff > 0.001 || diff < -0.001 {
				t.Errorf("total %d, want %d ± 0.1%% (median %d)", total, tc.spec.TotalBytes, tc.spec.Median())
			}
			s := tc.spec.withDefaults()
			for _, f := range files {
				if f.Size < s.MinSize || f.Size > s.MaxSize {
					t.Fatalf("%s: size %d outside [%d, %d]", f.Path, f.Size, s.MinSize, s.MaxSize)
				}
			}
			if again := tc.spec.Plan(); !reflect.DeepEqual(files, again) {
				t.Error("the same spec planned different files")
			}
		})
	}
}

func TestTotalBytesOutOfReach(t *testing.T) {
	for _, total := range []int64{100*16_000 - 1, 100*5_000_000 + 1} {
		err := Spec{Files: 100, TotalBytes: total}.Validate()
		if err == nil || !strings.Contains(err.Error(), "cannot total") {
			t.Errorf("TotalBytes %d: %v", total, err)
		}
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	s := Spec{Files: 40, Classes: 4, TotalBytes: 2_000_000, Seed: 9}
	a, b := t.TempDir(), t.TempDir()
	fa, err := Write(a, s)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := WriteParallel(b, s, 4) // the parallel writer writes the same bytes
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fa, fb) {
		t.Fatal("plans differ")
	}
	for _, f := range fa {
		x, errA := os.ReadFile(filepath.Join(a, f.Path))
		y, errB := os.ReadFile(filepath.Join(b, f.Path))
		if errA != nil || errB != nil || !bytes.Equal(x, y) || int64(len(x)) != f.Size || sha256.Sum256(x) != Sum(f) {
			t.Fatalf("%s: the two writes differ or do not match the plan (%v, %v)", f.Path, errA, errB)
		}
	}
	if !reflect.DeepEqual(Sums(fa), SumsParallel(fa, 3)) {
		t.Error("SumsParallel differs from Sums")
	}
	for i, size := range s.Sizes() {
		if size != fa[i].Size {
			t.Fatalf("Sizes()[%d] = %d, Plan says %d", i, size, fa[i].Size)
		}
	}
	other := Spec{Files: 40, Classes: 4, TotalBytes: 2_000_000, Seed: 10}.Plan()
	if reflect.DeepEqual(fa, other) {
		t.Error("another seed planned the same files")
	}
}
