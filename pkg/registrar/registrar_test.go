package registrar

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// identity is a CSI Identity service that answers GetPluginInfo with name.
type identity struct {
	csipb.UnimplementedIdentityServer
	name string
}

func (i identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: i.name, VendorVersion: "v1"}, nil
}

// serveIdentity serves identity{name} on sock until the test ends.
func serveIdentity(t *testing.T, sock, name string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, identity{name: name})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

// kubelet dials the registration socket as the kubelet's plugin watcher does.
func kubelet(t *testing.T, sock string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

// start runs a Registrar for the driver at csiSock; Run's error arrives on
// the returned channel.
func start(t *testing.T, ctx context.Context, dir, csiSock string) (*Registrar, <-chan error) {
	t.Helper()
	r, err := New(Config{
		CSIEndpoint:             "unix://" + csiSock,
		DriverName:              "cachefs.epochfs.io",
		KubeletRegistrationPath: "/var/lib/kubelet/plugins/cachefs.epochfs.io/csi.sock",
		RegistrationDir:         filepath.Join(dir, "registry"),
		RetryInterval:           50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	return r, errc
}

func waitSocket(t *testing.T, path string, errc <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
			return
		}
		select {
		case err := <-errc:
			t.Fatalf("Run returned %v before serving", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not created", path)
		}
	}
}

func waitRun(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// TestRegistration: the driver comes up late; the registrar waits for it,
// serves GetInfo as the kubelet expects, records the kubelet's success, and
// removes its socket when stopped.
func TestRegistration(t *testing.T) {
	dir := t.TempDir()
	csiSock := filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, errc := start(t, ctx, dir, csiSock)
	if r.Socket() != filepath.Join(dir, "registry", "cachefs.epochfs.io-reg.sock") {
		t.Fatalf("socket %s", r.Socket())
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(r.Socket()); err == nil {
		t.Fatal("registration socket exists before the driver answers")
	}
	if _, err := r.Healthy(); err != nil {
		t.Fatalf("unhealthy while waiting for the driver: %v", err)
	}
	serveIdentity(t, csiSock, "cachefs.epochfs.io")
	waitSocket(t, r.Socket(), errc)

	k := kubelet(t, r.Socket())
	info, err := k.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "cachefs.epochfs.io" ||
		info.Endpoint != "/var/lib/kubelet/plugins/cachefs.epochfs.io/csi.sock" || strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo %+v", info)
	}
	if registered, err := r.Healthy(); registered || err != nil {
		t.Fatalf("before the kubelet's status: registered %v, err %v", registered, err)
	}
	if _, err := k.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if registered, err := r.Healthy(); !registered || err != nil {
		t.Fatalf("after success: registered %v, err %v", registered, err)
	}

	// A wiped registration dir: unhealthy, so that a liveness probe restarts it.
	if err := os.Remove(r.Socket()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Healthy(); err == nil {
		t.Fatal("healthy without its socket")
	}

	cancel()
	if err := waitRun(t, errc); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

// TestRegistrationFailed: a failure reported by the kubelet ends Run with
// its error, and the socket is removed.
func TestRegistrationFailed(t *testing.T) {
	dir := t.TempDir()
	csiSock := filepath.Join(dir, "csi.sock")
	serveIdentity(t, csiSock, "cachefs.epochfs.io")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, errc := start(t, ctx, dir, csiSock)
	waitSocket(t, r.Socket(), errc)
	k := kubelet(t, r.Socket())
	if _, err := k.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "NodeGetInfo failed: boom"}); err != nil {
		t.Fatal(err)
	}
	err := waitRun(t, errc)
	if err == nil || !strings.Contains(err.Error(), "NodeGetInfo failed: boom") {
		t.Fatalf("Run: %v, want the kubelet's error", err)
	}
	if _, err := os.Stat(r.Socket()); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
	if _, err := r.Healthy(); err == nil {
		t.Fatal("healthy after a failed registration")
	}
}

// TestWrongDriver: a driver answering another name is never registered.
func TestWrongDriver(t *testing.T) {
	dir := t.TempDir()
	csiSock := filepath.Join(dir, "csi.sock")
	serveIdentity(t, csiSock, "hostpath.csi.k8s.io")
	r, errc := start(t, context.Background(), dir, csiSock)
	err := waitRun(t, errc)
	if err == nil || !strings.Contains(err.Error(), `"hostpath.csi.k8s.io", want "cachefs.epochfs.io"`) {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(r.Socket()); !os.IsNotExist(err) {
		t.Fatalf("socket: %v", err)
	}
}

// TestStopWhileWaiting: SIGTERM before the driver ever answers is a clean
// stop, not an error.
func TestStopWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	r, errc := start(t, ctx, dir, filepath.Join(dir, "csi.sock"))
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := waitRun(t, errc); err != nil {
		t.Fatalf("Run stopped while waiting: %v", err)
	}
	if _, err := os.Stat(r.Socket()); !os.IsNotExist(err) {
		t.Fatalf("socket: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	good := Config{CSIEndpoint: "unix:///csi/csi.sock", DriverName: "d", KubeletRegistrationPath: "/k/csi.sock", RegistrationDir: "/registration"}
	for name, mut := range map[string]func(*Config){
		"no endpoint":           func(c *Config) { c.CSIEndpoint = "" },
		"no name":               func(c *Config) { c.DriverName = "" },
		"relative kubelet path": func(c *Config) { c.KubeletRegistrationPath = "csi.sock" },
		"empty kubelet path":    func(c *Config) { c.KubeletRegistrationPath = "" },
		"relative dir":          func(c *Config) { c.RegistrationDir = "registration" },
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			mut(&c)
			if _, err := New(c); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}
