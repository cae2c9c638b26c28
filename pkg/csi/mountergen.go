package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Mounter generations (docs/CSI.md "Restarts and upgrades"): in a
// RollingUpdate with surge two mounter pods run on a node for a while, the
// new one serving the socket. It answers GET /v1/info (its pid and start
// ticks: the node plugin moves every mount whose supervisor is not its
// child to it, mounterfollow.go) and GET /readyz (200 only once every live
// dataset mount of the node is its child), so the DaemonSet deletes the old
// pod only after the mounts moved. The old mounter exits once its children
// are gone (handed over: their supervisors exit 0).

// mounterInfo is GET /v1/info's answer: who the mounter at the socket is.
type mounterInfo struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

// maxDatasetRecord bounds a dataset record readyz reads.
const maxDatasetRecord = 1 << 20

// generationHandlers adds /v1/info and /readyz to the mounter's mux.
func generationHandlers(mux *http.ServeMux, cfg MounterConfig) {
	self := os.Getpid()
	ticks, _ := startTicks(self)
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(mounterInfo{PID: self, StartTicks: ticks})
	})
	datasets := filepath.Join(cfg.StateDir, "node", "datasets")
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		others, err := mountsNotChildOf(datasets, self)
		switch {
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "cannot read the node's dataset mounts: %v\n", err)
		case others > 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%d dataset mounts are not this mounter's yet\n", others)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
}

// mountsNotChildOf counts the live dataset mounts recorded in dir whose
// process is not a child of pid.
func mountsNotChildOf(dir string, pid int) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		var ds struct {
			PID        int    `json:"pid"`
			StartTicks uint64 `json:"startTicks"`
		}
		b, err := readBounded(f, maxDatasetRecord)
		if err != nil || json.Unmarshal(b, &ds) != nil {
			continue // being rewritten, or not a record: the next probe sees it
		}
		if processAlive(ds.PID, ds.StartTicks) && parentPID(ds.PID) != pid {
			n++
		}
	}
	return n, nil
}

// readBounded reads at most limit bytes of path.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// startCounted is startReaped for the mounter: children counts the
// process until it is reaped.
func startCounted(binary string, args, creds []string, logPath string, children *sync.WaitGroup) (int, error) {
	cmd, err := startDetached(binary, args, creds, logPath)
	if err != nil {
		return 0, err
	}
	children.Add(1)
	go func() {
		defer children.Done()
		_ = cmd.Wait()
	}()
	return cmd.Process.Pid, nil
}

// waitChildren waits until the mounter's children are gone: handed over
// to a newer mounter's, or stopped. The pod's grace period bounds it.
func waitChildren(log *slog.Logger, children *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { children.Wait(); close(done) }()
	select {
	case <-done:
	default:
		log.Info("mounter stopped serving; waiting for its mount processes to move to a newer mounter or stop")
		<-done
	}
	log.Info("mounter stopped; no mount process of its own runs")
}

// ProbeMounter asks the mounter at endpoint (unix:///path) whether it is
// ready (GET /readyz): nil iff it answered 200. For the mounter pod's
// exec readiness probe (`csi-driver --mode probe-mounter`).
func ProbeMounter(ctx context.Context, endpoint string) error {
	m, err := newMounterLauncher(endpoint)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mounter/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return fmt.Errorf("csi: mounter: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("csi: mounter not ready: %s", b)
	}
	return nil
}
