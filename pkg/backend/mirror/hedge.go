package mirror

import (
	"context"
	"errors"
	"io"
	"time"
)

// hedgedRead is one ReadAt's race over its candidate replicas (best first):
// it sends the read to one replica, hedges it to the next one once it runs
// past its replica's p95 (one hedge per read, only to a replica not marked
// down unless every one is failing), and starts the next replica when every
// attempt in flight has failed. Attempts answer on results, or, once the
// read has returned (done is closed), account for themselves (lost).
//
// The fields below results are used by the ReadAt's goroutine only.
type hedgedRead struct {
	m     *mirrorBackend
	ctx   context.Context // canceled when the read returns
	p     string
	rv    readVersion
	size  int // bytes asked for
	off   int64
	cands []*replica

	results chan attempt
	done    chan struct{}

	inflight, next int  // attempts running; index of the next candidate
	lastProbe      bool // the latest attempt probes its replica
	hedged         bool
	timer          *time.Timer // the hedge; stopped until armHedge
}

func newHedgedRead(ctx context.Context, m *mirrorBackend, p string, rv readVersion, size int, off int64, cands []*replica) *hedgedRead {
	h := &hedgedRead{m: m, ctx: ctx, p: p, rv: rv, size: size, off: off, cands: cands,
		results: make(chan attempt), done: make(chan struct{}), timer: time.NewTimer(time.Hour)}
	h.timer.Stop()
	return h
}

// launch sends the read to the next candidate.
func (h *hedgedRead) launch(hedge bool) {
	r := h.cands[h.next]
	h.next++
	h.inflight++
	r.requests.Add(1)
	if hedge {
		r.hedges.Add(1)
	}
	probe := r.ewma.Load() == 0 || r.warming() || r.stale(time.Now().UnixNano())
	if probe {
		r.probing.Add(1)
	}
	h.lastProbe = probe
	go h.attempt(r, probe, hedge)
}

// attempt reads from r and hands the answer to the ReadAt, or to lost once
// the ReadAt has returned.
func (h *hedgedRead) attempt(r *replica, probe, hedge bool) {
	b := getBuf(h.size)
	start := time.Now()
	n, err := h.m.readOne(h.ctx, r, h.p, h.rv, *b, h.off)
	if probe {
		if err != nil && err != io.EOF && !errors.Is(err, errDisagree) && h.ctx.Err() == nil && r.ewma.Load() == 0 {
			// A probe that failed still measured something (the time it
			// took at least), so that the next reads do not all probe it
			// again. (A canceled one: see lost.)
			r.ewma.CompareAndSwap(0, int64(time.Since(start)))
			r.samples.Add(1)
			r.measured.Store(time.Now().UnixNano())
		}
		r.probing.Add(-1)
	}
	a := attempt{r: r, path: h.p, size: h.rv.size, n: n, err: err, buf: b, d: time.Since(start), hedge: hedge}
	select {
	case h.results <- a:
	case <-h.done:
		h.m.lost(a)
	}
}

// armHedge sets the hedge timer for the latest attempt. The next replica
// must be healthy, unless the latest one is not known to be either (down,
// or its last call failed: every replica is failing, so try two side by
// side, and the first to come back answers).
func (h *hedgedRead) armHedge() {
	now := time.Now().UnixNano()
	cur := h.cands[h.next-1]
	if h.hedged || h.next >= len(h.cands) {
		return
	}
	next := h.cands[h.next]
	if next.down(now) && !cur.down(now) && cur.failures.Load() == 0 {
		return
	}
	d := cur.hedgeDelay()
	if h.lastProbe {
		// A probe (of a replica new, warming up or not measured for a
		// while) waits no longer than the next replica would take:
		// probing a far replica costs a read little.
		d = min(d, next.hedgeDelay())
	}
	h.timer.Reset(d)
}
