package main

import (
	"bytes"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"
)

// TestCountOpcodes reads go-fuse's request log lines as v2.12 writes them:
// requests, their replies (not counted) and each entry of a batch forget.
func TestCountOpcodes(t *testing.T) {
	log := `rx 2: INIT n0 {7.45 Ra 131072 ASYNC_READ} p0
tx 2:     OK, {7.28 Ra 131072}
rx 4: LOOKUP n1 ["class001"] 9b p25212
tx 4:     OK, {n2 g1 tE=3600s tA=3600s {M040755 SZ=4096}}
rx 6: OPEN n3 {LARGEFILE} p25212
rx 8: IOCTL n3 {Fh 1 TCGETS} p25212
rx 10: RELEASE n3 {Fh 1 LARGEFILE  L0} p0
rx 12: BATCH_FORGET n0 {2 entries} p0
doBatchForget: rx 12 1/2: FORGET n3 {Nlookup=1}
doBatchForget: rx 12 2/2: FORGET n2 {Nlookup=1}
`
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("rx 1: LOOKUP before the offset\n"+log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, end, err := countOpcodes(path, int64(len("rx 1: LOOKUP before the offset\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"INIT": 1, "LOOKUP": 1, "OPEN": 1, "IOCTL": 1, "RELEASE": 1, "BATCH_FORGET": 1, "FORGET": 2}
	if len(got) != len(want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	for op, n := range want {
		if got[op] != n {
			t.Errorf("%s: %d, want %d (all: %v)", op, got[op], n, got)
		}
	}
	if end != fileSize(path) {
		t.Errorf("end offset %d, want the file's size %d", end, fileSize(path))
	}
}

// TestProcCPU reads this process's CPU time, which grows as it computes.
func TestProcCPU(t *testing.T) {
	before, err := readProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	after, err := readProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.sched <= before.sched || x == 0 {
		t.Errorf("schedstat run time %v then %v: did not grow", before.sched, after.sched)
	}
}

// TestWriteJPEG: the dataset's images decode, and the same seed writes the
// same bytes.
func TestWriteJPEG(t *testing.T) {
	dir := t.TempDir()
	var files [2][]byte
	for i := range files {
		p := filepath.Join(dir, "a", "img.jpg")
		if err := writeJPEG(p, 42); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = b
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("seed 42 wrote different bytes twice")
	}
	img, err := jpeg.Decode(bytes.NewReader(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 64 || b.Dy() < 64 || b.Dx() > 2000 || b.Dy() > 2000 {
		t.Errorf("image %v, want each side in 64–2000", b)
	}
}
