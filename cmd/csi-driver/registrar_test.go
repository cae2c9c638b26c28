package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/csi"
)

// proc is a started csi-driver process.
type proc struct {
	cmd    *exec.Cmd
	out    *testenv.SyncBuffer
	exited chan struct{}
	err    error
}

func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &testenv.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // by PID: only the process this test started
		<-p.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin)+" "+args[1], p.out.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit error.
func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(15 * time.Second):
		t.Fatalf("process did not exit:\n%s", p.out.String())
		return nil
	}
}

// healthz returns the status code and body of http://addr/healthz.
func healthz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond every 50 ms for up to 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRegistrarMode runs `csi-driver --mode registrar` against a real
// `csi-driver --mode node` process and calls its registration socket as the
// kubelet does: GetInfo names the driver and the kubelet registration path;
// NotifyRegistrationStatus success keeps it serving, failure makes it exit
// non-zero; SIGTERM removes the socket. It also checks both processes'
// /healthz: the driver's fails once its node service cannot serve.
func TestRegistrarMode(t *testing.T) {
	bin := testenv.GoBuild(t, "./cmd/csi-driver")
	dir := t.TempDir()
	csiSock := filepath.Join(dir, "plugins", csi.DriverName, "csi.sock")
	registry := filepath.Join(dir, "plugins_registry")
	regSock := filepath.Join(registry, csi.DriverName+"-reg.sock")
	driverAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	regAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	registrarArgs := func(metricsAddr string) []string {
		return []string{"--mode", "registrar", "--endpoint", "unix://" + csiSock,
			"--kubelet-registration-path", csiSock, "--plugin-registration-dir", registry,
			"--metrics-addr", metricsAddr, "--log-format", "text"}
	}

	// The registrar first, as a node pod's containers may start: it waits.
	reg := startProc(t, bin, registrarArgs(regAddr)...)
	waitFor(t, "the registrar's /healthz", func() bool { code, _ := healthz(t, regAddr); return code == http.StatusOK })
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(regSock); err == nil {
		t.Fatal("registration socket before the driver serves")
	}
	// The node driver mounts a tmpfs on its secrets dir and leaves it
	// mounted when it stops (a restart keeps the credentials): unmount it
	// after the process is killed (cleanups run last-registered first), so
	// that t.TempDir's removal does not fail with EBUSY.
	t.Cleanup(func() {
		mounts, _ := testenv.MountsUnder(dir)
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	})
	startProc(t, bin, "--mode", "node", "--endpoint", "unix://"+csiSock, "--nodeid", "node-1",
		"--state-dir", filepath.Join(dir, "state"), "--cache-root", filepath.Join(dir, "cache"),
		"--cachefs-binary", "/bin/true", "--kubelet-dir", filepath.Join(dir, "kubelet"),
		"--health-interval", "0", "--metrics-addr", driverAddr, "--log-format", "text")
	waitFor(t, "the registration socket", func() bool { _, err := os.Stat(regSock); return err == nil })

	conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := registerapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := kubelet.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != csi.DriverName || info.Endpoint != csiSock ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo: %+v", info)
	}
	if _, err := kubelet.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if code, body := healthz(t, regAddr); code != http.StatusOK {
		t.Fatalf("registrar /healthz after registration: %d %s", code, body)
	}

	// The driver's /healthz asks its own endpoint's Probe.
	waitFor(t, "the driver's /healthz", func() bool { code, _ := healthz(t, driverAddr); return code == http.StatusOK })
	if err := os.Rename(filepath.Join(dir, "cache"), filepath.Join(dir, "cache.gone")); err != nil {
		t.Fatal(err)
	}
	if code, body := healthz(t, driverAddr); code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready") {
		t.Fatalf("driver /healthz without its cache root: %d %q, want 503 not ready", code, body)
	}
	if err := os.Rename(filepath.Join(dir, "cache.gone"), filepath.Join(dir, "cache")); err != nil {
		t.Fatal(err)
	}
	if code, body := healthz(t, driverAddr); code != http.StatusOK {
		t.Fatalf("driver /healthz with its cache root back: %d %q", code, body)
	}

	// SIGTERM: exit 0, socket removed.
	if err := reg.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := reg.wait(t); err != nil {
		t.Fatalf("registrar after SIGTERM: %v\n%s", err, reg.out.String())
	}
	if _, err := os.Stat(regSock); !os.IsNotExist(err) {
		t.Fatalf("registration socket after SIGTERM: %v", err)
	}

	// A failed registration: exit non-zero, naming the kubelet's error.
	reg2 := startProc(t, bin, registrarArgs(fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))...)
	waitFor(t, "the registration socket again", func() bool { _, err := os.Stat(regSock); return err == nil })
	conn2, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := registerapi.NewRegistrationClient(conn2).NotifyRegistrationStatus(ctx,
		&registerapi.RegistrationStatus{Error: "plugin registration failed with err: NodeGetInfo: boom"}); err != nil {
		t.Fatal(err)
	}
	err = reg2.wait(t)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("registrar after a failed registration: %v, want a non-zero exit", err)
	}
	if out := reg2.out.String(); !strings.Contains(out, "NodeGetInfo: boom") {
		t.Fatalf("registrar output lacks the kubelet's error:\n%s", out)
	}
	if _, err := os.Stat(regSock); !os.IsNotExist(err) {
		t.Fatalf("registration socket after the failure: %v", err)
	}
}
