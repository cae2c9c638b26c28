package csiprobe

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type identity struct {
	csipb.UnimplementedIdentityServer
	ready *wrapperspb.BoolValue
}

func (identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "x.example.com", VendorVersion: "v2"}, nil
}

func (i identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: i.ready}, nil
}

func TestNameAndReady(t *testing.T) {
	for name, tc := range map[string]struct {
		ready *wrapperspb.BoolValue
		want  error
	}{
		"ready":     {wrapperspb.Bool(true), nil},
		"unset":     {nil, nil},
		"not ready": {wrapperspb.Bool(false), ErrNotReady},
	} {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "csi.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			csipb.RegisterIdentityServer(srv, identity{ready: tc.ready})
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			for _, endpoint := range []string{"unix://" + sock, "unix:" + sock} {
				conn, err := Dial(endpoint)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				n, v, err := Name(ctx, conn)
				if err != nil || n != "x.example.com" || v != "v2" {
					t.Errorf("%s: Name %q %q %v", endpoint, n, v, err)
				}
				if err := Ready(ctx, conn); !errors.Is(err, tc.want) {
					t.Errorf("%s: Ready %v, want %v", endpoint, err, tc.want)
				}
				cancel()
				conn.Close()
			}
		})
	}
}

func TestReadyNoServer(t *testing.T) {
	conn, err := Dial("unix://" + filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := Ready(ctx, conn); err == nil || errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready without a server: %v", err)
	}
}

func TestDialEndpoints(t *testing.T) {
	for endpoint, ok := range map[string]bool{
		"unix:///csi/csi.sock": true, "unix:/csi/csi.sock": true, "tcp://127.0.0.1:10000": true,
		"unix://": false, "http://x": false, "/csi/csi.sock": false, "%zz": false,
	} {
		conn, err := Dial(endpoint)
		if (err == nil) != ok {
			t.Errorf("Dial(%q): %v, want ok %v", endpoint, err, ok)
		}
		if conn != nil {
			conn.Close()
		}
	}
}
