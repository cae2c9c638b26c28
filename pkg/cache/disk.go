package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// Names inside a cache directory (see the package doc for the layout).
const (
	lockName      = "LOCK"
	metaName      = "epochfs-cache.json"
	entriesName   = "entries"
	sumSuffix     = ".sum"
	tmpSuffix     = ".tmp"
	formatVersion = 1
	sumMagic      = "epochfs-sum"
	sumAlgo       = "xxh3-128"
	// sumXattr is the extended attribute of an entry's data file that
	// holds its checksum record (the same text as a .sum sidecar).
	sumXattr = "user.epochfs.sum"
	// maxRecord bounds a checksum record; a longer one is malformed.
	maxRecord = 256
)

// errNoXattr: the cache filesystem does not support user xattrs.
var errNoXattr = errors.New("cache: the filesystem does not support user xattrs")

// meta is the content of epochfs-cache.json.
type meta struct {
	FormatVersion int    `json:"format_version"`
	Policy        string `json:"policy"`
	CapacityBytes int64  `json:"capacity_bytes"`
}

func readMeta(dir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("cache: parse %s: %w", filepath.Join(dir, metaName), err)
	}
	return m, nil
}

func writeMeta(dir string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, metaName), append(b, '\n'))
}

// writeFileAtomic writes path through a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("cache: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("cache: write %s: %w", path, err)
	}
	return nil
}

// lockDir takes the exclusive, non-blocking flock on <dir>/LOCK and writes
// our pid into it. flock locks belong to the open file description, so a
// second Open in the same process conflicts exactly like another process.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache: lock %s: %w", dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if pid := readPid(path); pid > 0 {
				return nil, fmt.Errorf("%w: %s is held by pid %d", ErrLocked, dir, pid)
			}
			return nil, fmt.Errorf("%w: %s is held by another store (pid unknown)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("cache: lock %s: %w", dir, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(pid, 0) // the pid is informational only
	}
	return f, nil
}

func unlockDir(f *os.File) error {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return f.Close()
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// formatSum is the content of an entry's .sum sidecar.
func formatSum(h xxh3.Uint128, size int64) []byte {
	return fmt.Appendf(nil, "%s %d %s %016x%016x %d\n", sumMagic, formatVersion, sumAlgo, h.Hi, h.Lo, size)
}

func parseSum(b []byte) (xxh3.Uint128, int64, error) {
	var h xxh3.Uint128
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return h, 0, fmt.Errorf("malformed checksum record %q (no final newline: truncated?)", b)
	}
	f := strings.Fields(string(b))
	if len(f) != 5 || f[0] != sumMagic || f[1] != strconv.Itoa(formatVersion) || f[2] != sumAlgo || len(f[3]) != 32 {
		return h, 0, fmt.Errorf("malformed checksum record %q", b)
	}
	hi, err1 := strconv.ParseUint(f[3][:16], 16, 64)
	lo, err2 := strconv.ParseUint(f[3][16:], 16, 64)
	size, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || size < 0 {
		return h, 0, fmt.Errorf("malformed checksum record %q", b)
	}
	return xxh3.Uint128{Hi: hi, Lo: lo}, size, nil
}

// verifyEntry checks the entry's bytes against its checksum record and
// returns the entry size the record gives. The record is read from the
// open data file itself (its xattr) when it has one, else from the .sum
// sidecar, so it always belongs to the inode being hashed.
func verifyEntry(dataPath string) (int64, error) {
	f, err := os.Open(dataPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rec, err := readRecord(f, dataPath)
	if err != nil {
		return 0, err
	}
	want, size, err := parseSum(rec)
	if err != nil {
		return 0, err
	}
	h := xxh3.New()
	n, err := io.CopyBuffer(h, f, make([]byte, 256<<10))
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("entry holds %d bytes, its checksum record says %d", n, size)
	}
	if got := h.Sum128(); got != want {
		return 0, fmt.Errorf("checksum mismatch: got %016x%016x, want %016x%016x", got.Hi, got.Lo, want.Hi, want.Lo)
	}
	return size, nil
}

// readRecord returns the checksum record of the entry whose data file f
// (at dataPath) is: the file's sumXattr when it has one, else the content
// of dataPath + sumSuffix (entries written without xattrs, and every entry
// written before the record moved into the xattr).
func readRecord(f *os.File, dataPath string) ([]byte, error) {
	buf := make([]byte, maxRecord)
	n, err := unix.Fgetxattr(int(f.Fd()), sumXattr, buf)
	switch {
	case err == nil:
		return buf[:n], nil
	case errors.Is(err, unix.ERANGE):
		return nil, fmt.Errorf("malformed checksum record: xattr %s longer than %d bytes", sumXattr, maxRecord)
	case !errors.Is(err, unix.ENODATA) && !isNoXattr(err):
		return nil, fmt.Errorf("read xattr %s: %w", sumXattr, err)
	}
	return os.ReadFile(dataPath + sumSuffix)
}

// setRecord stores rec as f's checksum record; errNoXattr when the
// filesystem has no user xattrs.
func setRecord(f *os.File, rec []byte) error {
	err := unix.Fsetxattr(int(f.Fd()), sumXattr, rec, 0)
	if isNoXattr(err) {
		return fmt.Errorf("%w: %w", errNoXattr, err)
	}
	return err
}

// hasRecordXattr reports whether the file at p carries a checksum xattr
// (whatever it holds: an empty or garbled one fails verification).
func hasRecordXattr(p string) bool {
	_, err := unix.Lgetxattr(p, sumXattr, nil)
	return err == nil
}

func isNoXattr(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// fileStat is what the scan keeps of an entry's data file.
type fileStat struct {
	size  int64
	mtime time.Time
}

// scanResult is one pass over <dir>/entries.
type scanResult struct {
	data  map[string]fileStat // id -> data file
	xattr map[string]bool     // ids whose data file carries its record (sumXattr)
	sums  map[string]bool     // ids with a .sum sidecar
	tmps  []string            // paths of *.tmp files
	other []string            // paths of names the store does not own; left alone
}

// complete reports whether data file id has a checksum record (xattr or
// sidecar). Whether the record is right is checked when the entry is first
// served (verifyEntry).
func (r *scanResult) complete(id string) bool { return r.xattr[id] || r.sums[id] }

// scanEntries lists entriesDir. Files that vanish during the scan (a live
// store evicting, or renaming a tmp file) are skipped, so it is safe to run
// against a directory in use.
func scanEntries(entriesDir string) (*scanResult, error) {
	r := &scanResult{data: map[string]fileStat{}, xattr: map[string]bool{}, sums: map[string]bool{}}
	shards, err := os.ReadDir(entriesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cache: scan %s: %w", entriesDir, err)
	}
	for _, sh := range shards {
		shardDir := filepath.Join(entriesDir, sh.Name())
		if !sh.IsDir() || !isShard(sh.Name()) {
			r.other = append(r.other, shardDir)
			continue
		}
		des, err := os.ReadDir(shardDir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cache: scan %s: %w", shardDir, err)
		}
		for _, de := range des {
			name, p := de.Name(), filepath.Join(shardDir, de.Name())
			id, isSum := strings.CutSuffix(name, sumSuffix)
			switch {
			case strings.HasSuffix(name, tmpSuffix):
				r.tmps = append(r.tmps, p)
			case !de.Type().IsRegular() || !isID(id) || id[:2] != sh.Name():
				r.other = append(r.other, p)
			case isSum:
				r.sums[id] = true
			default:
				info, err := de.Info()
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("cache: scan %s: %w", p, err)
				}
				r.data[id] = fileStat{size: info.Size(), mtime: info.ModTime()}
				if hasRecordXattr(p) {
					r.xattr[id] = true
				}
			}
		}
	}
	return r, nil
}

func isShard(name string) bool {
	return len(name) == 2 && isHexLower(name)
}

func isHexLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Info describes a cache directory on disk; see ReadInfo.
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
