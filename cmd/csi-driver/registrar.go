package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/registrar"
)

// registrarFlags are the flags of --mode registrar (besides --endpoint
// and --metrics-addr).
type registrarFlags struct {
	kubeletRegistrationPath string
	pluginRegistrationDir   string
}

// runRegistrar registers the driver at endpoint with the kubelet (package
// registrar) until ctx ends; with metricsAddr, /healthz there fails once
// the registration socket is gone or the kubelet reported a failure.
func runRegistrar(ctx context.Context, endpoint string, f registrarFlags, metricsAddr string, log *slog.Logger) error {
	r, err := registrar.New(registrar.Config{
		CSIEndpoint:             endpoint,
		DriverName:              csi.DriverName,
		KubeletRegistrationPath: f.kubeletRegistrationPath,
		RegistrationDir:         f.pluginRegistrationDir,
		Logger:                  log,
	})
	if err != nil {
		return err
	}
	if metricsAddr != "" {
		health := func(context.Context) error { _, err := r.Healthy(); return err }
		if _, err := metrics.ServeHealth(ctx, metricsAddr, nil, health); err != nil {
			return fmt.Errorf("registrar: %w", err)
		}
	}
	return r.Run(ctx)
}
