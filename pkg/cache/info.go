package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// Info describes a cache directory on disk, computed from its files by
// ReadInfo: what `cachefs stats --cache-dir DIR` prints. Unlike Stats (a
// live Store's counters since its Open), it needs no Store; an entry
// counts when Open's rescan would recover it.
type Info struct {
	Dir           string
	Policy        string // as recorded by the last Open
	CapacityBytes int64  // as recorded by the last Open
	UsedBytes     int64  // bytes of complete entries (data file with its checksum record)
	Entries       int64  // complete entries
	TempFiles     int64  // *.tmp files: writes in progress, or debris Open will remove
	FormatVersion int
}

// ReadInfo describes the cache directory dir from its files alone, for
// `cachefs stats --cache-dir DIR`. It does not take the lock, never
// modifies anything, and works while a Store is using the directory (the
// numbers are then a snapshot that may trail the live Store by in-flight
// writes). A directory without epochfs-cache.json is an error wrapping
// ErrNotCacheDir.
func ReadInfo(dir string) (Info, error) {
	info := Info{Dir: dir}
	m, err := readMeta(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return info, fmt.Errorf("%w: %s has no %s", ErrNotCacheDir, dir, metaName)
	}
	if err != nil {
		return info, err
	}
	info.Policy, info.CapacityBytes, info.FormatVersion = m.Policy, m.CapacityBytes, m.FormatVersion
	sc, err := scanEntries(filepath.Join(dir, entriesName))
	if err != nil {
		return info, err
	}
	for id, d := range sc.data {
		if sc.complete(id) {
			info.Entries++
			info.UsedBytes += d.size
		}
	}
	info.TempFiles = int64(len(sc.tmps))
	return info, nil
}
