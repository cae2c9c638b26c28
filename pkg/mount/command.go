package mount

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/units"
)

// ParseWriteBehind parses a --write-behind value: a size (units.ParseSize),
// or 0 for off.
func ParseWriteBehind(v string) (int64, error) {
	if strings.TrimSpace(v) == "0" {
		return 0, nil
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w (0 turns it off)", mountapi.FlagWriteBehind, err)
	}
	return n, nil
}

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
