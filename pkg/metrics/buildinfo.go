package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is a binary's epochfs_build_info gauge: always 1, labelled with
// the binary's name, its version (set at build time with -ldflags
// "-X main.version=…") and the Go version it was built with, so a query can
// join any series of a pod to what runs there (as kube_*_info series do).
func BuildInfo(binary, version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "epochfs_build_info",
		Help:        "The running EpochFS binary: always 1, labelled with its name, version and Go version.",
		ConstLabels: prometheus.Labels{"binary": binary, "version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
