package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// serveMetrics serves the driver's own metrics and, in node mode, every
// dataset mount's cachefs_* metrics (asked of each mount over its control
// socket at scrape time, labelled dataset_key and dataset_id).
func serveMetrics(ctx context.Context, addr string, d *csi.Driver) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "epochfs_csi_dataset_mounts", Help: "Dataset mount processes managed on this node."},
			func() float64 { return float64(d.NodeStats().DatasetMounts) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "epochfs_csi_volumes", Help: "Volumes staged or published on this node."},
			func() float64 { return float64(d.NodeStats().Volumes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_mount_repairs_total", Help: "Dead dataset mounts restarted and re-bound."},
			func() float64 { return float64(d.NodeStats().Repairs) }),
	)
	var g prometheus.Gatherer = reg
	if mounts, failed := d.MountMetrics(); mounts != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_mount_scrape_errors_total", Help: "Dataset mounts that did not answer a metrics scrape in time (left out of it)."},
			func() float64 { return float64(failed()) }))
		g = prometheus.Gatherers{reg, mounts}
	}
	_, err := metrics.Serve(ctx, addr, g)
	return err
}
