package csi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/fusectl"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// datasetMount is one `cachefs mount` process serving one set of volume
// parameters on this node, mounted at MountPoint; volumes bind it. Persisted
// as JSON so a restarted driver can re-adopt it.
type datasetMount struct {
	Key        string       `json:"key"`
	Params     volumeParams `json:"params"`
	MountPoint string       `json:"mountPoint"`
	CacheDir   string       `json:"cacheDir"`
	PID        int          `json:"pid"`
	StartTicks uint64       `json:"startTicks"` // guards against PID reuse
	Users      []string     `json:"users"`      // volume ids
	// Credentials: the mount was started with credentials of its own
	// (set by start): it must never be restarted without them.
	Credentials bool `json:"credentials,omitempty"`
	// PeerGroup and PeerPort: a cluster-scope mount's discovery group and
	// peer port on this node (peers.go); "" and 0 in node scope.
	PeerGroup string `json:"peerGroup,omitempty"`
	PeerPort  int    `json:"peerPort,omitempty"`
}

// identity copies the fields of ds that never change once it is recorded
// (its key, directories and the parameters that make its key), so that a
// caller without ds's lock may read them while a start or repair changes
// the others.
func (ds *datasetMount) identity() *datasetMount {
	p := &ds.Params // field by field: Prefetch may change meanwhile
	return &datasetMount{
		Key: ds.Key, MountPoint: ds.MountPoint, CacheDir: ds.CacheDir,
		Params: volumeParams{Source: p.Source, CacheSize: p.CacheSize, Manifest: p.Manifest, Policy: p.Policy, ReadaheadFiles: p.ReadaheadFiles, CacheScope: p.CacheScope},
	}
}

// Directory layout under the state dir.
func (n *nodeState) datasetPath(key string) string {
	return filepath.Join(n.cfg.dir, "datasets", key+".json")
}
func (n *nodeState) secretPath(key string) string {
	return filepath.Join(n.cfg.dir, "secrets", key+".env")
}
func (n *nodeState) logPath(key string) string   { return filepath.Join(n.cfg.dir, "logs", key+".log") }
func (n *nodeState) mountPath(key string) string { return filepath.Join(n.cfg.dir, "mnt", key) }

// processAlive reports whether pid still runs the process started at ticks.
func processAlive(pid int, ticks uint64) bool {
	if pid <= 0 {
		return false
	}
	t, err := startTicks(pid)
	return err == nil && t == ticks
}

// startTicks reads a process's start time (field 22 of /proc/PID/stat).
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc %d: bad stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("proc %d: short stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("proc %d: exited", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// healthy reports nil when the dataset's process runs and its mount answers.
func (n *nodeState) healthy(ds *datasetMount) error {
	if !processAlive(ds.PID, ds.StartTicks) {
		return fmt.Errorf("mount process %d is gone", ds.PID)
	}
	return checkMount(ds.MountPoint)
}

// start launches the mount process for ds (through the node's launcher) and
// waits until the mount is live. Its credentials (from the 0600 secrets
// file) reach it through a pipe only (see startDetached): never its
// environment, argv or logs.
func (n *nodeState) start(ds *datasetMount) error {
	// A dead mount left at the mount point answers ENOTCONN: clear it first.
	if err := unmountAll(ds.MountPoint); err != nil {
		return err
	}
	for _, dir := range []string{ds.MountPoint, ds.CacheDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("csi: %w", err)
		}
	}
	creds, err := n.readSecrets(ds.Key)
	if err != nil {
		return err
	}
	if len(creds) > 0 {
		ds.Credentials = true
	} else if ds.Credentials {
		return fmt.Errorf("csi: dataset mount %s of %s cannot start: %w; the next stage of one of its volumes, with its secret, brings them back", ds.Key, ds.Params.Source, errCredentialsLost)
	}
	if ds.PeerGroup != "" {
		if n.cfg.peer == nil {
			return fmt.Errorf("csi: dataset mount %s of %s is cluster scope, and this node plugin has no --peer-listen now", ds.Key, ds.Params.Source)
		}
		if err := n.joinCluster(ds); err != nil {
			return err
		}
	}
	opts := n.commandOptions(ds)
	args := opts.Args()
	logStart := n.logSize(ds.Key)
	pid, err := n.cfg.launcher.launch(args, creds, n.logPath(ds.Key))
	if err != nil {
		return err
	}
	ds.PID = pid
	ds.StartTicks, _ = startTicks(pid)

	deadline := time.Now().Add(n.cfg.mountTimeout)
	for {
		time.Sleep(20 * time.Millisecond)
		if !processAlive(ds.PID, ds.StartTicks) {
			return n.exited(ds, logStart)
		}
		if ok, fstype, _ := isMounted(ds.MountPoint); ok && strings.HasPrefix(fstype, "fuse") {
			if checkMount(ds.MountPoint) == nil {
				n.cfg.log.Info("dataset mounted", "key", ds.Key, "source", ds.Params.Source, "pid", ds.PID, "mountpoint", ds.MountPoint)
				n.hold(ds, holdWait)
				return nil
			}
		}
		if time.Now().After(deadline) {
			conn, isFUSE := fuseConn(ds.MountPoint)
			killGroup(ds.PID)
			n.reap(ds, conn, isFUSE) // no mount process is left behind a failed start
			_ = unmountAll(ds.MountPoint)
			return fmt.Errorf("csi: cachefs mount of %s not live after %s: %s", ds.Params.Source, n.cfg.mountTimeout, n.logTail(ds.Key, logStart))
		}
	}
}

// commandOptions are the `cachefs mount` options of ds: a supervised
// mount (the supervisor, the launcher's child, holds its connection and
// restarts a mount process that dies on it).
func (n *nodeState) commandOptions(ds *datasetMount) mountapi.CommandOptions {
	opts := mountapi.CommandOptions{
		Source:         ds.Params.Source,
		Mountpoint:     ds.MountPoint,
		CacheDir:       ds.CacheDir,
		CacheSize:      ds.Params.CacheSize,
		Policy:         ds.Params.Policy,
		Manifest:       ds.Params.Manifest,
		ReadaheadFiles: readaheadArg(ds.Params.ReadaheadFiles),
		LogFormat:      mountapi.LogFormatJSON,
		// Every mount the driver starts is a tenant's: closed egress.
		RestrictEgress: true,
		EgressRules:    strings.Join(n.cfg.egressRules, ","),
		MaxDirEntries:  n.cfg.maxDirEntries,
		Supervise:      true,
	}
	n.clusterArgs(ds, &opts)
	return opts
}

// stop ends the dataset's mount process: SIGTERM (it unmounts itself), then
// SIGKILL and a lazy unmount if it does not go within 10 s.
func (n *nodeState) stop(ds *datasetMount) error {
	n.unhold(ds.Key) // its supervisor's exit is no death to recover
	conn, isFUSE := fuseConn(ds.MountPoint)
	if processAlive(ds.PID, ds.StartTicks) {
		_ = syscall.Kill(ds.PID, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for processAlive(ds.PID, ds.StartTicks) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if processAlive(ds.PID, ds.StartTicks) {
			n.cfg.log.Warn("mount process ignored SIGTERM; killing it", "key", ds.Key, "pid", ds.PID)
			killGroup(ds.PID)
		}
	}
	n.reap(ds, conn, isFUSE)
	if err := unmountAll(ds.MountPoint); err != nil {
		return err
	}
	if err := os.Remove(ds.MountPoint); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.cfg.log.Warn("cannot remove dataset mount point", "path", ds.MountPoint, "err", err)
	}
	return nil
}

// reap waits, up to 5 s, for a mount process sent SIGKILL (or one that
// is exiting) to be gone; one that survives, blocked on its own FUSE mount
// (conn, when isFUSE), has that connection aborted (package fusectl) and
// is waited for again.
func (n *nodeState) reap(ds *datasetMount, conn uint32, isFUSE bool) {
	for i := 0; i < 250 && processAlive(ds.PID, ds.StartTicks); i++ {
		time.Sleep(20 * time.Millisecond) // after SIGKILL: until the kernel has reaped it
	}
	if processAlive(ds.PID, ds.StartTicks) && isFUSE {
		// Killed, yet alive: it waits on its own mount (package fusectl).
		n.cfg.log.Warn("mount process survived SIGKILL; aborting its FUSE connection", "key", ds.Key, "pid", ds.PID, "conn", conn)
		if err := fusectl.Abort(conn); err != nil {
			n.cfg.log.Warn("cannot abort the FUSE connection", "key", ds.Key, "err", err)
		}
		for i := 0; i < 250 && processAlive(ds.PID, ds.StartTicks); i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// killGroup sends SIGKILL to pid and its process group: a supervisor
// (launched in its own session, so its group is its pid) and the mount
// process it runs.
func killGroup(pid int) {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// mountExit is a mount process that exited before its mount was live, with
// the failure line it wrote last to its log (package exitcode). Without
// one (it was killed, or crashed) Failure.Code is exitcode.Internal.
type mountExit struct {
	source  string
	failure exitcode.Failure
	tail    string // the log since the launch, when there is no failure line
}

func (e *mountExit) Error() string {
	f := e.failure
	if f.Error == "" {
		return fmt.Sprintf("csi: cachefs mount of %s exited: %s", e.source, e.tail)
	}
	return fmt.Sprintf("csi: cachefs mount of %s failed (exit code %d, %s): %s", e.source, f.Code, f.Reason, f.Error)
}

// exited reads why ds's mount process exited from its log since offset.
// The log is read in both launcher modes: the driver is not the parent of
// a process a mounter started, so it cannot wait(2) for its status.
func (n *nodeState) exited(ds *datasetMount, offset int64) error {
	e := &mountExit{source: ds.Params.Source, failure: exitcode.Failure{Code: exitcode.Internal, Reason: exitcode.Internal.Reason()}}
	b, _ := readFrom(n.logPath(ds.Key), offset)
	if f, ok := exitcode.LastFailure(b); ok {
		e.failure = f
	} else {
		e.tail = n.logTail(ds.Key, offset)
	}
	return e
}

// readFrom reads path from offset on (at most its last 1 MiB). A file
// shorter than offset was truncated since (rotated, see mountlogs.go): all
// of it was written after offset was taken, and is read.
func readFrom(path string, offset int64) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) >= offset {
		b = b[offset:]
	}
	return b[max(len(b)-1<<20, 0):], nil
}

// logTail returns the mount log written since offset (at most 2 KiB), for
// error messages. cachefs never logs credentials.
func (n *nodeState) logTail(key string, offset int64) string {
	b, _ := readFrom(n.logPath(key), offset)
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return "(no output)"
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}

// writeSecrets stores credentials for restarts of the mount process, 0600.
func (n *nodeState) writeSecrets(key string, secrets map[string]string) error {
	if len(secrets) == 0 {
		return nil
	}
	var b strings.Builder
	for _, k := range secretKeys {
		if v, ok := secrets[k]; ok {
			if strings.ContainsAny(v, "\n\x00") {
				return fmt.Errorf("csi: secret %s holds a newline or NUL", k)
			}
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
	}
	if err := writeFileAtomic(n.secretPath(key), []byte(b.String())); err != nil {
		return fmt.Errorf("csi: write secrets: %w", err)
	}
	return nil
}

// readSecrets returns the KEY=VALUE lines of the dataset's secrets file:
// none when it has none.
func (n *nodeState) readSecrets(key string) ([]string, error) {
	b, err := os.ReadFile(n.secretPath(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("csi: read secrets: %w", err)
	}
	var creds []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && slices.Contains(secretKeys, k) {
			creds = append(creds, line)
		}
	}
	return creds, nil
}

// readaheadArg is the --readahead-files value for a volume's readaheadFiles:
// "" (the mount's default, auto) when unset.
func readaheadArg(n *int) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(*n)
}
