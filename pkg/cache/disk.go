package cache

// disk.go holds everything that touches the files of a cache directory:
// the metadata file and the directory lock, entry files and their checksum
// records (xattr or .sum sidecar), the *.tmp files entries are written
// through, and the rescan that recovers the entries at Open. store.go
// keeps the in-memory index and the policy, and calls in here.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/units"
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
	// KeyScheme is Options.KeyScheme of the last Open ("" for builds from
	// before it existed, which do not write it).
	KeyScheme string `json:"key_scheme,omitempty"`
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

// writeMeta replaces epochfs-cache.json atomically and durably: a synced
// temporary file in dir (renameio names it ".epochfs-cache.json<random>";
// it is not under entries/, so the rescan never sees it), renamed over the
// old one, mode 0600.
func writeMeta(dir string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, metaName)
	err = func() error {
		pf, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(0o600))
		if err != nil {
			return err
		}
		defer func() { _ = pf.Cleanup() }()
		if _, err := pf.Write(append(b, '\n')); err != nil {
			return err
		}
		return pf.CloseAtomicallyReplace() // fsync, close, rename
	}()
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

// makeEntriesDir creates entriesDir and its 256 shard directories, as
// needed.
func makeEntriesDir(entriesDir string) error {
	if err := os.MkdirAll(entriesDir, 0o700); err != nil {
		return fmt.Errorf("cache: create %s: %w", entriesDir, err)
	}
	for i := range 256 {
		shard := filepath.Join(entriesDir, fmt.Sprintf("%02x", i))
		if err := os.Mkdir(shard, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cache: create %s: %w", shard, err)
		}
	}
	return nil
}

// Entry files.

func (s *Store) dataPath(id string) string {
	return filepath.Join(s.entriesDir, id[:2], id)
}

// writeEntry writes data as entry id: into a tmp file that also gets the
// checksum record as its xattr (sumXattr), then renamed into place, so the
// data file and its record appear together, in one rename. On a filesystem
// without user xattrs the record goes to a .sum sidecar instead
// (writeEntrySidecar). On error it removes what it wrote. There is no
// fsync: after a crash an entry may be short, hold garbage or have lost
// its record; the verification of recovered entries before they are first
// served catches all of these.
func (s *Store) writeEntry(id string, data []byte) error {
	rec := formatSum(xxh3.Hash128(data), int64(len(data)))
	if !s.sidecar.Load() {
		err := s.writeEntryXattr(id, data, rec)
		if !errors.Is(err, errNoXattr) {
			return err
		}
		if !s.sidecar.Swap(true) {
			s.log.Info("cache: the cache filesystem has no user xattrs; checksum records go to .sum files", "dir", s.dir, "err", err)
		}
	}
	return s.writeEntrySidecar(id, data, rec)
}

// writeEntryXattr is writeEntry with the record in the data file's xattr,
// set before the data is written: no data written in vain without xattrs.
func (s *Store) writeEntryXattr(id string, data, rec []byte) error {
	dst := s.dataPath(id)
	tmp, err := writeTemp(filepath.Dir(dst), id, data, func(f *os.File) error { return setRecord(f, rec) })
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// writeEntrySidecar is writeEntry with the record in a .sum sidecar: data
// to a tmp file, the record to another, then the record and then the data
// renamed into place, so a data file never exists without its record.
func (s *Store) writeEntrySidecar(id string, data, rec []byte) (err error) {
	dst := s.dataPath(id)
	dir := filepath.Dir(dst)
	var dataTmp, sumTmp string
	defer func() {
		if err != nil {
			for _, p := range []string{dataTmp, sumTmp, dst + sumSuffix} {
				if p != "" {
					_ = os.Remove(p)
				}
			}
		}
	}()
	if dataTmp, err = writeTemp(dir, id, data, nil); err != nil {
		return err
	}
	if sumTmp, err = writeTemp(dir, id+sumSuffix, rec, nil); err != nil {
		return err
	}
	if err := os.Rename(sumTmp, dst+sumSuffix); err != nil {
		return err
	}
	return os.Rename(dataTmp, dst)
}

// writeTemp writes data to a new file in dir named prefix.<random>.tmp,
// after calling prepare (when not nil) on it, closes it and returns its
// name; on error it removes the file.
//
// The entries are not written with renameio (which manifest and the
// metadata file use): its temporary names (".<name><random>") do not end
// in tmpSuffix, so the rescan at Open would not recognise and remove the
// ones a crash leaves behind; and it always fsyncs, while entry writes
// deliberately do not (see writeEntry).
func writeTemp(dir, prefix string, data []byte, prepare func(*os.File) error) (string, error) {
	f, err := os.CreateTemp(dir, prefix+".*"+tmpSuffix)
	if err != nil {
		return "", err
	}
	if prepare != nil {
		err = prepare(f)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// removeFilesLocked removes entry id's data file and sidecar; s.mu is held
// (evictions and drops unlink under it, see Store).
func (s *Store) removeFilesLocked(id string) {
	p := s.dataPath(id)
	for _, f := range []string{p, p + sumSuffix} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cache: cannot remove entry file", "path", f, "err", err)
		}
	}
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

// Rescan.

// recover rebuilds the index from the entries directory.
//
// With drop set, every complete entry is removed instead: its key was made
// under another Options.KeyScheme.
func (s *Store) recover(drop bool) error {
	sc, err := scanEntries(s.entriesDir)
	if err != nil {
		return err
	}
	removed := 0
	remove := func(p string) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cache: cannot remove debris", "path", p, "err", err)
			return
		}
		removed++
	}
	for _, p := range sc.tmps {
		remove(p)
	}
	for _, p := range sc.other {
		s.log.Warn("cache: leaving alone a file the cache does not own", "path", p)
	}
	type recovered struct {
		id string
		fileStat
	}
	var rs []recovered
	dropped := 0
	for id, d := range sc.data {
		switch {
		case !sc.complete(id):
			remove(s.dataPath(id))
		case drop:
			s.removeFilesLocked(id) // (no lock needed: nothing else sees the store yet)
			dropped++
		default:
			rs = append(rs, recovered{id, d})
		}
	}
	for id := range sc.sums {
		// A sidecar is debris without its data file, and redundant (never
		// read: see readRecord) when the data file carries the record.
		if _, ok := sc.data[id]; !ok || sc.xattr[id] {
			remove(s.dataPath(id) + sumSuffix)
		}
	}
	slices.SortFunc(rs, func(a, b recovered) int {
		return cmp.Or(a.mtime.Compare(b.mtime), cmp.Compare(a.id, b.id))
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		s.entries[r.id] = &entry{size: r.size, ready: true}
		s.used += r.size
		s.nready++
		s.evictLocked(s.policy.Restore(r.id, r.size))
	}
	s.log.Info("cache: opened", "dir", s.dir, "policy", s.policyName,
		"capacity", units.FormatSize(s.capacity), "entries", s.nready, "used", units.FormatSize(s.used),
		"removed_debris", removed, "evicted", s.evictions.Load(), "dropped_other_key_scheme", dropped)
	return nil
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
