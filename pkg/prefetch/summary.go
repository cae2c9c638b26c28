package prefetch

import (
	"fmt"
	"math"
	"time"

	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/units"
)

// What a run reports: its Summary, counted from the store at the end.

// States of a Summary (mountapi's, which documents each).
const (
	StateComplete    = mountapi.StateComplete
	StateCacheFull   = mountapi.StateCacheFull
	StateInterrupted = mountapi.StateInterrupted
	StateFailed      = mountapi.StateFailed
)

// Summary is the outcome of a prefetch, computed from the store at the end
// (its fields are documented at mountapi.PrefetchSummary, which it is so
// that the control socket sends it as is).
type Summary = mountapi.PrefetchSummary

// tally fills sum with the truth, from the store and the counters: what
// the dataset (pl's files) holds, what is cached of it, by whom, and why
// the rest is not.
func (p *Prefetcher) tally(sum *Summary, m *manifest.Manifest, pl *plan) {
	sum.Files, sum.Bytes = int64(len(pl.files)), pl.bytes
	sum.AlreadyFiles, sum.AlreadyBytes = p.alreadyFiles.Load(), p.alreadyBytes.Load()
	sum.FetchedBytes = p.fetchedBytes.Load()
	sum.FailedFiles = p.failedFiles.Load()
	p.mu.Lock()
	sum.Errors = append([]string(nil), p.errs...)
	p.mu.Unlock()
	for fi := range pl.files {
		var missing int64
		held := true
		for _, sp := range p.spans(m, pl.files[fi]) {
			if p.cfg.Store.Contains(sp.Key) {
				sum.CachedBytes += sp.Length
			} else {
				held = false
				missing += sp.Length
			}
		}
		switch {
		case held:
			sum.CachedFiles++
			if !pl.complete[fi] && pl.admitted[fi].Load() {
				sum.FetchedFiles++
			}
		case !pl.failed[fi].Load():
			sum.NotFitFiles++
			sum.NotFitBytes += missing
		}
	}
	p.setStore(sum)
	sum.PercentBytes = percent(sum.CachedBytes, sum.Bytes)
	sum.PercentFiles = percent(sum.CachedFiles, sum.Files)
}

// setStore records the store's capacity and use, and the time elapsed, in
// sum.
func (p *Prefetcher) setStore(sum *Summary) {
	st := p.cfg.Store.Stats()
	sum.CapacityBytes, sum.UsedBytes = st.CapacityBytes, st.UsedBytes
	sum.ElapsedSeconds = time.Since(p.start).Seconds()
}

// percent returns 100·n/d rounded down to a tenth, so that it never
// overstates (99.96 % is "99.9", never "100.0"); 100 when d is 0.
func percent(n, d int64) float64 {
	if d <= 0 {
		return 100
	}
	return math.Floor(float64(n)*1000/float64(d)) / 10
}

func message(s Summary) string {
	cached := fmt.Sprintf("%d of %d files, %s of %s (%.1f%% of the dataset); %d files, %s cached by this run, %d files, %s already cached",
		s.CachedFiles, s.Files, units.FormatSize(s.CachedBytes), units.FormatSize(s.Bytes), s.PercentBytes,
		s.FetchedFiles, units.FormatSize(s.FetchedBytes), s.AlreadyFiles, units.FormatSize(s.AlreadyBytes))
	switch s.State {
	case StateComplete:
		return fmt.Sprintf("complete: all %d files, %s, are cached (%d files, %s by this run)",
			s.Files, units.FormatSize(s.Bytes), s.FetchedFiles, units.FormatSize(s.FetchedBytes))
	case StateCacheFull:
		return fmt.Sprintf("cache full at %.1f%% of the dataset: %s; %d files (%s) did not fit in %s (%s free)",
			s.PercentBytes, cached, s.NotFitFiles, units.FormatSize(s.NotFitBytes),
			units.FormatSize(s.CapacityBytes), units.FormatSize(max(s.CapacityBytes-s.UsedBytes, 0)))
	case StateInterrupted:
		return fmt.Sprintf("interrupted at %.1f%% of the dataset: %s", s.PercentBytes, cached)
	}
	first := ""
	if len(s.Errors) > 0 {
		first = "; first error: " + s.Errors[0]
	}
	return fmt.Sprintf("incomplete at %.1f%% of the dataset: %d files could not be cached%s; %s",
		s.PercentBytes, s.FailedFiles, first, cached)
}
