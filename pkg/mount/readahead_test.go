package mount

import (
	"testing"

	"github.com/epochfs/epochfs/pkg/fusefs"
)

// TestParseReadaheadFiles: --readahead-files takes auto or a number of
// files, 0 or more.
func TestParseReadaheadFiles(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"auto", fusefs.ReadaheadFilesAuto, false},
		{"0", 0, false},
		{"8", 8, false},
		{"1000", 1000, false},
		{"-1", 0, true},
		{"Auto", 0, true},
		{"", 0, true},
		{"8 files", 0, true},
	} {
		got, err := ParseReadaheadFiles(tc.in)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("ParseReadaheadFiles(%q) = %d, %v; want %d (error: %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
