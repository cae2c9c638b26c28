package csi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// A launcher starts `cachefs` with args in its own session, its output
// appended to logPath, and returns its pid. creds are the volume's
// credentials as KEY=VALUE lines (secretKeys), none when it has no secrets;
// they reach the process through a pipe (see startDetached), never its
// argv or environment. The process must not be tied to the driver: the
// driver may be killed and restarted at any time.
type launcher interface {
	launch(args, creds []string, logPath string) (int, error)
}

// localLauncher starts the mount process as a child of the driver, in its
// own session, and reaps it. It survives the driver process (kill -9,
// restart on the same host), but in Kubernetes it lives in the driver
// container's cgroup and dies with that container; see mounterLauncher.
type localLauncher struct{ binary string }

func (l localLauncher) launch(args, creds []string, logPath string) (int, error) {
	return startReaped(l.binary, args, creds, logPath)
}

// startReaped starts binary (startDetached) and reaps it when it exits.
func startReaped(binary string, args, creds []string, logPath string) (int, error) {
	cmd, err := startDetached(binary, args, creds, logPath)
	if err != nil {
		return 0, err
	}
	go func() { _ = cmd.Wait() }() // reap our child when it exits
	return cmd.Process.Pid, nil
}

// credentialsFD is the descriptor number of the credentials pipe in the
// mount process: exec.Cmd.ExtraFiles[0].
const credentialsFD = 3

// startDetached starts binary with args in its own session, its output
// appended to logPath, and the environment mountEnv picks from the
// driver's (or mounter's) own. With creds, that environment holds no
// ambient credential of any kind, and creds are written to a pipe whose
// read end the process inherits as fd 3, named by --credentials-fd 3: they
// are not in its /proc/PID/environ nor in its argv. The caller must Wait
// for it.
func startDetached(binary string, args, creds []string, logPath string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("csi: mount log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(binary, args...)
	cmd.Env = mountEnv(os.Environ(), len(creds) > 0)
	if len(creds) > 0 {
		r, err := mountapi.CredentialsPipe(creds)
		if err != nil {
			return nil, fmt.Errorf("csi: %w", err)
		}
		defer r.Close() // the child has its copy
		cmd.ExtraFiles = []*os.File{r}
		cmd.Args = append(cmd.Args, "--"+mountapi.FlagCredentialsFD, strconv.Itoa(credentialsFD))
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("csi: start %s: %w", binary, err)
	}
	return cmd, nil
}

// mountEnvAllowed are the variables of the driver's environment a mount
// process gets: what the Go runtime, TLS and time zones read, and proxies
// the admin set for the node. It is an allowlist: whatever else the node
// plugin's or mounter's container holds (a cloud's web-identity or
// container-credentials variables, GOOGLE_APPLICATION_CREDENTIALS,
// AZURE_*, a CEPH_KEYRING, the admin's extraEnv) never reaches a mount.
var mountEnvAllowed = []string{
	"PATH", "TZ", "LANG", "LC_ALL",
	"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOTRACEBACK",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
}

// mountNodeIdentityPrefixes are the variables through which a mount of a
// volume without credentials of its own reads with the node's identity,
// which the source policy lets it do only where the admin allows it
// (--allow-node-credentials, or an nfs rule): the S3 client's environment,
// shared-file and instance-role providers (AWS_*, and HOME for
// ~/.aws/credentials) and the Ceph client's configuration (CEPH_*).
var mountNodeIdentityPrefixes = []string{"AWS_", "CEPH_"}

// mountEnv returns the environment of a mount process from the driver's
// env: mountEnvAllowed, plus, for a volume without credentials of its own
// (ownCredentials false), the node's identity (mountNodeIdentityPrefixes
// and HOME). A volume that brings credentials reads with those and nothing
// else: no variable can make its manifest, or a fallback of a client
// library, read with the node's identity.
func mountEnv(env []string, ownCredentials bool) []string {
	out := make([]string, 0, len(mountEnvAllowed))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch {
		case slices.Contains(mountEnvAllowed, k):
		case ownCredentials:
			continue
		case k == "HOME" || slices.ContainsFunc(mountNodeIdentityPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }):
		default:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// mounterLauncher asks a mounter (csi-driver --mode mounter, the
// epochfs-mounter DaemonSet's pod on the node) to start mount processes, so
// that they live outside the node plugin pod: upgrading, restarting or
// replacing the driver then leaves every mount serving.
type mounterLauncher struct {
	client *http.Client
	// wait is how long launch retries a mounter that does not answer the
	// dial (not started yet, or being replaced): a refused dial sent
	// nothing, so retrying it cannot start a process twice.
	wait time.Duration
}

// mounterWait is mounterLauncher.wait: the mounter's pod starts beside a
// new node plugin pod, and may be a few seconds behind it.
const mounterWait = 20 * time.Second

func newMounterLauncher(endpoint string) (*mounterLauncher, error) {
	sock, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || !filepath.IsAbs(sock) {
		return nil, fmt.Errorf("csi: --mounter-endpoint %q: want unix:///path/mounter.sock", endpoint)
	}
	return &mounterLauncher{wait: mounterWait, client: &http.Client{
		Timeout: 30 * time.Second,
		// No kept-alive connections: each request reaches the mounter
		// serving the socket now, not an older one a pooled connection
		// still leads to (mounter generations, mountergen.go).
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}}, nil
}

// launchRequest asks a mounter to start `cachefs` with Args. Env holds the
// volume's credentials (KEY=VALUE, secretKeys only), which the mounter
// hands on through a pipe (startDetached); the name is kept so that
// drivers and mounters of other versions understand each other.
type launchRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Log  string   `json:"log"`
}

type launchResponse struct {
	PID   int    `json:"pid"`
	Error string `json:"error,omitempty"`
}

func (m *mounterLauncher) launch(args, creds []string, logPath string) (int, error) {
	body, err := json.Marshal(launchRequest{Args: args, Env: creds, Log: logPath})
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(m.wait)
	var resp *http.Response
	for {
		resp, err = m.client.Post("http://mounter/v1/launch", "application/json", bytes.NewReader(body))
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return 0, fmt.Errorf("csi: mounter: %w", err)
	}
	defer resp.Body.Close()
	var out launchResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("csi: mounter: bad answer (%s): %w", resp.Status, err)
	}
	if out.Error != "" {
		return 0, fmt.Errorf("csi: mounter: %s", out.Error)
	}
	return out.PID, nil
}

// MounterConfig configures RunMounter.
type MounterConfig struct {
	// Socket is the unix socket path to serve on (0600, root only).
	Socket string
	// CachefsBinary is the only program the mounter starts.
	CachefsBinary string
	// StateDir is the driver's --state-dir; logs must be under it.
	StateDir string
	Logger   *slog.Logger
}

// RunMounter serves launch requests on cfg.Socket until ctx ends. It starts
// only `cachefs mount …`, with its own environment and, for a volume with
// credentials (only the known secret keys), those through a pipe
// (startDetached), logging only under the state dir. Its children keep
// running after it stops.
func RunMounter(ctx context.Context, cfg MounterConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Socket == "" || cfg.CachefsBinary == "" || !filepath.IsAbs(cfg.StateDir) {
		return errors.New("csi: mounter needs a socket, --cachefs-binary and an absolute --state-dir")
	}
	logDir := filepath.Join(cfg.StateDir, "node", "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o700); err != nil {
		return err
	}
	_ = os.Remove(cfg.Socket)
	ln, ours, err := listenSocket(cfg.Socket)
	if err != nil {
		return err
	}
	sock := &mounterSocket{path: cfg.Socket, ours: ours, log: cfg.Logger}
	defer sock.removeIfOurs()
	var children sync.WaitGroup
	srv := &http.Server{Handler: mounterHandler(cfg, logDir, &children), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sock.mu.Lock()
		_ = srv.Close()
		sock.mu.Unlock()
	}()
	go sock.keep(ctx, srv)
	cfg.Logger.Info("mounter serving", "socket", cfg.Socket, "cachefs", cfg.CachefsBinary)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("csi: mounter: %w", err)
	}
	waitChildren(cfg.Logger, &children)
	return nil
}

// mounterHandler serves the mounter's health, generation
// (mountergen.go) and launch requests; children counts the processes it
// started that still run.
func mounterHandler(cfg MounterConfig, logDir string, children *sync.WaitGroup) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	generationHandlers(mux, cfg)
	mux.HandleFunc("POST /v1/launch", func(w http.ResponseWriter, r *http.Request) {
		var req launchRequest
		resp := launchResponse{}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else if err := checkLaunch(req, logDir); err != nil {
			resp.Error = err.Error()
		} else if pid, err := startCounted(cfg.CachefsBinary, req.Args, req.Env, req.Log, children); err != nil {
			resp.Error = err.Error()
		} else {
			resp.PID = pid
			cfg.Logger.Info("launched mount process", "pid", pid, "mountpoint", req.Args[2])
		}
		if resp.Error != "" {
			cfg.Logger.Warn("launch refused", "err", resp.Error)
			w.WriteHeader(http.StatusBadRequest)
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
	return mux
}

// mounterSocket is the socket path a mounter serves. path and log are
// immutable; mu guards ours, the socket file this mounter serves, and
// serializes serving a new one with closing the server.
type mounterSocket struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex
	ours os.FileInfo
}

// removeIfOurs removes the socket path if it is still this mounter's.
func (s *mounterSocket) removeIfOurs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, err := os.Stat(s.path); err == nil && os.SameFile(s.ours, cur) {
		_ = os.Remove(s.path)
	}
}

// keep serves a new socket when ours is gone, until ctx ends. A mounter of
// an older version removes the socket path when it stops, whoever's socket
// it is then (an older node plugin pod's mounter container, deleted after
// this DaemonSet's mounter took over). One that is there but not ours is a
// newer mounter's: it is left alone.
func (s *mounterSocket) keep(ctx context.Context, srv *http.Server) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := os.Stat(s.path); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s.mu.Lock()
		if ctx.Err() == nil {
			if ln2, fi, err := listenSocket(s.path); err != nil {
				s.log.Warn("mounter socket removed; cannot serve a new one", "err", err)
			} else {
				s.ours = fi
				s.log.Warn("mounter socket removed by someone else; serving a new one", "socket", s.path)
				go func() { _ = srv.Serve(ln2) }()
			}
		}
		s.mu.Unlock()
	}
}

// listenSocket serves path, a unix socket only root may use, and returns
// its file. The socket path is shared: a newer mounter (its pod replacing
// this one, or a mounter DaemonSet replacing the mounter container of an
// older node plugin pod) may replace our socket by its own, so it is never
// removed by path alone (net.UnixListener's default on Close), which would
// cut the driver off from the newer mounter: RunMounter removes it only if
// it is still its own.
func listenSocket(path string) (net.Listener, os.FileInfo, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("csi: mounter: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fi, err := os.Stat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("csi: mounter: %w", err)
	}
	return ln, fi, nil
}

// checkLaunch accepts only `mount SOURCE MOUNTPOINT --flags…` with known
// secret keys and a log file under logDir. The credentials descriptor is
// the mounter's to name (startDetached), not the caller's.
func checkLaunch(req launchRequest, logDir string) error {
	if len(req.Args) < 3 || req.Args[0] != mountapi.Command {
		return errors.New("only `cachefs mount SOURCE MOUNTPOINT …` may be launched")
	}
	for _, a := range req.Args[3:] {
		// Descriptors are the mounter's (credentials) and the
		// supervisor's (a recovered connection) to name.
		for _, f := range []string{mountapi.FlagCredentialsFD, mountapi.FlagRecoverFD} {
			if a == "--"+f || strings.HasPrefix(a, "--"+f+"=") {
				return fmt.Errorf("--%s is set by the mounter, not in a request", f)
			}
		}
	}
	for _, kv := range req.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(secretKeys, k) {
			return fmt.Errorf("environment variable %q is not allowed", k)
		}
	}
	if filepath.Dir(filepath.Clean(req.Log)) != logDir || !strings.HasSuffix(req.Log, ".log") {
		return fmt.Errorf("log %q must be a .log file in %s", req.Log, logDir)
	}
	return nil
}
