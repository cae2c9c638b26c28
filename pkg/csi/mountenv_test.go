package csi

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// ambientCredentials are variables through which a process on a node may
// find an identity that is not a volume's: cloud web-identity and
// container-credential variables, static keys, Ceph's keyring, GCP and
// Azure credentials, and a variable the admin set for the driver itself.
var ambientCredentials = map[string]string{
	"AWS_WEB_IDENTITY_TOKEN_FILE":            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
	"AWS_ROLE_ARN":                           "arn:aws:iam::111122223333:role/node",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "http://169.254.170.23/v1/credentials",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/x",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
	"AWS_ACCESS_KEY_ID":                      "NODEKEYID0123456789",
	"AWS_SECRET_ACCESS_KEY":                  "node-secret-never-in-a-volume-mount",
	"AWS_SESSION_TOKEN":                      "node-session-token",
	"AWS_PROFILE":                            "node",
	"AWS_SHARED_CREDENTIALS_FILE":            "/etc/node/aws-credentials",
	"CEPH_KEYRING":                           "/etc/ceph/ceph.client.admin.keyring",
	"CEPH_ARGS":                              "--id admin",
	"GOOGLE_APPLICATION_CREDENTIALS":         "/etc/gcp/key.json",
	"AZURE_CLIENT_SECRET":                    "azure-secret",
	"AZURE_FEDERATED_TOKEN_FILE":             "/var/run/secrets/azure/tokens/azure-identity-token",
	"EPOCHFS_PEER_TOKEN":                     "driver-only",
}

// TestMountEnvironment starts mount processes as the driver does, with the
// local launcher and through a mounter, while the driver's (and mounter's)
// environment holds every kind of ambient credential: a mount of a volume
// with credentials of its own has none of them in /proc/PID/environ (only
// the allowlist: PATH, TZ, Go runtime settings…); a mount of a volume
// without any gets the node's AWS/Ceph identity (which the source policy
// lets it use only where the admin allows) and still nothing else. Before
// the allowlist, every variable but the static AWS keys was inherited.
func TestMountEnvironment(t *testing.T) {
	for k, v := range ambientCredentials {
		t.Setenv(k, v)
	}
	t.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	t.Setenv("GOMAXPROCS", "2")
	dir := t.TempDir()
	// A stand-in for cachefs that lives long enough to be looked at.
	bin := filepath.Join(dir, "cachefs")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "state")
	logDir := filepath.Join(stateDir, "node", "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "mounter.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunMounter(ctx, MounterConfig{Socket: sock, CachefsBinary: bin, StateDir: stateDir}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	ml, err := newMounterLauncher("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	creds := []string{"AWS_ACCESS_KEY_ID=volumekey", "AWS_SECRET_ACCESS_KEY=volumesecret"}
	for _, tc := range []struct {
		name  string
		l     launcher
		creds []string
	}{
		{"local launcher, volume credentials", localLauncher{binary: bin}, creds},
		{"mounter, volume credentials", ml, creds},
		{"local launcher, no credentials", localLauncher{binary: bin}, nil},
		{"mounter, no credentials", ml, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, err := tc.l.launch(mountapi.CommandOptions{Source: "/src", Mountpoint: "/mnt"}.Args(), tc.creds, filepath.Join(logDir, "k.log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			env := environOf(t, pid)
			if env["PATH"] == "" || env["GOMAXPROCS"] != "2" {
				t.Fatalf("environ of %d lacks the allowlisted PATH or GOMAXPROCS: %v", pid, env)
			}
			for k := range ambientCredentials {
				_, has := env[k]
				nodeIdentity := strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "CEPH_")
				switch {
				case tc.creds != nil && has:
					t.Errorf("/proc/%d/environ of a mount with its own credentials holds %s", pid, k)
				case tc.creds == nil && has != nodeIdentity:
					t.Errorf("/proc/%d/environ of a mount without credentials: %s present %v, want %v", pid, k, has, nodeIdentity)
				}
			}
			for k := range env {
				if slices.Contains(shellVars, k) {
					continue
				}
				if tc.creds == nil && (k == "HOME" || strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "CEPH_")) {
					continue // the node's identity, for a volume without its own
				}
				if _, known := ambientCredentials[k]; !known && !slices.Contains(mountEnvAllowed, k) {
					t.Errorf("/proc/%d/environ holds %s, which is not on the allowlist", pid, k)
				}
			}
		})
	}
}

// shellVars are set by the stand-in's /bin/sh itself before it execs sleep.
var shellVars = []string{"PWD", "OLDPWD", "SHLVL", "_"}

// environOf reads /proc/PID/environ once the process has exec'd sleep (the
// environment it was started with is what any later exec sees).
func environOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	// The environment is read once the stand-in has exec'd sleep and the
	// kernel has laid out its new stack: before that (between fork and exec,
	// or in exec after the name changed and before the environment is
	// placed) /proc/PID/environ is not the mount's, or empty.
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	var b []byte
	for i := 0; ; i++ {
		if comm, _ := os.ReadFile(filepath.Join(proc, "comm")); strings.TrimSpace(string(comm)) == "sleep" {
			var err error
			if b, err = os.ReadFile(filepath.Join(proc, "environ")); err != nil {
				t.Fatal(err)
			}
			if len(b) > 0 {
				break
			}
		}
		if i == 500 {
			t.Fatalf("process %d did not exec the stand-in's sleep with an environment within 5 s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}
