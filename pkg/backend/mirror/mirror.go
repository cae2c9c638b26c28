package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Mirror tuning.
const (
	// mirrorMinDown and mirrorMaxDown bound how long a failing replica is
	// tried only as a last resort: 1s after its first failure, doubling
	// with each consecutive failure.
	mirrorMinDown = time.Second
	mirrorMaxDown = time.Minute

	// A read still running after its replica's recent p95 read latency
	// (never less than mirrorHedgeMin) is sent to the next replica as well
	// (hedged); the first good answer wins. Until a replica has
	// mirrorMinSamples reads in its window of the last mirrorWindow, the
	// hedge waits twice its moving average (at least mirrorHedgeMin).
	mirrorHedgeMin   = 20 * time.Millisecond
	mirrorWindow     = 128
	mirrorMinSamples = 16

	// mirrorWarmup is how many reads a replica's first measure averages.
	mirrorWarmup = 8
)

// A healthy replica whose latency was last measured longer ago than
// mirrorRemeasure (because faster ones served every read) gets the next
// read as a probe, so that a replica that was slow for a while is used
// again once it is fast. A variable for tests (SetRemeasure).
var mirrorRemeasure = time.Second

// mirrorBuckets are the upper bounds, in seconds, of the per-replica read
// latency histogram: 0.5 ms … 16 s, as cachefs_backend_read_seconds.
var mirrorBuckets = func() []float64 {
	b := make([]float64, 16)
	for i := range b {
		b[i] = 0.0005 * float64(int(1)<<i)
	}
	return b
}()

// mirrorBackend serves one dataset stored identically in several replicas.
// Reads go to the fastest healthy replica (by a moving average of its
// latency; a replica with fewer than mirrorWarmup measures, or none for
// mirrorRemeasure, is tried first, one read at a time, so that it gets
// measured); Stat and List go to the first healthy replica in URL order, so that the
// versions they report do not flip between replicas. Every call fails over
// to the next replica on an I/O error; a failing replica is tried last for
// a while (1s, doubling up to 1min while it keeps failing). Answers that are about the
// dataset rather than the replica (ErrNotExist, ErrNotDir, ErrIsDir,
// ErrInvalidPath, ErrChanged, io.EOF, context errors) are returned as is.
//
// Hedged reads: a read still unanswered after its replica's recent p95
// latency (at least mirrorHedgeMin) is sent to the next healthy replica
// too, once (to the next one even if it is down when the first one's last
// call failed too); the first good answer is returned and the other read
// canceled. Each attempt reads into a buffer of its own, so a loser never
// writes into the caller's buffer.
//
// Versions: a file's version is "R:SIZE:V", where R is the index of the
// replica that listed it (0 while the first replica is healthy) and V that
// replica's own version. A read with
// that version goes to replica R with V; another replica (a failover, a
// hedge, or simply the faster one) is first asked with V too when it is of
// the same kind (S3 replicas of the same bytes usually share the ETag), and
// else, or when that answers ErrChanged, must report the same SIZE by Stat
// and is read at its own version (replicas must agree on size). A replica that disagrees on a file's size, or whose bytes of a
// whole file do not match the checksum given by SetChecksums (a manifest's
// sha256), is never asked for that file again by this backend: logged
// once, counted in its Disagreements.
//
// replicas and id are immutable after Open; the health fields of
// each replica are atomics, so no lock is needed.
type mirrorBackend struct {
	replicas []*replica
	id       string
	log      *slog.Logger

	excluded sync.Map                                 // excludeKey → struct{}: files a replica disagrees on
	sums     atomic.Pointer[func(path string) []byte] // SetChecksums
}

// excludeKey names a file a replica disagrees on: by path and the size
// the dataset gives it (-1 for reads without a version), so that a file
// rewritten at another size, once listed again, is asked of it again.
type excludeKey struct {
	replica int
	path    string
	size    int64
}

var (
	_ backend.Backend      = (*mirrorBackend)(nil)
	_ backend.RetryCounter = (*mirrorBackend)(nil)
	_ backend.SkipCounter  = (*mirrorBackend)(nil)

	_ backend.ReplicaStatser = (*mirrorBackend)(nil)
	_ backend.ChecksumSetter = (*mirrorBackend)(nil)
)

// OpenFunc opens one replica of a mirror (package all passes its Open: this
// package cannot import the other backends' wiring without a cycle).
type OpenFunc func(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error)

// Open opens every replica of src with open. A replica that cannot be
// reached is logged and left out, as long as at least one opens: a mirror
// exists to survive the loss of a place. A replica of a kind this build
// cannot open (ErrUnsupported) fails the whole open: that is a
// configuration error. The Backend serves every call from the fastest
// healthy replica and fails over on I/O errors; a replica that disagrees on
// a file's size is never used for that file.
func Open(ctx context.Context, src source.Source, opts backend.Options, open OpenFunc) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if len(src.Replicas) < 2 {
		return nil, fmt.Errorf("backend: open %s: %w: a mirror needs at least 2 replicas", src, source.ErrInvalidURL)
	}
	m := &mirrorBackend{id: src.String(), log: opts.Logger.With(slog.String("backend", "mirror"))}
	var errs []error
	for i, rs := range src.Replicas {
		if rs.Kind == source.KindMirror {
			return nil, fmt.Errorf("backend: open %s: %w: a mirror cannot contain another mirror", src, source.ErrInvalidURL)
		}
		b, err := open(ctx, rs, opts)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, backend.ErrUnsupported) || errors.Is(err, source.ErrInvalidURL) {
				// A canceled open or a configuration error: fail loudly.
				m.Close()
				return nil, fmt.Errorf("backend: open %s: replica %d: %w", src, i, err)
			}
			m.log.Warn("mirror replica unavailable, continuing without it",
				slog.Int("replica", i), slog.String("source", rs.String()), slog.String("error", err.Error()))
			errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
			continue
		}
		m.replicas = append(m.replicas, &replica{b: b, index: i, name: rs.String(), kind: rs.Kind})
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
		n += backend.Retries(r.b)
	}
	return n
}

// Skipped implements SkipCounter: the sum over the replicas.
func (m *mirrorBackend) Skipped() int64 {
	var n int64
	for _, r := range m.replicas {
		n += backend.Skipped(r.b)
	}
	return n
}

// authoritative reports errors that describe the dataset or the call, not
// the replica: they are returned without failing over. (The caller's
// context ending is checked separately: a replica's own timeouts do fail
// over.) A listing over a cap (ErrListTooLarge) is one: the next replica
// holds the same directory, and listing it again would double what the
// caller's caps allow.
func authoritative(err error) bool {
	return err == io.EOF || errors.Is(err, backend.ErrNotExist) || errors.Is(err, backend.ErrNotDir) ||
		errors.Is(err, backend.ErrIsDir) || errors.Is(err, backend.ErrInvalidPath) || errors.Is(err, backend.ErrChanged) ||
		errors.Is(err, backend.ErrListTooLarge)
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
		r.requests.Add(1)
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
		r.errCount.Add(1)
		m.log.Warn("mirror replica failed, trying the next one", slog.String("op", op),
			slog.String("path", strconv.Quote(p)), slog.Int("replica", r.index), slog.String("error", err.Error()))
		errs = append(errs, fmt.Errorf("replica %d: %w", r.index, err))
	}
	return fmt.Errorf("mirror: %s %q: every replica failed: %w", op, p, errors.Join(errs...))
}

func mirrorVersion(r *replica, e backend.Entry) string {
	if e.IsDir {
		return ""
	}
	return strconv.Itoa(r.index) + ":" + strconv.FormatInt(e.Size, 10) + ":" + e.Version
}

func (m *mirrorBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	var e backend.Entry
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

func (m *mirrorBackend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	var es []backend.Entry
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

// SetChecksums implements ChecksumSetter.
func (m *mirrorBackend) SetChecksums(sum func(path string) []byte) {
	if sum == nil {
		m.sums.Store(nil)
		return
	}
	m.sums.Store(&sum)
}

// ReplicaStats implements ReplicaStatser, in the order of the mirror URL.
func (m *mirrorBackend) ReplicaStats() []backend.ReplicaStat {
	now := time.Now().UnixNano()
	out := make([]backend.ReplicaStat, 0, len(m.replicas))
	for _, r := range m.replicas {
		s := backend.ReplicaStat{
			Index: r.index, Up: !r.down(now),
			Requests: r.requests.Load(), Errors: r.errCount.Load(), Hedges: r.hedges.Load(),
			HedgeWins: r.hedgeWins.Load(), Served: r.served.Load(), Disagreements: r.disagreements.Load(),
			LatencyBuckets: mirrorBuckets,
			LatencyCounts:  make([]uint64, len(mirrorBuckets)),
			LatencySum:     time.Duration(r.latSumNs.Load()).Seconds(),
		}
		var cum uint64
		for i := range mirrorBuckets {
			cum += uint64(r.buckets[i].Load())
			s.LatencyCounts[i] = cum
		}
		s.LatencyCount = cum + uint64(r.buckets[len(mirrorBuckets)].Load())
		out = append(out, s)
	}
	return out
}
