package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Mirror tuning.
const (
	// mirrorMinDown and mirrorMaxDown bound how long a failing replica is
	// tried only as a last resort: 1s after its first failure, doubling
	// with each consecutive failure.
	mirrorMinDown = time.Second
	mirrorMaxDown = time.Minute
)

// mirrorBackend serves one dataset stored identically in several replicas.
// Reads go to the fastest healthy replica (by a moving average of its
// latency; unmeasured replicas are tried first so that they get measured);
// Stat and List go to the first healthy replica in URL order, so that the
// versions they report do not flip between replicas. Every call fails over
// to the next replica on an I/O error; a failing replica is tried last for
// a while (1s, doubling up to 1min while it keeps failing). Answers that are about the
// dataset rather than the replica (ErrNotExist, ErrNotDir, ErrIsDir,
// ErrInvalidPath, ErrChanged, io.EOF, context errors) are returned as is.
//
// Versions: a file's version is "R:SIZE:V", where R is the index of the
// replica that listed it (0 while the first replica is healthy) and V that
// replica's own version. A read with
// that version goes to replica R with V; when it fails over to another
// replica, that replica must report the same SIZE (replicas must agree on
// size) or it is skipped.
//
// replicas and id are immutable after openMirror; the health fields of
// each replica are atomics, so no lock is needed.
type mirrorBackend struct {
	replicas []*replica
	id       string
	log      *slog.Logger
}

type replica struct {
	b     Backend
	index int
	name  string // the replica's source URL (no credentials)

	ewma      atomic.Int64 // moving average latency, ns; 0 = unmeasured
	failures  atomic.Int64 // consecutive failures
	downUntil atomic.Int64 // unix ns; tried last until then
}

var (
	_ Backend      = (*mirrorBackend)(nil)
	_ RetryCounter = (*mirrorBackend)(nil)
	_ SkipCounter  = (*mirrorBackend)(nil)
)

// openMirror opens every replica. A replica that cannot be reached is
// logged and left out, as long as at least one opens: a mirror exists to
// survive the loss of a place. A replica of a kind this build cannot open
// (ErrUnsupported) fails the whole open: that is a configuration error.
func openMirror(ctx context.Context, src Source, opts Options) (Backend, error) {
	if len(src.Replicas) < 2 {
		return nil, fmt.Errorf("backend: open %s: %w: a mirror needs at least 2 replicas", src, ErrInvalidURL)
	}
	m := &mirrorBackend{id: src.String(), log: opts.Logger.With(slog.String("backend", "mirror"))}
	var errs []error
	for i, rs := range src.Replicas {
		if rs.Kind == KindMirror {
			return nil, fmt.Errorf("backend: open %s: %w: a mirror cannot contain another mirror", src, ErrInvalidURL)
		}
		b, err := Open(ctx, rs, opts)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrInvalidURL) {
				// A canceled open or a configuration error: fail loudly.
				m.Close()
				return nil, fmt.Errorf("backend: open %s: replica %d: %w", src, i, err)
			}
			m.log.Warn("mirror replica unavailable, continuing without it",
				slog.Int("replica", i), slog.String("source", rs.String()), slog.String("error", err.Error()))
			errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
			continue
		}
		m.replicas = append(m.replicas, &replica{b: b, index: i, name: rs.String()})
	}
	if len(m.replicas) == 0 {
		return nil, fmt.Errorf("backend: open %s: no replica could be opened: %w", src, errors.Join(errs...))
	}
	return m, nil
}

func (m *mirrorBackend) ID() string { return m.id }

func (m *mirrorBackend) Close() error {
	var errs []error
	for _, r := range m.replicas {
		errs = append(errs, r.b.Close())
	}
	return errors.Join(errs...)
}

// Retries implements RetryCounter: the sum over the replicas.
func (m *mirrorBackend) Retries() int64 {
	var n int64
	for _, r := range m.replicas {
		n += Retries(r.b)
	}
	return n
}

// Skipped implements SkipCounter: the sum over the replicas.
func (m *mirrorBackend) Skipped() int64 {
	var n int64
	for _, r := range m.replicas {
		n += Skipped(r.b)
	}
	return n
}

// order returns the replicas to try: healthy ones first, then the failing
// ones, soonest to recover first. Healthy replicas come fastest first
// (unmeasured first of all) for reads, and in URL order for metadata, so
// that versions stay stable while the first replica is healthy.
func (m *mirrorBackend) order(forRead bool) []*replica {
	now := time.Now().UnixNano()
	out := slices.Clone(m.replicas)
	slices.SortStableFunc(out, func(a, b *replica) int {
		ad, bd := a.downUntil.Load(), b.downUntil.Load()
		aDown, bDown := ad > now, bd > now
		switch {
		case aDown != bDown:
			if aDown {
				return 1
			}
			return -1
		case aDown:
			return cmpInt64(ad, bd)
		case !forRead:
			return 0 // stable: URL order
		}
		return cmpInt64(a.ewma.Load(), b.ewma.Load())
	})
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *replica) succeeded(d time.Duration) {
	r.failures.Store(0)
	r.downUntil.Store(0)
	old := r.ewma.Load()
	if old == 0 {
		r.ewma.Store(max(int64(d), 1))
		return
	}
	r.ewma.Store(max((7*old+int64(d))/8, 1))
}

func (r *replica) failed() {
	n := r.failures.Add(1)
	down := mirrorMaxDown
	if n < 7 {
		down = min(mirrorMinDown<<(n-1), mirrorMaxDown)
	}
	r.downUntil.Store(time.Now().Add(down).UnixNano())
}

// authoritative reports errors that describe the dataset or the call, not
// the replica: they are returned without failing over. (The caller's
// context ending is checked separately: a replica's own timeouts do fail
// over.)
func authoritative(err error) bool {
	return err == io.EOF || errors.Is(err, ErrNotExist) || errors.Is(err, ErrNotDir) ||
		errors.Is(err, ErrIsDir) || errors.Is(err, ErrInvalidPath) || errors.Is(err, ErrChanged)
}

// try runs fn on the replicas in order until one gives an authoritative
// answer.
func (m *mirrorBackend) try(ctx context.Context, op, p string, fn func(r *replica) error) error {
	var errs []error
	for _, r := range m.order(op == "read") {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mirror: %s %q: %w", op, p, err)
		}
		start := time.Now()
		err := fn(r)
		if ctx.Err() != nil && err != nil {
			return err
		}
		if err == nil || authoritative(err) {
			if err == nil || err == io.EOF {
				r.succeeded(time.Since(start))
			}
			return err
		}
		r.failed()
		m.log.Warn("mirror replica failed, trying the next one", slog.String("op", op),
			slog.String("path", strconv.Quote(p)), slog.Int("replica", r.index), slog.String("error", err.Error()))
		errs = append(errs, fmt.Errorf("replica %d: %w", r.index, err))
	}
	return fmt.Errorf("mirror: %s %q: every replica failed: %w", op, p, errors.Join(errs...))
}

func mirrorVersion(r *replica, e Entry) string {
	if e.IsDir {
		return ""
	}
	return strconv.Itoa(r.index) + ":" + strconv.FormatInt(e.Size, 10) + ":" + e.Version
}

func (m *mirrorBackend) Stat(ctx context.Context, p string) (Entry, error) {
	var e Entry
	err := m.try(ctx, "stat", p, func(r *replica) error {
		var err error
		e, err = r.b.Stat(ctx, p)
		if err == nil {
			e.Version = mirrorVersion(r, e)
		}
		return err
	})
	return e, err
}

func (m *mirrorBackend) List(ctx context.Context, p string) ([]Entry, error) {
	var es []Entry
	err := m.try(ctx, "list", p, func(r *replica) error {
		var err error
		es, err = r.b.List(ctx, p)
		for i := range es {
			es[i].Version = mirrorVersion(r, es[i])
		}
		return err
	})
	return es, err
}

func (m *mirrorBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	origin, size, native := -1, int64(-1), ""
	if version != "" {
		var ok bool
		if origin, size, native, ok = parseMirrorVersion(version); !ok {
			return 0, fmt.Errorf("mirror: read %q: %w (version %q is not a mirror version)", p, ErrChanged, version)
		}
	}
	var n int
	err := m.try(ctx, "read", p, func(r *replica) error {
		v := native
		if version != "" && r.index != origin {
			// Another replica: it must hold the same size; read its own
			// current version so that the read is consistent.
			e, err := r.b.Stat(ctx, p)
			if err != nil {
				if errors.Is(err, ErrNotExist) {
					return fmt.Errorf("replica disagrees: %q missing", p)
				}
				return err
			}
			if e.IsDir || e.Size != size {
				return fmt.Errorf("replica disagrees on the size of %q: %d, want %d", p, e.Size, size)
			}
			v = e.Version
		}
		var err error
		n, err = r.b.ReadAt(ctx, p, v, buf, off)
		return err
	})
	return n, err
}

// parseMirrorVersion splits "R:SIZE:V".
func parseMirrorVersion(v string) (origin int, size int64, native string, ok bool) {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return 0, 0, "", false
	}
	origin, err1 := strconv.Atoi(parts[0])
	size, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || origin < 0 || size < 0 || parts[2] == "" {
		return 0, 0, "", false
	}
	return origin, size, parts[2], true
}
