package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// serveMetrics serves the driver's own metrics. Each dataset mount process
// serves its cache metrics itself.
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
	_, err := metrics.Serve(ctx, addr, reg)
	return err
}
