package csi

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/units"
)

// CacheBudget is how much of the cache root the dataset caches may take:
// Bytes when > 0, else Percent of the cache root's filesystem size.
type CacheBudget struct {
	Bytes   int64
	Percent int
}

// PercentSchemaPattern is the chart's JSON-schema pattern for a
// percentage ParseCacheBudget takes (values.schema.json, $defs/percent; a
// test checks they are the same): a whole number from 1 to 100, then "%".
const PercentSchemaPattern = `^([1-9][0-9]?|100)%$`

// ParseCacheBudget reads a budget: a size (pkg/units: 500GiB, 2Ti) or a
// percentage of the cache root's filesystem (80%).
func ParseCacheBudget(s string) (CacheBudget, error) {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 100 {
			return CacheBudget{}, fmt.Errorf("cache root budget %q: a percentage must be a whole number from 1%% to 100%%", s)
		}
		return CacheBudget{Percent: n}, nil
	}
	b, err := units.ParseSize(s)
	if err != nil {
		return CacheBudget{}, fmt.Errorf("cache root budget: %w", err)
	}
	if b <= 0 {
		return CacheBudget{}, fmt.Errorf("cache root budget %q: must be more than 0", s)
	}
	return CacheBudget{Bytes: b}, nil
}

func (b CacheBudget) String() string {
	if b.Bytes > 0 {
		return units.FormatSize(b.Bytes)
	}
	return strconv.Itoa(b.Percent) + "%"
}

// Set parses v with ParseCacheBudget: with Type, a CacheBudget is a flag
// value (flag.Value, pflag.Value), refused at flag parsing when bad.
func (b *CacheBudget) Set(v string) error {
	nb, err := ParseCacheBudget(v)
	if err != nil {
		return err
	}
	*b = nb
	return nil
}

// Type is the placeholder of the value in --help: a size or a percentage.
func (*CacheBudget) Type() string { return "SIZE|PERCENT" }

// budget keeps the node's dataset caches within the cache root's budget
// and the number of mount processes within its cap.
//
// Every dataset mount that runs or is starting holds a reservation of its
// cacheSize (what its NR cache may grow to). The caches of datasets no
// longer staged stay on disk for their next stage, and count with the bytes
// they hold; they are removed oldest first when a new reservation needs
// their room, and by the health loop once idle for longer than retention.
// An idle cache's release time and size are kept in <state>/node/idle/<key>.
//
// mu guards reserved and holds; it is taken with a dataset lock held, never with
// nodeState.mu held, and it is held while idle caches are measured or
// removed, so that a cache is never removed while a mount of it starts (a
// start reserves first).
type budget struct {
	root      string // the cache root: one directory per dataset key
	idleDir   string // <state>/node/idle
	limit     CacheBudget
	maxMounts int           // 0: no cap
	nsBytes   CacheBudget   // most cache bytes per namespace: a size or a percentage of limit (nsbudget.go)
	nsMounts  int           // most dataset mounts per namespace; 0: no cap
	retention time.Duration // 0: idle caches are kept until their room is needed
	log       *slog.Logger

	mu       sync.Mutex
	reserved map[string]int64   // by dataset key: cacheSize of mounts that run or start
	holds    map[string]*nsHold // by dataset key: the namespaces charged for it (nsbudget.go)
}

// idleRecord is the content of <state>/node/idle/<key>.
type idleRecord struct {
	Since time.Time `json:"since"`
	Bytes int64     `json:"bytes"`
}

// bytes returns the budget in bytes for the cache root's filesystem now.
func (b *budget) bytes() (int64, error) {
	if b.limit.Bytes > 0 {
		return b.limit.Bytes, nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(b.root, &st); err != nil {
		return 0, fmt.Errorf("csi: cache root %s: %w", b.root, err)
	}
	return int64(st.Blocks) * st.Bsize / 100 * int64(b.limit.Percent), nil
}

// adopt records the reservation of a mount recorded before a restart.
func (b *budget) adopt(key string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved[key] = size
	_ = removeFile(filepath.Join(b.idleDir, key))
}

// reserve makes room for a new mount of dataset key with a cache of size,
// removing idle caches oldest first if that is what it takes. It refuses
// with ResourceExhausted when the mount cap is reached or the budget cannot
// hold size even with every idle cache removed (none is removed then).
func (b *budget) reserve(key string, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.reserved[key]; ok {
		return nil
	}
	if b.maxMounts > 0 && len(b.reserved) >= b.maxMounts {
		return status.Errorf(codes.ResourceExhausted, "this node already runs %d dataset mounts, its cap (--max-mounts): unstage a volume first", len(b.reserved))
	}
	limit, err := b.bytes()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	var live int64
	for _, s := range b.reserved {
		live += s
	}
	idle := b.idleCaches(key)
	var held int64
	for _, c := range idle {
		held += c.Bytes
	}
	if live+size > limit {
		return status.Errorf(codes.ResourceExhausted, "a %s cache does not fit in this node's cache root budget of %s (--cache-root-budget %s): %s are reserved by %d running dataset mounts",
			units.FormatSize(size), units.FormatSize(limit), b.limit, units.FormatSize(live), len(b.reserved))
	}
	for _, c := range idle { // oldest first
		if live+held+size <= limit {
			break
		}
		if err := os.RemoveAll(filepath.Join(b.root, c.key)); err != nil {
			return status.Errorf(codes.Internal, "remove the idle cache %s: %v", c.key, err)
		}
		_ = removeFile(filepath.Join(b.idleDir, c.key))
		held -= c.Bytes
		b.log.Info("removed an idle dataset cache to make room", "key", c.key, "bytes", c.Bytes, "idleSince", c.Since, "for", key)
	}
	b.reserved[key] = size
	_ = removeFile(filepath.Join(b.idleDir, key)) // its own cache is in use again
	return nil
}

// release drops key's reservation; its cache, if any, becomes idle now.
func (b *budget) release(key string) {
	// Measured before mu: reading a large cache's entries takes a while,
	// and nothing writes this cache now (its mount process is gone and the
	// caller holds the dataset's lock), so other reservations need not wait.
	dir := filepath.Join(b.root, key)
	var rec *idleRecord
	if _, err := os.Stat(dir); err == nil {
		rec = &idleRecord{Since: time.Now(), Bytes: cacheBytes(dir)}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.reserved, key)
	if rec != nil {
		b.markIdle(key, *rec)
	}
}

// expire removes the idle caches older than the retention. Called by the
// health loop.
func (b *budget) expire(now time.Time) {
	if b.retention <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.idleCaches("") {
		if now.Sub(c.Since) < b.retention {
			break // oldest first
		}
		if err := os.RemoveAll(filepath.Join(b.root, c.key)); err != nil {
			b.log.Warn("cannot remove an expired idle dataset cache", "key", c.key, "err", err)
			continue
		}
		_ = removeFile(filepath.Join(b.idleDir, c.key))
		b.log.Info("removed a dataset cache idle for longer than the retention", "key", c.key, "bytes", c.Bytes, "idleSince", c.Since, "retention", b.retention)
	}
}

type idleCache struct {
	key string
	idleRecord
}

// idleCaches lists the caches under the root that no mount reserves (but
// except), oldest first. One without an idle record (a driver older than
// the budget, a crash between stop and record) is measured and recorded as
// idle from now. Called with mu held.
func (b *budget) idleCaches(except string) []idleCache {
	ents, err := os.ReadDir(b.root)
	if err != nil {
		return nil
	}
	var out []idleCache
	for _, e := range ents {
		key := e.Name()
		if _, used := b.reserved[key]; used || key == except || !e.IsDir() {
			continue
		}
		var rec idleRecord
		if err := readJSON(filepath.Join(b.idleDir, key), &rec); err != nil {
			rec = idleRecord{Since: time.Now(), Bytes: cacheBytes(filepath.Join(b.root, key))}
			b.markIdle(key, rec)
		}
		out = append(out, idleCache{key: key, idleRecord: rec})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

func (b *budget) markIdle(key string, rec idleRecord) {
	if err := writeJSON(filepath.Join(b.idleDir, key), rec); err != nil {
		b.log.Warn("cannot record an idle dataset cache", "key", key, "err", err)
	}
}

// cacheBytes is what the cache directory dir holds: its complete entries,
// or, for a directory that is not a readable cache, the size of its files.
func cacheBytes(dir string) int64 {
	if info, err := cache.ReadInfo(dir); err == nil {
		return info.UsedBytes
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
