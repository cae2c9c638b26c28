// Package registrar registers a CSI driver with the kubelet, in place of the
// node-driver-registrar sidecar (which the Go module proxy here refuses to
// serve). It speaks the kubelet's plugin-registration API
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1): it serves GetInfo and
// NotifyRegistrationStatus on <registration dir>/<driver name>-reg.sock,
// where the kubelet's plugin watcher (<kubelet root>/plugins_registry)
// finds it. The kubelet then calls GetInfo, dials the driver at the
// endpoint GetInfo names, asks NodeGetInfo for the node id, records the
// driver in the Node's CSINode object, and reports the outcome through
// NotifyRegistrationStatus.
//
// Before serving, the registrar checks that the driver's CSI endpoint
// answers GetPluginInfo with the expected name. A registration the kubelet
// reports as failed ends Run with an error (the process exits non-zero and
// its container restarts, as node-driver-registrar does).
//
// It knows nothing of the driver beyond the CSI Identity service.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/epochfs/epochfs/pkg/csiprobe"
)

// SupportedVersions are the CSI versions GetInfo reports.
var SupportedVersions = []string{"1.0.0"}

// Config of a Registrar. Validated by New.
type Config struct {
	// CSIEndpoint is the driver's CSI endpoint as this process reaches it
	// (unix:///csi/csi.sock in the node pod).
	CSIEndpoint string
	// DriverName is the name the driver must answer GetPluginInfo with,
	// and the name it is registered under.
	DriverName string
	// KubeletRegistrationPath is the driver's socket as the kubelet sees it
	// on the host (/var/lib/kubelet/plugins/<driver>/csi.sock): the
	// endpoint GetInfo returns. Absolute.
	KubeletRegistrationPath string
	// RegistrationDir is the kubelet's plugin-registration directory as
	// this process sees it (/registration in the node pod, the host's
	// /var/lib/kubelet/plugins_registry).
	RegistrationDir string
	// CallTimeout bounds each call to the driver (default 5 s); the
	// registrar retries GetPluginInfo every RetryInterval (default 1 s)
	// until the driver answers or Run's ctx ends.
	CallTimeout   time.Duration
	RetryInterval time.Duration
	Logger        *slog.Logger
}

// Registrar serves the plugin-registration API for one driver.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	cfg    Config // immutable
	socket string // immutable: RegistrationDir/<DriverName>-reg.sock
	log    *slog.Logger

	mu         sync.Mutex
	serving    bool   // guarded by mu: the socket was created
	registered bool   // guarded by mu: the kubelet reported success
	failed     string // guarded by mu: the kubelet's error, when it reported failure
	failure    chan string
}

// New validates cfg.
func New(cfg Config) (*Registrar, error) {
	if cfg.CSIEndpoint == "" {
		return nil, errors.New("registrar: --endpoint is required")
	}
	if cfg.DriverName == "" {
		return nil, errors.New("registrar: driver name is required")
	}
	if !filepath.IsAbs(cfg.KubeletRegistrationPath) {
		return nil, fmt.Errorf("registrar: --kubelet-registration-path %q must be an absolute path (the driver's socket on the host)", cfg.KubeletRegistrationPath)
	}
	if !filepath.IsAbs(cfg.RegistrationDir) {
		return nil, fmt.Errorf("registrar: --plugin-registration-dir %q must be an absolute path", cfg.RegistrationDir)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registrar{
		cfg:     cfg,
		socket:  filepath.Join(cfg.RegistrationDir, cfg.DriverName+"-reg.sock"),
		log:     cfg.Logger,
		failure: make(chan string, 1),
	}, nil
}

// Socket is the registration socket's path.
func (r *Registrar) Socket() string { return r.socket }

// Run waits for the driver to answer GetPluginInfo with its name, then
// serves the registration socket until ctx ends (nil; the socket is
// removed) or the kubelet reports a failed registration (an error naming
// the kubelet's). A ctx that ends while it waits is nil too.
func (r *Registrar) Run(ctx context.Context) error {
	version, err := r.waitDriver(ctx)
	if ctx.Err() != nil {
		return nil // stopped while waiting: nothing to clean up
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.RegistrationDir, 0o750); err != nil {
		return fmt.Errorf("registrar: %w", err)
	}
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("registrar: remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", r.socket)
	if err != nil {
		return fmt.Errorf("registrar: listen: %w", err)
	}
	defer os.Remove(r.socket)
	r.mu.Lock()
	r.serving = true
	r.mu.Unlock()
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	r.log.Info("serving plugin registration", "driver", r.cfg.DriverName, "driverVersion", version,
		"socket", r.socket, "kubeletRegistrationPath", r.cfg.KubeletRegistrationPath)

	select {
	case <-ctx.Done():
		stopGracefully(srv)
		return nil
	case msg := <-r.failure:
		stopGracefully(srv) // the kubelet's call gets its answer
		return fmt.Errorf("registrar: the kubelet failed to register %s: %s", r.cfg.DriverName, msg)
	case err := <-errc:
		return fmt.Errorf("registrar: serve: %w", err)
	}
}

// stopGracefully stops srv after its calls in flight, or after 5 s.
func stopGracefully(srv *grpc.Server) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
}

// waitDriver calls GetPluginInfo on the driver until it answers (retrying
// while it is unavailable), and checks its name.
func (r *Registrar) waitDriver(ctx context.Context) (version string, err error) {
	conn, err := csiprobe.Dial(r.cfg.CSIEndpoint)
	if err != nil {
		return "", fmt.Errorf("registrar: %w", err)
	}
	defer conn.Close()
	var lastLog time.Time
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		name, version, err := csiprobe.Name(cctx, conn)
		cancel()
		if err == nil {
			if name != r.cfg.DriverName {
				return "", fmt.Errorf("registrar: the driver at %s is %q, want %q", r.cfg.CSIEndpoint, name, r.cfg.DriverName)
			}
			return version, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			r.log.Info("waiting for the CSI driver", "endpoint", r.cfg.CSIEndpoint, "err", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("registrar: the driver at %s did not answer: %w", r.cfg.CSIEndpoint, err)
		case <-time.After(r.cfg.RetryInterval):
		}
	}
}

// GetInfo tells the kubelet which plugin this is and where it serves.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.log.Info("kubelet called GetInfo")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.cfg.DriverName,
		Endpoint:          r.cfg.KubeletRegistrationPath,
		SupportedVersions: SupportedVersions,
	}, nil
}

// NotifyRegistrationStatus records the kubelet's outcome; a failure ends Run.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	r.registered = status.GetPluginRegistered()
	r.failed = ""
	if !r.registered {
		r.failed = status.GetError()
	}
	r.mu.Unlock()
	if status.GetPluginRegistered() {
		r.log.Info("registered with the kubelet", "driver", r.cfg.DriverName)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	r.log.Error("the kubelet failed to register the driver; exiting", "driver", r.cfg.DriverName, "err", status.GetError())
	select {
	case r.failure <- status.GetError():
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Healthy reports whether the registration socket exists (the kubelet can
// find the plugin; a socket removed under the registrar, e.g. by a wiped
// plugins_registry, makes it unhealthy so that it is restarted) and the
// kubelet has not reported a failure. While Run still waits for the driver
// it is healthy (a restart would not make the driver come sooner).
// registered says whether the kubelet has reported success yet.
func (r *Registrar) Healthy() (registered bool, err error) {
	r.mu.Lock()
	serving, registered, failed := r.serving, r.registered, r.failed
	r.mu.Unlock()
	if failed != "" {
		return false, fmt.Errorf("registrar: the kubelet failed to register the driver: %s", failed)
	}
	if !serving {
		return false, nil
	}
	st, err := os.Stat(r.socket)
	if err != nil {
		return registered, fmt.Errorf("registrar: registration socket: %w", err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return registered, fmt.Errorf("registrar: %s is not a socket", r.socket)
	}
	return registered, nil
}
