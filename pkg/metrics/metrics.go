// Package metrics serves Prometheus metrics (Serve, ServeHealth) and
// registers the mount's gauges and counters that come from plain state
// (readahead, listing refusals) under the metric names fixed in
// docs/DESIGN.md. It must not know the cache or the backends: pkg/mount
// registers their collectors (its metrics.go), so the node plugin, which
// serves metrics too, links neither.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readahead is what RegisterReadahead reads at scrape time: the mount's
// whole-file readahead.
type Readahead struct {
	Auto    bool          // --readahead-files auto
	Window  int           // files read ahead after a miss now (0: off)
	Latency time.Duration // on auto: the mean backend fetch latency of a small file
	Files   uint64        // files fetched into the cache by readahead so far
}

// RegisterReadahead adds the readahead metrics to reg, read from state at
// scrape time.
func RegisterReadahead(reg *prometheus.Registry, state func() Readahead) {
	gauge := func(name, help string, f func(Readahead) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(state()) }))
	}
	gauge("cachefs_readahead_auto", "1 when the whole-file readahead adapts to the backend's latency (--readahead-files auto), 0 when pinned.",
		func(r Readahead) float64 {
			if r.Auto {
				return 1
			}
			return 0
		})
	gauge("cachefs_readahead_window_files", "Files of a directory read ahead after a missed open of a small file, now (0: off).",
		func(r Readahead) float64 { return float64(r.Window) })
	gauge("cachefs_readahead_latency_seconds", "On auto: the mean backend fetch latency of a whole small file, which sets the window (0 when pinned).",
		func(r Readahead) float64 { return r.Latency.Seconds() })
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cachefs_readahead_files_total",
		Help: "Small files fetched into the cache by readahead (prefetch fills; a reader's later open of one is a hit).",
	}, func() float64 { return float64(state().Files) }))
}

// Passthrough is what RegisterPassthrough reads at scrape time: the
// process's FUSE counters (fusefs.ReadCounters).
type Passthrough struct {
	Opens, CachedReads uint64
}

// RegisterPassthrough registers the counters that say whether FUSE
// passthrough serves the cached files of the mount (this process's: they
// start at 0 in a process that took over or recovered the connection).
func RegisterPassthrough(reg *prometheus.Registry, state func() Passthrough) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cachefs_passthrough_opens_total",
		Help: "Opens of cached files answered with a FUSE passthrough backing: the kernel reads them without this process.",
	}, func() float64 { return float64(state().Opens) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cachefs_cached_file_reads_total",
		Help: "READ requests on cached whole files that reached this process (0 while passthrough serves them).",
	}, func() float64 { return float64(state().CachedReads) }))
}

// Listings is what RegisterListings reads at scrape time: the listings a
// mount without a manifest refused, by cap (fusefs.ListingRefusals).
type Listings struct {
	Entries, Memory, Pages, PageSize int64
}

// LabelReplica labels a mirror replica's metrics with its position in the
// mirror URL.
const LabelReplica = "replica"

// LabelCap is the label of cachefs_listing_refusals_total naming the cap.
const LabelCap = "cap"

// Values of LabelCap: the mount flag that set the cap (the names of the
// caps in pkg/backend, which its errors spell), the page cap, and an S3
// listing page over 8 MiB.
const (
	CapDirEntries    = "max-dir-entries"
	CapListingMemory = "max-listing-memory"
	CapListingPages  = "listing-pages"
	CapPageSize      = "page-size"
)

// RegisterListings adds cachefs_listing_refusals_total{cap=…} to reg, read
// from state at scrape time; cap is the mount flag that set the cap
// (max-dir-entries, max-listing-memory), listing-pages (the page cap,
// max-dir-entries / 100 + 100) or page-size (an S3 listing page over 8 MiB).
func RegisterListings(reg *prometheus.Registry, state func() Listings) {
	for _, c := range []struct {
		cap string
		f   func(Listings) int64
	}{
		{CapDirEntries, func(l Listings) int64 { return l.Entries }},
		{CapListingMemory, func(l Listings) int64 { return l.Memory }},
		{CapListingPages, func(l Listings) int64 { return l.Pages }},
		{CapPageSize, func(l Listings) int64 { return l.PageSize }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "cachefs_listing_refusals_total",
			Help:        "Directory listings refused for passing a cap of the mount (the directory reads as EFBIG); cap names the cachefs mount flag.",
			ConstLabels: prometheus.Labels{LabelCap: c.cap},
		}, func() float64 { return float64(c.f(state())) }))
	}
}

// Serve serves reg (a Registry, or several as prometheus.Gatherers) at
// http://addr/metrics until ctx is done. It returns once the listener is
// bound (so a bad address fails fast) and reports the bound address (useful
// with port 0).
func Serve(ctx context.Context, addr string, reg prometheus.Gatherer) (string, error) {
	return ServeHealth(ctx, addr, reg, nil)
}

// ServeHealth is Serve whose /healthz asks health: 200 "ok" when it
// returns nil (or health is nil), else 503 with the error. reg may be nil
// (no /metrics). health gets the request's context and should be quick
// (a liveness probe waits for it).
func ServeHealth(ctx context.Context, addr string, reg prometheus.Gatherer, health func(context.Context) error) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	if reg != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if health != nil {
			if err := health(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener died; nothing to report to
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return ln.Addr().String(), nil
}
