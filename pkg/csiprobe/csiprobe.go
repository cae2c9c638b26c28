// Package csiprobe asks a CSI driver, over its endpoint, what the kubelet
// and the upstream sidecars ask of its Identity service: its name
// (GetPluginInfo) and whether it is ready (Probe). The registrar uses it to
// check the driver before registering it, and csi-driver's /healthz to
// check that its own endpoint serves (what the livenessprobe sidecar does).
//
// It knows nothing of EpochFS's driver beyond the CSI spec.
package csiprobe

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrNotReady is returned by Ready when the driver answers Probe with
// ready = false.
var ErrNotReady = errors.New("csiprobe: driver reports not ready")

// ParseEndpoint splits a CSI endpoint (unix:///path, unix:/path or
// tcp://host:port) into a network ("unix" or "tcp") and an address (the
// socket path, or host:port): what a driver listens on and a client dials.
func ParseEndpoint(endpoint string) (network, address string, err error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		if path == "" {
			return "", "", fmt.Errorf("endpoint %q: no socket path", endpoint)
		}
		return "unix", path, nil
	case "tcp":
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("endpoint %q: want unix:///path or tcp://host:port", endpoint)
}

// Dial connects (lazily, as gRPC does) to a CSI endpoint: unix:///path,
// unix:/path or tcp://host:port.
func Dial(endpoint string) (*grpc.ClientConn, error) {
	network, address, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, fmt.Errorf("csiprobe: %w", err)
	}
	target := "unix://" + address
	if network == "tcp" {
		target = "passthrough:///" + address
	}
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Name returns the driver's name and vendor version (GetPluginInfo).
func Name(ctx context.Context, conn *grpc.ClientConn) (name, version string, err error) {
	info, err := csipb.NewIdentityClient(conn).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		return "", "", fmt.Errorf("csiprobe: GetPluginInfo: %w", err)
	}
	return info.GetName(), info.GetVendorVersion(), nil
}

// Ready calls Probe: nil when the driver answers ready (or leaves ready
// unset, which the spec reads as ready), ErrNotReady when it answers not
// ready, the call's error otherwise.
func Ready(ctx context.Context, conn *grpc.ClientConn) error {
	resp, err := csipb.NewIdentityClient(conn).Probe(ctx, &csipb.ProbeRequest{})
	if err != nil {
		return fmt.Errorf("csiprobe: Probe: %w", err)
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return ErrNotReady
	}
	return nil
}
