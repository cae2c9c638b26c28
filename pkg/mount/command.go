package mount

import (
	"fmt"
	"strconv"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// ParseReadaheadFiles parses a --readahead-files value:
// mountapi.ReadaheadFilesAuto (fusefs.ReadaheadFilesAuto) or a number of
// files, 0 or more.
func ParseReadaheadFiles(v string) (int, error) {
	if v == mountapi.ReadaheadFilesAuto {
		return fusefs.ReadaheadFilesAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--%s: %q is neither %q nor a number of files, 0 or more", mountapi.FlagReadaheadFiles, v, mountapi.ReadaheadFilesAuto)
	}
	return n, nil
}
