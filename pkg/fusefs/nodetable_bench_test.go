package fusefs

import (
	"path/filepath"
	"testing"
)

// BenchmarkNodeTableAppend: one record appended to the node table (a
// pwrite of ~100 bytes to a file in the page cache, what every new node
// id of a listing mount costs before its reply), with an ImageNet-like
// name and a posix version.
//
//	go test -run '^$' -bench BenchmarkNodeTableAppend ./pkg/fusefs/
func BenchmarkNodeTableAppend(b *testing.B) {
	nt, err := OpenNodeTable(filepath.Join(b.TempDir(), "nodes"), "", NodeTableLimits{MaxRecords: 1 << 30, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	rec := NodeRecord{Parent: 1, Ino: 1<<63 | 12345, Size: 110_000, Mtime: 1_700_000_000_000_000_000,
		Name: "n01440764_10026.JPEG", Version: "1700000000000000000-110000-1700000000000000000-123456789"}
	id := uint64(1)
	for b.Loop() {
		id++
		rec.ID = id
		if err := nt.append(rec); err != nil {
			b.Fatal(err)
		}
	}
}
