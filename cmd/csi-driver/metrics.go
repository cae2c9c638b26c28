package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/csiprobe"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// healthTimeout bounds /healthz's Probe call (a kubelet liveness probe's
// default timeout is 1 s; the chart gives it more).
const healthTimeout = 3 * time.Second

// serveMetrics serves the driver's own metrics, in node mode every dataset
// mount's cachefs_* metrics (asked of each mount over its control socket at
// scrape time, labelled dataset_key and dataset_id), and /healthz.
//
// /healthz calls Probe on the driver's own CSI endpoint, as the kubelet and
// the livenessprobe sidecar reach it: it fails when the socket is gone, the
// gRPC server does not answer within healthTimeout, or the driver reports
// not ready (on a node: its state directory or cache root unusable). So a
// liveness probe on it replaces the livenessprobe sidecar.
func serveMetrics(ctx context.Context, addr string, d *csi.Driver, endpoint string) error {
	conn, err := csiprobe.Dial(endpoint)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	health := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, healthTimeout)
		defer cancel()
		if err := csiprobe.Ready(ctx, conn); err != nil {
			return fmt.Errorf("csi endpoint %s: %w", endpoint, err)
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.BuildInfo("csi-driver", version))
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "epochfs_csi_dataset_mounts", Help: "Dataset mount processes managed on this node."},
			func() float64 { return float64(d.NodeStats().DatasetMounts) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "epochfs_csi_volumes", Help: "Volumes staged or published on this node."},
			func() float64 { return float64(d.NodeStats().Volumes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_mount_repairs_total", Help: "Dead dataset mounts restarted and re-bound."},
			func() float64 { return float64(d.NodeStats().Repairs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_connection_recoveries_total", Help: "Held FUSE connections the node plugin recovered after their mount's processes died (no unmount)."},
			func() float64 { return float64(d.NodeStats().Recoveries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_connection_takeovers_total", Help: "Dataset mounts the node plugin moved to a new mounter generation by a graceful takeover."},
			func() float64 { return float64(d.NodeStats().Takeovers) }),
	)
	if vi := d.VolumeInfo(); vi != nil {
		reg.MustRegister(vi)
	}
	var g prometheus.Gatherer = reg
	if mounts, failed := d.MountMetrics(); mounts != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "epochfs_csi_mount_scrape_errors_total", Help: "Dataset mounts that did not answer a metrics scrape in time (left out of it)."},
			func() float64 { return float64(failed()) }))
		g = prometheus.Gatherers{reg, mounts}
	}
	_, err = metrics.ServeHealth(ctx, addr, g, health)
	return err
}
