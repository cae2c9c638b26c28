package mirror

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// readVersion is a mirror read's expected version, parsed.
type readVersion struct {
	origin int    // the replica whose version it is; -1: any
	size   int64  // the file's size; -1: unknown
	native string // origin's own version; "": any
}

// errDisagree marks a replica whose copy of a file differs from the
// dataset's (size, existence or checksum): it is excluded for that file.
var errDisagree = errors.New("replica disagrees")

// attempt is one replica's answer to one read.
type attempt struct {
	r     *replica
	path  string
	size  int64
	n     int
	err   error
	buf   *[]byte
	d     time.Duration
	hedge bool
}

// bufPool recycles the per-attempt read buffers.
var bufPool sync.Pool // *[]byte

func getBuf(n int) *[]byte {
	if v, ok := bufPool.Get().(*[]byte); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n)
	return &b
}

func putBuf(b *[]byte) { bufPool.Put(b) }

func (m *mirrorBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	rv := readVersion{origin: -1, size: -1}
	if version != "" {
		var ok bool
		if rv.origin, rv.size, rv.native, ok = parseMirrorVersion(version); !ok {
			return 0, fmt.Errorf("mirror: read %q: %w (version %q is not a mirror version)", p, backend.ErrChanged, version)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("mirror: read %q: %w", p, err)
	}
	var cands []*replica
	for _, r := range m.order(true) {
		if _, bad := m.excluded.Load(excludeKey{r.index, p, rv.size}); !bad {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return 0, fmt.Errorf("mirror: read %q: every replica disagrees on this file", p)
	}

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHedgedRead(actx, m, p, rv, len(buf), off, cands)
	defer close(h.done) // runs before cancel: losers see done, then their ctx end
	defer h.timer.Stop()
	h.launch(false)
	h.armHedge()

	var errs []error
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("mirror: read %q: %w", p, ctx.Err())
		case <-h.timer.C:
			if !h.hedged && h.next < len(h.cands) {
				h.hedged = true
				h.launch(true)
			}
		case a := <-h.results:
			h.inflight--
			if err := ctx.Err(); err != nil {
				putBuf(a.buf)
				return 0, fmt.Errorf("mirror: read %q: %w", p, err)
			}
			if a.err == nil || authoritative(a.err) {
				return a.serve(buf)
			}
			m.failedRead(a, p, rv.size)
			errs = append(errs, fmt.Errorf("replica %d: %w", a.r.index, a.err))
			if h.inflight == 0 {
				if h.next >= len(h.cands) {
					return 0, fmt.Errorf("mirror: read %q: every replica failed: %w", p, errors.Join(errs...))
				}
				h.timer.Stop()
				h.launch(false)
				h.armHedge()
			}
		}
	}
}

// serve returns the answer of the attempt that won its read, copied into
// buf, and counts it for its replica.
func (a attempt) serve(buf []byte) (int, error) {
	if a.err == nil || a.err == io.EOF {
		a.r.succeeded(a.d)
		a.r.observe(a.d, true)
	}
	a.r.served.Add(1)
	if a.hedge {
		a.r.hedgeWins.Add(1)
	}
	n := copy(buf, (*a.buf)[:a.n])
	putBuf(a.buf)
	return n, a.err
}

// failedRead accounts for an attempt that failed: a replica that disagrees
// is excluded for the file, any other failure marks the replica failing.
func (m *mirrorBackend) failedRead(a attempt, p string, size int64) {
	putBuf(a.buf)
	if errors.Is(a.err, errDisagree) {
		m.exclude(a.r, p, size, a.err)
		return
	}
	a.r.failed()
	a.r.errCount.Add(1)
	a.r.observe(a.d, false)
	m.log.Warn("mirror replica failed, trying the next one", slog.String("op", "read"),
		slog.String("path", strconv.Quote(p)), slog.Int("replica", a.r.index), slog.String("error", a.err.Error()))
}

// lost accounts for an attempt whose answer came too late: a hedge's
// loser (canceled) or an answer after the read returned.
func (m *mirrorBackend) lost(a attempt) {
	putBuf(a.buf)
	switch {
	case a.err == nil || a.err == io.EOF:
		a.r.succeeded(a.d)
		a.r.observe(a.d, true)
	case errors.Is(a.err, context.Canceled) || errors.Is(a.err, context.DeadlineExceeded):
		// It took at least a.d: let its moving average know, so that a
		// replica that keeps losing stops being picked first.
		old := a.r.ewma.Load()
		switch {
		case old == 0:
			a.r.ewma.Store(max(int64(a.d), 1))
		case int64(a.d) > old:
			a.r.ewma.Store(max((7*old+min(int64(a.d), 4*old))/8, 1))
		}
		a.r.samples.Add(1)
		a.r.measured.Store(time.Now().UnixNano())
	case errors.Is(a.err, errDisagree):
		m.exclude(a.r, a.path, a.size, a.err)
	}
}

// readOne reads from one replica into b, checking that the replica agrees
// with the dataset: the same size as the version's, and for a whole-file
// read the checksum SetChecksums gave (errDisagree otherwise).
func (m *mirrorBackend) readOne(ctx context.Context, r *replica, p string, rv readVersion, b []byte, off int64) (int, error) {
	v, size := rv.native, rv.size
	if rv.origin >= 0 && r.index != rv.origin && m.sameVersionsLikely(r, rv.origin) {
		// Replicas of one kind often give a file the same version (S3: the
		// same bytes uploaded in one part have the same ETag). Equal
		// versions mean equal bytes, so a read with the origin's version
		// needs no Stat first; ErrChanged means this replica's version
		// differs (or the file changed), and the Stat below decides.
		n, err := r.b.ReadAt(ctx, p, rv.native, b, off)
		switch {
		case errors.Is(err, backend.ErrChanged):
			r.versionsDiffer.Add(1)
		case errors.Is(err, backend.ErrNotExist):
			return 0, fmt.Errorf("%w: %q is missing", errDisagree, p)
		default:
			if err == nil || err == io.EOF {
				r.versionsSame.Add(1)
			}
			return n, m.checkSum(p, size, b, off, n, err)
		}
	}
	if rv.origin >= 0 && r.index != rv.origin {
		// Another replica: it must hold the same size; read its own
		// current version so that the read is consistent.
		e, err := r.b.Stat(ctx, p)
		if err != nil {
			if errors.Is(err, backend.ErrNotExist) {
				return 0, fmt.Errorf("%w: %q is missing", errDisagree, p)
			}
			return 0, err
		}
		if e.IsDir || e.Size != rv.size {
			return 0, fmt.Errorf("%w on the size of %q: %d, want %d", errDisagree, p, e.Size, rv.size)
		}
		v = e.Version
	}
	n, err := r.b.ReadAt(ctx, p, v, b, off)
	return n, m.checkSum(p, size, b, off, n, err)
}

// checkSum returns err, or errDisagree when the read covered the whole
// file (of size bytes, -1 when unknown) and its bytes do not match the
// checksum SetChecksums gave for p.
func (m *mirrorBackend) checkSum(p string, size int64, b []byte, off int64, n int, err error) error {
	sum := m.sums.Load()
	if sum == nil || off != 0 || !(err == io.EOF || (err == nil && size >= 0 && int64(n) == size)) {
		return err
	}
	if want := (*sum)(p); len(want) == sha256.Size {
		if got := sha256.Sum256(b[:n]); !bytes.Equal(got[:], want) {
			return fmt.Errorf("%w on the checksum of %q: sha256 %x, want %x", errDisagree, p, got, want)
		}
	}
	return err
}

// sameVersionsLikely tells whether a read from r should first try the
// version the origin replica gave: only between replicas of one kind, and
// only while such tries have not mostly failed.
func (m *mirrorBackend) sameVersionsLikely(r *replica, origin int) bool {
	for _, o := range m.replicas {
		if o.index == origin {
			return o.kind == r.kind && r.versionsDiffer.Load() <= r.versionsSame.Load()+8
		}
	}
	return false
}

// exclude stops reads of p from r, logging it the first time.
func (m *mirrorBackend) exclude(r *replica, p string, size int64, why error) {
	if _, loaded := m.excluded.LoadOrStore(excludeKey{r.index, p, size}, struct{}{}); loaded {
		return
	}
	r.disagreements.Add(1)
	m.log.Error("mirror replica disagrees with the dataset on a file; that file is no longer read from it",
		slog.Int("replica", r.index), slog.String("source", r.name), slog.String("path", strconv.Quote(p)),
		slog.String("error", why.Error()))
}
