package cache

import (
	"reflect"
	"testing"
)

func TestFileKeys(t *testing.T) {
	k := func(block int64) Key { return Key{Dataset: "ds", Path: "a/b", Version: "v1", Block: block} }
	cases := []struct {
		name                      string
		size, wholeMax, blockSize int64
		want                      []KeySpan
	}{
		{"empty file is one whole entry", 0, 8, 4, []KeySpan{{k(0), 0, 0}}},
		{"small file is one whole entry", 5, 8, 4, []KeySpan{{k(0), 0, 5}}},
		{"exactly wholeFileMax is whole", 8, 8, 4, []KeySpan{{k(0), 0, 8}}},
		{"one byte over is blocks from 1", 9, 8, 4, []KeySpan{{k(1), 0, 4}, {k(2), 4, 4}, {k(3), 8, 1}}},
		{"exact multiple of the block size", 12, 8, 4, []KeySpan{{k(1), 0, 4}, {k(2), 4, 4}, {k(3), 8, 4}}},
		{"wholeFileMax 0 splits every non-empty file", 3, 0, 4, []KeySpan{{k(1), 0, 3}}},
		{"wholeFileMax 0 keeps empty files whole", 0, 0, 4, []KeySpan{{k(0), 0, 0}}},
		{"block size 1", 3, 2, 1, []KeySpan{{k(1), 0, 1}, {k(2), 1, 1}, {k(3), 2, 1}}},
		{"defaults: 8 MiB is whole", DefaultWholeFileMax, DefaultWholeFileMax, DefaultBlockSize, []KeySpan{{k(0), 0, DefaultWholeFileMax}}},
		{"defaults: 8 MiB + 1 is three blocks", DefaultWholeFileMax + 1, DefaultWholeFileMax, DefaultBlockSize,
			[]KeySpan{{k(1), 0, DefaultBlockSize}, {k(2), DefaultBlockSize, DefaultBlockSize}, {k(3), 2 * DefaultBlockSize, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := FileKeys("ds", "a/b", "v1", tc.size, tc.wholeMax, tc.blockSize)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("FileKeys(size %d, whole %d, block %d) =\n%+v\nwant\n%+v", tc.size, tc.wholeMax, tc.blockSize, got, tc.want)
			}
			var sum int64
			for i, s := range got {
				if s.Offset != sum {
					t.Errorf("span %d starts at %d, want %d (spans must tile the file)", i, s.Offset, sum)
				}
				sum += s.Length
			}
			if sum != tc.size {
				t.Errorf("spans cover %d bytes, the file has %d", sum, tc.size)
			}
		})
	}
}

func TestFileKeysLargeFile(t *testing.T) {
	const size = 10<<30 + 123 // 10 GiB + 123 bytes, default split
	got := FileKeys("ds", "big", "v", size, DefaultWholeFileMax, DefaultBlockSize)
	if want := int64(size/DefaultBlockSize + 1); int64(len(got)) != want {
		t.Fatalf("%d spans, want %d", len(got), want)
	}
	last := got[len(got)-1]
	if last.Key.Block != int64(len(got)) || last.Length != 123 || last.Offset+last.Length != size {
		t.Errorf("last span %+v", last)
	}
	// The block holding byte off is span off/blockSize.
	for _, off := range []int64{0, DefaultBlockSize - 1, DefaultBlockSize, size - 1} {
		s := got[off/DefaultBlockSize]
		if off < s.Offset || off >= s.Offset+s.Length || s.Key.Block != off/DefaultBlockSize+1 {
			t.Errorf("byte %d: span %+v does not hold it", off, s)
		}
	}
}

func TestFileKeysPanicsOnBadInput(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		size, wholeMax, blockSize int64
	}{
		{"negative size", -1, 8, 4},
		{"negative wholeFileMax", 1, -1, 4},
		{"zero block size for a split file", 9, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			FileKeys("ds", "p", "v", tc.size, tc.wholeMax, tc.blockSize)
		})
	}
}
