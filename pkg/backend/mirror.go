package backend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// again once it is fast. A variable for tests (SetMirrorRemeasure).
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
// replicas and id are immutable after openMirror; the health fields of
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

type replica struct {
	b     Backend
	index int
	name  string // the replica's source URL (no credentials)
	kind  source.Kind

	// Reads with another replica's version that this one took as its own
	// (versionsSame) or answered with ErrChanged (versionsDiffer).
	versionsSame, versionsDiffer atomic.Int64

	ewma      atomic.Int64 // moving average latency, ns; 0 = unmeasured
	probing   atomic.Int32 // probe reads under way (see order)
	measured  atomic.Int64 // unix ns of the last update of ewma
	samples   atomic.Int64 // successes averaged into ewma since it was (re)set
	failures  atomic.Int64 // consecutive failures
	downUntil atomic.Int64 // unix ns; tried last until then

	lat latencyWindow

	// Counters for ReplicaStats.
	requests, errCount, hedges, hedgeWins, served, disagreements atomic.Int64
	buckets                                                      [17]atomic.Int64 // by mirrorBuckets, last = +Inf
	latSumNs, latCount                                           atomic.Int64
}

// latencyWindow keeps a replica's last mirrorWindow read latencies and
// their p95.
type latencyWindow struct {
	mu  sync.Mutex // guards buf and n
	buf [mirrorWindow]time.Duration
	n   int
	p95 atomic.Int64 // ns; 0 until mirrorMinSamples reads were seen
}

func (w *latencyWindow) add(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf[w.n%mirrorWindow] = d
	w.n++
	if w.n < mirrorMinSamples || (w.n > mirrorWindow && w.n%8 != 0) {
		return
	}
	k := min(w.n, mirrorWindow)
	s := slices.Clone(w.buf[:k])
	slices.Sort(s)
	w.p95.Store(int64(s[(k*95+99)/100-1]))
}

// hedgeDelay is how long a read from r may run before it is hedged: its
// recent p95; before it has enough reads for one, twice its moving
// average; never less than mirrorHedgeMin.
func (r *replica) hedgeDelay() time.Duration {
	if p := time.Duration(r.lat.p95.Load()); p > 0 {
		return max(p, mirrorHedgeMin)
	}
	return max(2*time.Duration(r.ewma.Load()), mirrorHedgeMin)
}

// observe records one finished read of r in its histogram and, when it
// succeeded, in the window its hedge delay comes from (a failure's time —
// retries against a dead server — says nothing of how long a good answer
// takes).
func (r *replica) observe(d time.Duration, ok bool) {
	i := len(mirrorBuckets)
	for j, ub := range mirrorBuckets {
		if d.Seconds() <= ub {
			i = j
			break
		}
	}
	r.buckets[i].Add(1)
	r.latSumNs.Add(int64(d))
	r.latCount.Add(1)
	if ok {
		r.lat.add(d)
	}
}

func (r *replica) down(now int64) bool { return r.downUntil.Load() > now }

// ReplicaStat is one mirror replica's counters since the backend was opened
// (see ReplicaStats).
type ReplicaStat struct {
	Index int  // the replica's position in the mirror URL, from 0
	Up    bool // not marked down after a failure

	Requests      int64 // calls sent to it (stat, list, reads, hedges)
	Errors        int64 // calls that failed with an I/O error (not canceled losers)
	Hedges        int64 // hedge reads sent to it because another replica was slow
	HedgeWins     int64 // hedge reads it answered first
	Served        int64 // reads whose answer came from it
	Disagreements int64 // files it disagreed on (size or checksum), never read from it again

	// The read latency histogram: LatencyCounts[i] reads took at most
	// LatencyBuckets[i] seconds (cumulative), of LatencyCount in all,
	// LatencySum seconds together. Canceled hedge losers are left out.
	LatencyBuckets []float64
	LatencyCounts  []uint64
	LatencyCount   uint64
	LatencySum     float64
}

// ReplicaStatser is the optional ability of a mirror to report per-replica
// counters. Use the ReplicaStats helper to find it through wrappers.
type ReplicaStatser interface {
	ReplicaStats() []ReplicaStat
}

// ReplicaStats returns the per-replica counters of b, or of the first
// Backend it wraps that has them (a mirror), or nil.
func ReplicaStats(b Backend) []ReplicaStat {
	if rs, ok := as[ReplicaStatser](b); ok {
		return rs.ReplicaStats()
	}
	return nil
}

// ChecksumSetter is the optional ability of a backend to check whole-file
// reads against known checksums (a mirror: a manifest's sha256s).
type ChecksumSetter interface {
	// SetChecksums gives the backend a function returning a file's
	// sha256, or nil when unknown. Safe to call once before serving.
	SetChecksums(sum func(path string) []byte)
}

// SetChecksums hands sum to b or to the first Backend it wraps that can
// use it, and reports whether one could.
func SetChecksums(b Backend, sum func(path string) []byte) bool {
	if cs, ok := as[ChecksumSetter](b); ok {
		cs.SetChecksums(sum)
		return true
	}
	return false
}

var (
	_ Backend      = (*mirrorBackend)(nil)
	_ RetryCounter = (*mirrorBackend)(nil)
	_ SkipCounter  = (*mirrorBackend)(nil)

	_ ReplicaStatser = (*mirrorBackend)(nil)
	_ ChecksumSetter = (*mirrorBackend)(nil)
)

// openMirror opens every replica. A replica that cannot be reached is
// logged and left out, as long as at least one opens: a mirror exists to
// survive the loss of a place. A replica of a kind this build cannot open
// (ErrUnsupported) fails the whole open: that is a configuration error.
func openMirror(ctx context.Context, src source.Source, opts Options) (Backend, error) {
	if len(src.Replicas) < 2 {
		return nil, fmt.Errorf("backend: open %s: %w: a mirror needs at least 2 replicas", src, source.ErrInvalidURL)
	}
	m := &mirrorBackend{id: src.String(), log: opts.Logger.With(slog.String("backend", "mirror"))}
	var errs []error
	for i, rs := range src.Replicas {
		if rs.Kind == source.KindMirror {
			return nil, fmt.Errorf("backend: open %s: %w: a mirror cannot contain another mirror", src, source.ErrInvalidURL)
		}
		b, err := Open(ctx, rs, opts)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrUnsupported) || errors.Is(err, source.ErrInvalidURL) {
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
// ones, soonest to recover first. Healthy replicas come fastest first for
// reads (one to probe — unmeasured, warming up or stale — first of all,
// unless a probe of it is already under way: then it comes after the
// measured ones, so that a cold start sends one read at a time, not every
// concurrent one, to a replica that may be far),
// and in URL order for metadata, so that versions stay stable while the
// first replica is healthy.
func (m *mirrorBackend) order(forRead bool) []*replica {
	now := time.Now().UnixNano()
	type keyed struct {
		r          *replica
		down, wait int64
	}
	ks := make([]keyed, len(m.replicas))
	for i, r := range m.replicas {
		k := keyed{r: r}
		if d := r.downUntil.Load(); d > now {
			k.down = d
		} else if forRead {
			k.wait = r.ewma.Load()
			if r.stale(now) || r.warming() {
				k.wait = 0 // measured long ago, or not enough: probe it
			}
			if k.wait == 0 && r.probing.Load() > 0 {
				k.wait = math.MaxInt64
			}
		}
		ks[i] = k
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if a.down != b.down && (a.down == 0 || b.down == 0) {
			return cmpInt64(int64(min(1, a.down)), int64(min(1, b.down))) // healthy first
		}
		if a.down != 0 {
			return cmpInt64(a.down, b.down)
		}
		return cmpInt64(a.wait, b.wait) // 0 for metadata: stable, URL order
	})
	out := make([]*replica, len(ks))
	for i, k := range ks {
		out[i] = k.r
	}
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
	now := time.Now().UnixNano()
	old := r.ewma.Load()
	switch {
	case old == 0:
		// The first measure: the warm-up starts.
		r.samples.Store(1)
		r.ewma.Store(max(int64(d), 1))
		return
	case now-r.measured.Swap(now) > int64(mirrorRemeasure):
		// A probe of a replica not used for a while: the old measure is
		// too old to mean anything; this one replaces it (no new warm-up).
		r.samples.Store(max(r.samples.Load(), mirrorWarmup))
		r.ewma.Store(max(int64(d), 1))
		return
	}
	// The plain mean of the first mirrorWarmup samples (one slow first
	// request, a new connection, must not decide for long), then a moving
	// average weighting the newest 1/mirrorWarmup. After the warm-up a
	// sample counts for at most 4× the average: one stalled read (a GC
	// pause, a busy machine) must not hand the reads to a far replica
	// for the next mirrorRemeasure, while a replica that really got slow
	// still loses them within about ten reads.
	n := r.samples.Add(1)
	w, v := min(n, mirrorWarmup), int64(d)
	if n > mirrorWarmup {
		v = min(v, 4*old)
	}
	r.ewma.Store(max(old+(v-old)/w, 1))
}

// warming reports whether r has fewer than mirrorWarmup samples since it
// was (re)measured: reads probe it one at a time until it has them.
func (r *replica) warming() bool { return r.samples.Load() < mirrorWarmup }

// stale reports whether r's moving average is older than mirrorRemeasure:
// the next read probes it (see order).
func (r *replica) stale(now int64) bool {
	return r.ewma.Load() != 0 && now-r.measured.Load() > int64(mirrorRemeasure)
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
// over.) A listing over a cap (ErrListTooLarge) is one: the next replica
// holds the same directory, and listing it again would double what the
// caller's caps allow.
func authoritative(err error) bool {
	return err == io.EOF || errors.Is(err, ErrNotExist) || errors.Is(err, ErrNotDir) ||
		errors.Is(err, ErrIsDir) || errors.Is(err, ErrInvalidPath) || errors.Is(err, ErrChanged) ||
		errors.Is(err, ErrListTooLarge)
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
			return 0, fmt.Errorf("mirror: read %q: %w (version %q is not a mirror version)", p, ErrChanged, version)
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
	done := make(chan struct{})
	defer close(done) // runs before cancel: losers see done, then their ctx end
	results := make(chan attempt)
	inflight, next := 0, 0
	lastProbe := false
	launch := func(hedge bool) {
		r := cands[next]
		next++
		inflight++
		r.requests.Add(1)
		if hedge {
			r.hedges.Add(1)
		}
		probe := r.ewma.Load() == 0 || r.warming() || r.stale(time.Now().UnixNano())
		if probe {
			r.probing.Add(1)
		}
		lastProbe = probe
		go func() {
			b := getBuf(len(buf))
			start := time.Now()
			n, err := m.readOne(actx, r, p, rv, *b, off)
			if probe {
				if err != nil && err != io.EOF && !errors.Is(err, errDisagree) && actx.Err() == nil && r.ewma.Load() == 0 {
					// A probe that failed still measured something (the
					// time it took at least), so that the next reads do
					// not all probe it again. (A canceled one: see lost.)
					r.ewma.CompareAndSwap(0, int64(time.Since(start)))
					r.samples.Add(1)
					r.measured.Store(time.Now().UnixNano())
				}
				r.probing.Add(-1)
			}
			a := attempt{r: r, path: p, size: rv.size, n: n, err: err, buf: b, d: time.Since(start), hedge: hedge}
			select {
			case results <- a:
			case <-done:
				m.lost(a)
			}
		}()
	}
	// hedgeTimer fires when the latest attempt has run past its replica's
	// p95; only one hedge per read, and only to a replica not marked down.
	hedged := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armHedge := func() {
		// The next replica must be healthy, unless this one is not known
		// to be either (down, or its last call failed: every replica is
		// failing, so try two side by side, and the first to come back
		// answers).
		now := time.Now().UnixNano()
		cur := cands[next-1]
		if !hedged && next < len(cands) && (!cands[next].down(now) || cur.down(now) || cur.failures.Load() > 0) {
			d := cur.hedgeDelay()
			if lastProbe {
				// A probe (of a replica new, warming up or not measured
				// for a while) waits no longer than the next replica
				// would take: probing a far replica costs a read little.
				d = min(d, cands[next].hedgeDelay())
			}
			timer.Reset(d)
		}
	}
	launch(false)
	armHedge()

	var errs []error
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("mirror: read %q: %w", p, ctx.Err())
		case <-timer.C:
			if !hedged && next < len(cands) {
				hedged = true
				launch(true)
			}
		case a := <-results:
			inflight--
			if err := ctx.Err(); err != nil {
				putBuf(a.buf)
				return 0, fmt.Errorf("mirror: read %q: %w", p, err)
			}
			if a.err == nil || authoritative(a.err) {
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
			putBuf(a.buf)
			if errors.Is(a.err, errDisagree) {
				m.exclude(a.r, p, rv.size, a.err)
			} else {
				a.r.failed()
				a.r.errCount.Add(1)
				a.r.observe(a.d, false)
				m.log.Warn("mirror replica failed, trying the next one", slog.String("op", "read"),
					slog.String("path", strconv.Quote(p)), slog.Int("replica", a.r.index), slog.String("error", a.err.Error()))
			}
			errs = append(errs, fmt.Errorf("replica %d: %w", a.r.index, a.err))
			if inflight == 0 {
				if next >= len(cands) {
					return 0, fmt.Errorf("mirror: read %q: every replica failed: %w", p, errors.Join(errs...))
				}
				timer.Stop()
				launch(false)
				armHedge()
			}
		}
	}
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
		case errors.Is(err, ErrChanged):
			r.versionsDiffer.Add(1)
		case errors.Is(err, ErrNotExist):
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
			if errors.Is(err, ErrNotExist) {
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

// SetChecksums implements ChecksumSetter.
func (m *mirrorBackend) SetChecksums(sum func(path string) []byte) {
	if sum == nil {
		m.sums.Store(nil)
		return
	}
	m.sums.Store(&sum)
}

// ReplicaStats implements ReplicaStatser, in the order of the mirror URL.
func (m *mirrorBackend) ReplicaStats() []ReplicaStat {
	now := time.Now().UnixNano()
	out := make([]ReplicaStat, 0, len(m.replicas))
	for _, r := range m.replicas {
		s := ReplicaStat{
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
